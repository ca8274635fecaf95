/**
 * Issue 22, item 9: a process stopped by a signal (a deploy, `docker stop`, Ctrl-C) closes its
 * runtime cleanly, and a clean close is not a crash. Real child processes (shutdownWorker.ts) run
 * a data directory; the test signals them at a known point and starts them again. A SIGTERM never
 * counts toward a crash loop; a tool call under way finishes within `timeouts.shutdownGraceMs` and
 * its result is recorded; one that outlasts it is aborted, and the model is told the process shut
 * down. A SIGKILL is still a crash, counted and reported as one.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { readThreadFiles, systemDefaults, verifyReplay } from '../../src/index.js'
import type { RecoveryReport } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const MAX_RECOVERIES = systemDefaults().supervision.maxRecoveries!

interface Run {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  recovery: RecoveryReport | null
  outcome: Record<string, any> | null
}

/** One shutdownWorker process; `signal` is sent to it the first time it prints `at`. */
function runWorker(dir: string, scenario: string, options: { at?: string; signal?: NodeJS.Signals; graceMs?: number } = {}): Promise<Run> {
  const args = [compiled('test/crash/shutdownWorker.js'), dir, scenario, ...(options.graceMs !== undefined ? [String(options.graceMs)] : [])]
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    let sent = false
    child.stdout.on('data', (d: Buffer) => {
      stdout += d
      if (!sent && options.at && options.signal && stdout.split('\n').includes(options.at)) {
        sent = true
        child.kill(options.signal)
      }
    })
    child.stderr.on('data', (d: Buffer) => (stderr += d))
    child.on('exit', (code, signal) => {
      const line = (prefix: string) => stdout.split('\n').find((l) => l.startsWith(`${prefix} `))?.slice(prefix.length + 1)
      const recovery = line('recovery')
      const outcome = line('outcome')
      resolve({ code, signal, stdout, stderr, recovery: recovery ? JSON.parse(recovery) : null, outcome: outcome ? JSON.parse(outcome) : null })
    })
  })
}

function onlyThread(dir: string): { id: string; status: string; count: number } {
  const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' })
  try {
    const rows = registry.list()
    expect(rows).toHaveLength(1)
    return { id: rows[0]!.id, status: rows[0]!.status, count: registry.recoveryCount(rows[0]!.id)?.count ?? 0 }
  } finally {
    registry.close()
  }
}

function entries(dir: string, id: string): Array<{ type: string; data: any }> {
  return readThreadFiles(dir, id).entries as Array<{ type: string; data: any }>
}

function charges(dir: string): string[] {
  const log = path.join(dir, 'charges.log')
  return fs.existsSync(log) ? fs.readFileSync(log, 'utf8').trim().split('\n') : []
}

