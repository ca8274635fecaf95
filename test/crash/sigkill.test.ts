/**
 * Recovery matrix row "process crash (SIGKILL)": a real child process running 50 threads is killed
 * with SIGKILL at random moments; after each kill a new process recovers the data directory.
 * SPINDLE_CRASH_KILLS sets the number of kills (default 20).
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { readThreadFiles, verifyReplay } from '../../src/index.js'
import type { Durability } from '../../src/index.js'
import { durableSizes } from './trackDurable.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const KILLS = Number(process.env.SPINDLE_CRASH_KILLS ?? 20)
const THREADS = 50
// A cap, not the work: threads go on until the test writes \`finish\` (worker.ts), so every kill
// lands while they run, on a machine of any speed (a fixed amount of work finished after 14 of
// 20 kills on a fast one).
const TURNS = 1_000

function runWorker(
  dir: string,
  killAfterMs: number | null,
  durability: Durability,
  trackDurable = false,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; pid: number }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/crash/worker.js'), dir, String(THREADS), String(TURNS), durability], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SPINDLE_TRACK_DURABLE: trackDurable ? '1' : '0' },
    })
    let stderr = ''
    child.stderr.on('data', (d) => (stderr += d))
    // Timed from the worker's "loaded": the kill lands in spindle's start-up, recovery, spawning or
    // turn loop, however long the machine takes to load the modules.
    let timer: NodeJS.Timeout | null = null
    child.stdout.on('data', (d: Buffer) => {
      if (killAfterMs !== null && timer === null && d.toString().includes('loaded')) timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs)
    })
    child.on('exit', (code, signal) => {
      if (timer) clearTimeout(timer)
      resolve({ code, signal, stderr, pid: child.pid! })
    })
  })
}

/**
 * Simulates a power loss right after the kill: every transcript and journal file is cut back to
 * the bytes a completed fdatasync made durable (the worker records them: trackDurable.ts); every
 * other cut file keeps a torn start of what followed, as a write the disk half finished. Before
 * cutting, it keeps in `acknowledged` the bytes of each transcript that a journal sync had vouched
 * for: they must all be there, unchanged, at the end. Returns how many files lost bytes.
 */
function losePageCache(dir: string, acknowledged: Map<string, Buffer>, stats: { ackedNotDurable: number }): number {
  const { durable, acknowledged: acked } = durableSizes(fs.realpathSync(dir))
  const files = [
    ...(fs.existsSync(path.join(dir, 'threads')) ? fs.readdirSync(path.join(dir, 'threads')) : []).map((id) => path.join(dir, 'threads', id, 'transcript.jsonl')),
    ...(fs.existsSync(path.join(dir, 'journal')) ? fs.readdirSync(path.join(dir, 'journal')).map((n) => path.join(dir, 'journal', n)) : []),
  ]
  let cut = 0
  for (const file of files) {
    if (!fs.existsSync(file)) continue
    const real = fs.realpathSync(file)
    const bytes = fs.readFileSync(file)
    const ack = acked.get(real) ?? 0
    if (ack > (acknowledged.get(real)?.length ?? 0)) acknowledged.set(real, bytes.subarray(0, ack))
    const keep = durable.get(real) ?? 0
    // Acknowledged but not yet durable in the file: only the journal can give these back.
    if (ack > keep) stats.ackedNotDurable++
    if (bytes.length <= keep) continue
    fs.truncateSync(file, keep)
    if (cut++ % 2 === 0) fs.appendFileSync(file, bytes.subarray(keep, keep + Math.floor((bytes.length - keep) / 2)))
  }
  // What survives is what the next process finds durable; the log starts again from it.
  fs.rmSync(path.join(dir, 'durable.log'), { force: true })
  for (const file of files) if (fs.existsSync(file)) fs.appendFileSync(path.join(dir, 'durable.log'), `${fs.realpathSync(file)}\t${fs.statSync(file).size}\n`)
  return cut
}

