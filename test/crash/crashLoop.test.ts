/**
 * Crash loops across processes: a thread whose tool ends the whole process is rehydrated by every
 * new process, which then dies in the same place. Real child processes (crashLoopWorker.ts) run a
 * data directory again and again; the registry counts the recoveries that found a thread at the
 * same point, and past `supervision.maxRecoveries` the thread is quarantined so the rest run.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { RecoveryCount, ThreadRecord } from '../../persistence/types.js'
import { z } from 'zod'
import { createRuntime, defineTool, readThreadFiles, scriptedModel, systemDefaults, verifyReplay } from '../../src/index.js'
import type { RecoveryReport } from '../../src/index.js'
import { MODEL_SUSPECTS_ALONE } from '../../src/runtime/crashLoop.js'
import { doctor } from '../../src/operator/operator.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { FLAKY_TURNS, crashLoopModel, crashLoopTools } from './crashLoopWorkload.js'

const ORDINARY = 4
const MAX_RECOVERIES = systemDefaults().supervision.maxRecoveries!
// Enough starts for either scenario to finish, with room to spare: a loop that is never broken fails the test.
const MAX_RUNS = 20

interface Run {
  code: number | null
  signal: NodeJS.Signals | null
  stderr: string
  recovery: RecoveryReport | null
}

/**
 * One crashLoopWorker process on `dir`: `scenario` with `threads` (the ordinary threads beside a
 * poison or flaky one, or the slow threads); with `killWhenCalling`, killed with SIGKILL once each
 * slow thread is in its model call.
 */
function runWorker(dir: string, scenario: 'poison' | 'flaky' | 'slow' | 'slowpoison', threads = ORDINARY, killWhenCalling = false): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/crash/crashLoopWorker.js'), dir, scenario, String(threads)], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => {
      stdout += d
      if (killWhenCalling && stdout.includes('all calling')) child.kill('SIGKILL')
    })
    child.stderr.on('data', (d) => (stderr += d))
    child.on('exit', (code, signal) => {
      const line = stdout.split('\n').find((l) => l.startsWith('{'))
      resolve({ code, signal, stderr, recovery: line ? (JSON.parse(line) as RecoveryReport) : null })
    })
  })
}

/** Starts a process on `dir` until one finishes its workload (exit code 0); `after` sees the directory after each start. */
async function runUntilDone(
  dir: string,
  scenario: 'poison' | 'flaky' | 'slowpoison',
  after: (run: Run, index: number) => void = () => {},
  threads = ORDINARY,
): Promise<Run[]> {
  const runs: Run[] = []
  while (runs.length < MAX_RUNS) {
    const run = await runWorker(dir, scenario, threads)
    runs.push(run)
    after(run, runs.length - 1)
    if (run.code === 0) break
  }
  return runs
}

function registryOf<T>(dir: string, fn: (registry: ReturnType<typeof openSqliteRegistry>) => T): T {
  const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' })
  try {
    return fn(registry)
  } finally {
    registry.close()
  }
}

function rowNamed(rows: ThreadRecord[], name: string): ThreadRecord {
  const row = rows.find((r) => r.directiveName === name)
  expect(row, `a thread named ${name}`).toBeDefined()
  return row!
}

/** One stuckSuspectWorker process: killed with SIGKILL at `stuck in tool` unless it spawns ordinary threads. */
function runStuckWorker(dir: string, ordinary: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; report: any }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/crash/stuckSuspectWorker.js'), dir, String(ordinary)], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    // A bound for a stuck test, not a speed check: without the bound on its time alone it hangs.
    const stop = setTimeout(() => child.kill('SIGKILL'), 60_000)
    child.stdout.on('data', (d) => {
      stdout += d
      if (ordinary === 0 && stdout.includes('stuck in tool')) child.kill('SIGKILL')
    })
    child.stderr.on('data', (d) => (stderr += d))
    child.on('exit', (code, signal) => {
      clearTimeout(stop)
      const line = stdout.split('\n').find((l) => l.startsWith('{'))
      resolve({ code, signal, stderr, report: line ? JSON.parse(line) : null })
    })
  })
}