describe('a runtime stopped by a signal', () => {
  it('should not quarantine a thread whose process got SIGTERM four times while it waited on a slow model, and complete it', async () => {
    // Setup: one thread whose model call takes a minute.
    const dir = tempDir('spindle-sigterm-loop')
    // The fault: each process gets SIGTERM while the call is under way, one time more than
    // supervision.maxRecoveries allows for crashes at one point.
    for (let i = 0; i <= MAX_RECOVERIES; i++) {
      const run = await runWorker(dir, 'slow', { at: 'calling', signal: 'SIGTERM' })
      expect(run.stdout, run.stderr).toContain('closed RUNTIME_CLOSED')
      expect(run.recovery?.quarantined).toEqual([])
      // What must hold: each close was clean, so no recovery is counted against the thread.
      expect(onlyThread(dir)).toMatchObject({ status: 'running', count: 0 })
    }

    const last = await runWorker(dir, 'answer')

    expect(last.recovery).toMatchObject({ resumed: [onlyThread(dir).id], quarantined: [] })
    expect(last.outcome, last.stderr).toMatchObject({ status: 'completed', result: 'answered' })
    expect(verifyReplay(dir, onlyThread(dir).id).matches).toBe(true)
  }, 120_000)

  it('should quarantine a thread whose process was killed with SIGKILL as often, as before', async () => {
    const dir = tempDir('spindle-sigkill-loop')
    for (let i = 0; i <= MAX_RECOVERIES; i++) {
      const run = await runWorker(dir, 'slow', { at: 'calling', signal: 'SIGKILL' })
      expect(run.signal, run.stderr).toBe('SIGKILL')
    }

    const last = await runWorker(dir, 'answer')

    expect(last.recovery?.quarantined).toEqual([onlyThread(dir).id])
    expect(onlyThread(dir).status).toBe('suspended')
  }, 120_000)

  it('should let a non-idempotent tool call under way at SIGTERM finish within the grace, record its result, and not tell the model it was interrupted', async () => {
    const dir = tempDir('spindle-sigterm-tool')
    const stopped = await runWorker(dir, 'charge', { at: 'charging', signal: 'SIGTERM', graceMs: 30_000 })
    expect(stopped.stdout, stopped.stderr).toContain('closed RUNTIME_CLOSED')

    // The call finished during the close: charged once, its result recorded, nothing aborted.
    const { id } = onlyThread(dir)
    expect(charges(dir)).toHaveLength(1)
    const recorded = entries(dir, id)
    expect(recorded.filter((e) => e.type === 'TOOL_DONE').map((e) => [e.data.ok, e.data.output])).toEqual([[true, { charged: true }]])
    expect(recorded.some((e) => e.type === 'tool_aborted_at_shutdown')).toBe(false)
    // Nothing new started after the signal: the next model call is the next process's.
    expect(recorded.filter((e) => e.type === 'MODEL_REPLIED')).toHaveLength(1)

    const next = await runWorker(dir, 'charge')
    expect(next.outcome, next.stderr).toMatchObject({ status: 'completed', result: 'the tool said: {"charged":true}' })
    expect(charges(dir)).toHaveLength(1)
    expect(verifyReplay(dir, id).matches).toBe(true)
  }, 120_000)

  it('should abort a tool call that outlasts the grace, and tell the model on the next run that the process shut down, not that it crashed', async () => {
    const dir = tempDir('spindle-sigterm-grace')
    const stopped = await runWorker(dir, 'charge-forever', { at: 'charging', signal: 'SIGTERM', graceMs: 300 })
    expect(stopped.stdout, stopped.stderr).toContain('closed RUNTIME_CLOSED')
    const { id } = onlyThread(dir)
    expect(entries(dir, id).filter((e) => e.type === 'tool_aborted_at_shutdown')).toEqual([
      expect.objectContaining({ data: expect.objectContaining({ callId: 'call-1', name: 'charge', graceMs: 300 }) }),
    ])

    const next = await runWorker(dir, 'charge')

    const result = entries(dir, id).find((e) => e.type === 'TOOL_DONE')!.data
    expect(result).toMatchObject({ ok: false, output: { error: 'TOOL_INTERRUPTED' } })
    expect(result.output.message).toMatch(/still running when the process shut down/)
    expect(result.output.message).not.toMatch(/crash/)
    expect(next.outcome, next.stderr).toMatchObject({ status: 'completed', result: expect.stringContaining('shut down') })
    // Not run again (the tool is not idempotent), and aborted before it charged.
    expect(charges(dir)).toEqual([])
    expect(verifyReplay(dir, id).matches).toBe(true)
  }, 120_000)

  it('should still tell the model a tool call was interrupted by a crash when its process was killed with SIGKILL', async () => {
    const dir = tempDir('spindle-sigkill-tool')
    const killed = await runWorker(dir, 'charge-forever', { at: 'charging', signal: 'SIGKILL' })
    expect(killed.signal).toBe('SIGKILL')

    const next = await runWorker(dir, 'charge')

    const { id } = onlyThread(dir)
    const result = entries(dir, id).find((e) => e.type === 'TOOL_DONE')!.data
    expect(result).toMatchObject({ ok: false, output: { error: 'TOOL_INTERRUPTED' } })
    expect(result.output.message).toMatch(/interrupted by a crash/)
    expect(next.outcome, next.stderr).toMatchObject({ status: 'completed' })
  }, 120_000)

  it('should leave a host that opts out with shutdownSignals: [] to its own SIGTERM listener, its runtime open', async () => {
    const dir = tempDir('spindle-sigterm-optout')

    const run = await runWorker(dir, 'optout', { at: 'charging', signal: 'SIGTERM' })

    // Its listener ran, the runtime was not closed under it: the thread ran to its end.
    expect(run.stdout).toContain('host got SIGTERM')
    expect(run.stdout).not.toContain('closed RUNTIME_CLOSED')
    expect(run.outcome, run.stderr).toMatchObject({ status: 'completed', result: 'the tool said: {"charged":true}' })
    expect({ code: run.code, signal: run.signal }).toEqual({ code: 0, signal: null })
  }, 120_000)
})