// 'process' promises to survive a process crash too: it gets the same kills, half as many. With
// 'fsync', a power loss after some kills takes what the thread files had not fdatasynced.
describe.each([
  ['fsync', KILLS, false],
  ['process', Math.max(1, Math.floor(KILLS / 2)), false],
  ['fsync', Math.max(1, Math.floor(KILLS / 2)), true],
] as const)('crash recovery under SIGKILL, durability %s, %i kills, power loss %s', (durability, kills, powerLoss) => {
  it(`should finish every thread exactly once across ${kills} kills`, async () => {
    const dir = tempDir('spindle-crash')
    let killed = 0
    let finishedEarly = false
    let linesCut = 0
    const acknowledged = new Map<string, Buffer>()
    const stats = { ackedNotDurable: 0 }
    // With a power loss, go on (up to four times as many kills: on a machine busy with other test
    // files, a kill lands in that window less often) until one took acknowledged lines.
    const more = (): boolean => powerLoss && stats.ackedNotDurable === 0 && killed < kills * 4
    while ((killed < kills || more()) && !finishedEarly) {
      // Random moments: during start-up, recovery, spawning and the turn loop.
      const result = await runWorker(dir, 80 + Math.floor(Math.random() * 500), durability, powerLoss)
      if (result.signal === 'SIGKILL') {
        killed++
        if (powerLoss) linesCut += losePageCache(dir, acknowledged, stats)
      } else {
        expect(result.code, result.stderr).toBe(0)
        finishedEarly = true
      }
    }
    expect(killed, 'the workload reached its turn cap before every kill landed').toBeGreaterThanOrEqual(kills)
    // The power loss took something each time it could: the journal was there to give it back.
    if (powerLoss) expect(linesCut).toBeGreaterThan(0)
    // And at least once it took lines that had been acknowledged: the write-back was needed.
    if (powerLoss) expect(stats.ackedNotDurable).toBeGreaterThan(0)
    fs.writeFileSync(path.join(dir, 'finish'), '')
    const final = await runWorker(dir, null, durability, powerLoss)
    expect(final.code, final.stderr).toBe(0)
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability })
    const rows = registry.list()
    registry.close()
    expect(rows).toHaveLength(THREADS)
    // Nothing acknowledged was lost or changed: every thread's transcript still starts with what a
    // journal sync vouched for before each power loss. (A thread whose spawn never returned has no
    // registry row: it ran nothing, and nothing of it was promised.)
    if (powerLoss) expect(acknowledged.size).toBeGreaterThan(0)
    const registered = new Set(rows.map((r) => r.id))
    for (const [file, bytes] of acknowledged) {
      if (!registered.has(path.basename(path.dirname(file)))) continue
      expect(fs.readFileSync(file).subarray(0, bytes.length).equals(bytes), `acknowledged bytes of ${file}`).toBe(true)
    }
    let charged = 0
    /** Every charge call the transcripts hold, by idempotency key: whether its recorded result says it ran or was interrupted. */
    const chargeCalls = new Map<string, 'ok' | 'interrupted'>()
    for (const row of rows) {
      if (row.status === 'error') {
        // A kill between registering a thread and its first transcript line: the spawn was never
        // acknowledged, and recovery says so rather than inventing a thread.
        expect(row.error?.code, `${row.id}: ${row.error?.message}`).toBe('FILES_MISSING')
        continue
      }
      expect(row.status, row.id).toBe('completed')
      const files = readThreadFiles(dir, row.id)
      expect(files.envelope?.status, row.id).toBe(row.status)
      expect(files.envelope?.threadId).toBe(row.id)
      const check = verifyReplay(dir, row.id)
      expect(check.matches, `replay of ${row.id}`).toBe(true)
      // Each thread ran on from wherever the kills left it and ended at its next turn after finish.
      expect(row.cost?.turns, row.id).toBeGreaterThanOrEqual(1)
      expect(row.cost?.turns, row.id).toBeLessThan(TURNS)
      // It charges on every third turn before its last (turns count from 1).
      charged += Math.floor((row.cost!.turns - 1) / 3)
      const results = new Map<string, { ok: boolean; output: { error?: string } }>()
      for (const e of files.entries) if (e.type === 'TOOL_DONE') results.set(`${(e.data as { turn: number }).turn}:${(e.data as { callId: string }).callId}`, e.data as never)
      for (const e of files.entries) {
        if (e.type !== 'MODEL_REPLIED') continue
        const { turn, toolCalls } = e.data as { turn: number; toolCalls: Array<{ id: string; name: string }> }
        for (const call of toolCalls.filter((c) => c.name === 'charge')) {
          const result = results.get(`${turn}:${call.id}`)
          expect(result, `${row.id} turn ${turn}: the charge has a recorded result`).toBeDefined()
          if (!result!.ok) expect(result!.output.error, `${row.id} turn ${turn}`).toBe('TOOL_INTERRUPTED')
          chargeCalls.set(`${row.id}:${turn}:${call.id}`, result!.ok ? 'ok' : 'interrupted')
        }
      }
    }
    expect(rows.filter((r) => r.status === 'completed').length).toBeGreaterThanOrEqual(THREADS - 2)

    // Effects once: no charge ran twice under the same idempotency key.
    const charges = fs.readFileSync(path.join(dir, 'charges.log'), 'utf8').trim().split('\n').map((l) => l.split(' ')[0]!)
    expect(new Set(charges).size).toBe(charges.length)
    // Each thread charges on every third turn. Every charge the log holds was asked for by a
    // recorded reply, and every charge whose result says it ran is in the log. A charge a kill
    // interrupted (its intent recorded, its result not) is reported to the model as
    // TOOL_INTERRUPTED, whether or not it ran before the kill, and never run again; a kill can
    // interrupt at most one tool call per thread.
    expect(charges.length).toBeLessThanOrEqual(charged)
    expect(chargeCalls.size).toBe(charged)
    const logged = new Set(charges)
    for (const key of logged) expect(chargeCalls.has(key), `${key} ran without a recorded reply asking for it`).toBe(true)
    let interrupted = 0
    for (const [key, result] of chargeCalls) {
      if (result === 'ok') expect(logged.has(key), `${key} is recorded as run but never ran`).toBe(true)
      else interrupted++
    }
    expect(interrupted).toBeLessThanOrEqual(killed * THREADS)
    expect(charges.length).toBeGreaterThanOrEqual(charged - interrupted)
  }, 600_000)
})