describe('crash loops across processes', () => {
  it('should let the other threads run once a suspect has run alone for supervision.aloneMs in a tool that never returns', async () => {
    // Setup: a thread's tool never returns, and twice the process running it is killed there.
    const dir = tempDir('spindle-stuck-suspect')
    for (let i = 0; i < 2; i++) expect((await runStuckWorker(dir, 0)).signal).toBe('SIGKILL')
    expect(registryOf(dir, (r) => r.recoveryCount(rowNamed(r.list(), 'stuck').id))).toMatchObject({ count: 1 })

    // The third process finds it there again: a suspect, run alone. Three new threads wait behind it.
    const third = await runStuckWorker(dir, 3)
    expect(third.code, third.stderr).toBe(0)
    // After: its time alone ran out and the others ran; it alone was counted for this recovery.
    expect(third.report).toMatchObject({ statuses: ['completed', 'completed', 'completed'], problems: ['CRASH_LOOP_PROBATION_ENDED'] })
    expect(registryOf(dir, (r) => r.recoveryCount(rowNamed(r.list(), 'stuck').id))).toMatchObject({ count: 2 })
    expect(registryOf(dir, (r) => rowNamed(r.list(), 'stuck').status)).toBe('running')
  })

  it('should run alone only the first few threads found twice in the same model call, then the rest together, uncounted', async () => {
    const dir = tempDir('spindle-crashloop')
    const together = 2
    const threads = MODEL_SUSPECTS_ALONE + together
    // Two processes die while every thread waits for its model (a slow provider, and crashes that
    // have nothing to do with it): the recovery after them finds each at the same point twice.
    for (let i = 0; i < 2; i++) {
      const run = await runWorker(dir, 'slow', threads, true)
      expect(run.signal, run.stderr).toBe('SIGKILL')
    }
    const log = path.join(dir, 'calls.log')
    fs.writeFileSync(log, '')
    const last = await runWorker(dir, 'slow', threads)
    expect(last.code, last.stderr).toBe(0)
    expect(last.recovery?.resumed).toHaveLength(threads)
    expect(last.recovery?.quarantined).toEqual([])
    // MODEL_SUSPECTS_ALONE calls one after another, each answered before the next started; then the
    // others at once, none waiting for another's reply (not hours of calls one at a time).
    const lines = fs.readFileSync(log, 'utf8').trim().split('\n')
    expect(lines).toHaveLength(2 * threads)
    const alone = lines.slice(0, 2 * MODEL_SUSPECTS_ALONE)
    for (let i = 0; i < alone.length; i += 2) expect(alone[i + 1]).toBe(alone[i]!.replace('start ', 'end '))
    expect(lines.slice(2 * MODEL_SUSPECTS_ALONE).map((line) => line.split(' ')[0])).toEqual([...Array<string>(together).fill('start'), ...Array<string>(together).fill('end')])

    const rows = registryOf(dir, (registry) => registry.list())
    expect(rows).toHaveLength(threads)
    const ranAlone = new Set(alone.filter((line) => line.startsWith('start ')).map((line) => line.slice('start '.length)))
    for (const row of rows) {
      expect(row.status).toBe('completed')
      // Those that ran alone were counted before they ran (had this process died, the next recovery
      // would know); the others' deaths together would prove nothing, and they were not.
      expect(registryOf(dir, (registry) => registry.recoveryCount(row.id))?.count, row.directiveName).toBe(ranAlone.has(row.id) ? 2 : 1)
    }
  }, 120_000)


  it('should quarantine a thread whose model call ends the process, though more threads wait in model calls than run alone', async () => {
    const dir = tempDir('spindle-crashloop')
    const threads = MODEL_SUSPECTS_ALONE + 2
    const runs = await runUntilDone(dir, 'slowpoison', undefined, threads)
    const rows = registryOf(dir, (registry) => registry.list())
    const poison = rowNamed(rows, 'mpoison')
    expect(runs.at(-1)!.code, runs.map((r) => r.stderr).join('\n')).toBe(0)
    expect(runs.at(-1)!.recovery?.quarantined).toEqual([poison.id])
    expect(poison.status).toBe('suspended')
    const failure = (readThreadFiles(dir, poison.id).envelope!.snapshot as { context: { lastFailure: { code: string; message: string } } }).context.lastFailure
    expect(failure.code).toBe('CRASH_LOOP')
    expect(failure.message).toContain('calling the model')
    // No thread waiting beside it was quarantined: each ran on to the end.
    for (const row of rows.filter((r) => r.id !== poison.id)) expect(row.status, row.directiveName).toBe('completed')
  }, 300_000)

  it('should quarantine a thread whose tool ends the process every time, and finish every other thread', async () => {
    const dir = tempDir('spindle-crashloop')
    const runs = await runUntilDone(dir, 'poison')
    // The run that spawned it and the next MAX_RECOVERIES, each of which recovered it at the same
    // point and ran it on, died in its tool; the recovery after them quarantined it.
    expect(
      runs.map((r) => r.code),
      runs.map((r) => r.stderr).join('\n'),
    ).toEqual([...Array<number>(MAX_RECOVERIES + 1).fill(1), 0])
    const rows = registryOf(dir, (registry) => registry.list())
    const poison = rowNamed(rows, 'poison')
    expect(runs.at(-1)!.recovery?.quarantined).toEqual([poison.id])
    for (const run of runs.slice(0, -1)) expect(run.recovery?.quarantined ?? []).toEqual([])

    expect(poison.status).toBe('suspended')
    // Issue 22: the registry row itself tells a quarantine from a thread waiting at a limit.
    expect(poison.suspendReason).toBe('crash_loop')
    const files = readThreadFiles(dir, poison.id)
    const context = (files.envelope!.snapshot as { context: { suspendReason: string; lastFailure: { code: string; message: string } } }).context
    expect(context.suspendReason).toBe('crash_loop')
    expect(context.lastFailure.code).toBe('CRASH_LOOP')
    expect(context.lastFailure.message).toContain(poison.id)
    expect(context.lastFailure.message).toContain(`${MAX_RECOVERIES + 1} times in a row`)
    expect(context.lastFailure.message).toContain('the tool "explode"')
    expect(context.lastFailure.message).toContain(`spindle resume ${poison.id}`)
    const quarantined = files.entries.find((e) => e.type === 'QUARANTINED')!
    const stuckAt = (quarantined.data as { seq: number }).seq
    expect(quarantined.data).toMatchObject({ recoveries: MAX_RECOVERIES + 1, seq: stuckAt })
    expect(context.lastFailure.message).toContain(`transcript seq ${stuckAt}`)
    // The point it kept dying at: its reply asking for the tool, and every recovery after it.
    expect(files.entries.find((e) => e.seq === stuckAt)?.type).toBe('MODEL_REPLIED')
    expect(files.entries.filter((e) => e.seq > stuckAt && e.type === 'thread_recovered')).toHaveLength(MAX_RECOVERIES + 1)
    expect(registryOf(dir, (registry) => registry.recoveryCount(poison.id))).toEqual<RecoveryCount>({ count: MAX_RECOVERIES + 1, seq: stuckAt })
    // `spindle doctor` names it, with what to do; a quarantine is no damage to the files.
    expect(doctor(dir).findings.filter((f) => f.kind !== 'lag')).toEqual([
      expect.objectContaining({ threadId: poison.id, kind: 'crash', code: 'CRASH_LOOP', repair: expect.stringContaining(`spindle resume ${poison.id}`) }),
    ])

    // Every other thread ran to the end, though the poison killed the processes they ran in.
    const ordinary = rows.filter((r) => r.id !== poison.id)
    expect(ordinary).toHaveLength(ORDINARY)
    for (const row of ordinary) {
      expect(row.status, `${row.id}: ${JSON.stringify(row.error)}`).toBe('completed')
      expect(row.cost?.turns).toBe(4)
    }
    for (const row of rows) expect(verifyReplay(dir, row.id).matches, `replay of ${row.id}`).toBe(true)

    // A person fixed the tool and resumes the thread: its count starts again, and it finishes.
    const rt = await createRuntime({ dir, model: crashLoopModel(), tools: crashLoopTools(dir, { explodes: false }), durability: 'fsync', userConfig: null })
    try {
      const resumed = await rt.resume(poison.id)
      expect(registryOf(dir, (registry) => registry.recoveryCount(poison.id))).toEqual<RecoveryCount>({ count: 0, seq: stuckAt })
      expect(await resumed.done).toMatchObject({ status: 'completed', result: 'recovered after the fix' })
    } finally {
      await rt.close()
    }
    // The call it kept dying in got a result saying it has none; the model went on from there.
    expect(readThreadFiles(dir, poison.id).entries.filter((e) => e.type === 'tool_calls_repaired')).toHaveLength(1)
    expect(verifyReplay(dir, poison.id).matches).toBe(true)
    expect(doctor(dir).findings).toEqual([])
  }, 300_000)

  it('should not count a clean close as a crash: a thread stopped by rt.close() at the same point again and again runs on', async () => {
    const dir = tempDir('spindle-crashloop')
    let started = 0
    const waitForever = defineTool({
      name: 'wait_for_signal',
      description: 'Runs until it is stopped',
      input: z.object({}),
      idempotent: true,
      execute: (_input, { signal }) => {
        started++
        return new Promise((resolve) => signal.addEventListener('abort', () => resolve({ stopped: true }), { once: true }))
      },
    })
    const model = scriptedModel([{ toolCalls: [{ name: 'wait_for_signal', input: {} }] }, { text: 'unreachable' }])
    // A short grace: the tool runs until it is stopped, so each close waits it out, then aborts it.
    const open = () => createRuntime({ dir, model, tools: [waitForever], durability: 'process', userConfig: null, timeouts: { shutdownGraceMs: 100 } })
    const first = await open()
    const thread = await first.spawn({ directive: { name: 'patient', prompt: 'wait' } })
    while (started < 1) await new Promise((resolve) => setImmediate(resolve))
    await first.close()
    for (let i = 2; i <= MAX_RECOVERIES + 3; i++) {
      const rt = await open()
      try {
        expect(rt.lastRecovery).toMatchObject({ resumed: [thread.id], quarantined: [] })
        while (started < i) await new Promise((resolve) => setImmediate(resolve))
        // Counted while it runs, as any recovery at the same point is …
        expect(registryOf(dir, (registry) => registry.recoveryCount(thread.id))?.count).toBe(1)
      } finally {
        await rt.close()
      }
      // … and forgotten when the runtime closes cleanly.
      expect(registryOf(dir, (registry) => registry.recoveryCount(thread.id))?.count).toBe(0)
    }
  })

  it('should not quarantine a thread that got further between the deaths of its processes', async () => {
    const dir = tempDir('spindle-crashloop')
    const seen: RecoveryCount[] = []
    const runs = await runUntilDone(dir, 'flaky', (run, index) => {
      if (index === 0 || run.code === 0) return
      // Each recovery found it a turn further on: its count is 1 again, at a later seq.
      const rows = registryOf(dir, (registry) => registry.list())
      seen.push(registryOf(dir, (registry) => registry.recoveryCount(rowNamed(rows, 'flaky').id))!)
    })
    // It died once in each of its stumbling turns, more often than maxRecoveries allows at one point.
    expect(FLAKY_TURNS).toBeGreaterThan(MAX_RECOVERIES + 1)
    expect(
      runs.map((r) => r.signal ?? r.code),
      runs.map((r) => r.stderr).join('\n'),
    ).toEqual([...Array<string>(FLAKY_TURNS).fill('SIGKILL'), 0])
    for (const run of runs) expect(run.recovery?.quarantined ?? []).toEqual([])
    expect(seen).toHaveLength(FLAKY_TURNS - 1)
    for (const [i, count] of seen.entries()) {
      expect(count.count, `recovery ${i + 1}`).toBe(1)
      if (i > 0) expect(count.seq!).toBeGreaterThan(seen[i - 1]!.seq!)
    }

    const rows = registryOf(dir, (registry) => registry.list())
    expect(rows).toHaveLength(ORDINARY + 1)
    for (const row of rows) {
      expect(row.status, `${row.id}: ${JSON.stringify(row.error)}`).toBe('completed')
      expect(verifyReplay(dir, row.id).matches, `replay of ${row.id}`).toBe(true)
    }
    expect(rowNamed(rows, 'flaky').cost?.turns).toBe(FLAKY_TURNS + 1)
  }, 300_000)
})
