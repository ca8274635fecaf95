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
import { parseJournal } from '../../persistence/transcriptJournal.js'
import type { JournalRecord } from '../../persistence/transcriptJournal.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const KILLS = Number(process.env.SPINDLE_CRASH_KILLS ?? 20)
const THREADS = 50
// Enough work that every kill lands while threads are still running.
const TURNS = 8 + KILLS

function runWorker(
  dir: string,
  killAfterMs: number | null,
  durability: Durability,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string; pid: number }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/crash/worker.js'), dir, String(THREADS), String(TURNS), durability], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let stderr = ''
    child.stderr.on('data', (d) => (stderr += d))
    const timer = killAfterMs === null ? null : setTimeout(() => child.kill('SIGKILL'), killAfterMs)
    child.on('exit', (code, signal) => {
      if (timer) clearTimeout(timer)
      resolve({ code, signal, stderr, pid: child.pid! })
    })
  })
}

/**
 * Simulates what a power loss right after the kill of process `pid` takes: a thread file is
 * fdatasynced only in the background checkpoint round, so every byte from the first line that a
 * live epoch of that process's journal holds may be gone (the journal itself was fdatasynced;
 * lines an earlier process journaled were made durable before it settled or since). Each file is
 * cut there, and every other one keeps a torn start of its next line, as a write the disk half
 * finished.
 */
function losePageCache(dir: string, pid: number): number {
  const journalDir = path.join(dir, 'journal')
  if (!fs.existsSync(journalDir)) return 0
  const first = new Map<string, JournalRecord>()
  for (const name of fs.readdirSync(journalDir)) {
    const file = path.join(journalDir, name)
    const journal = parseJournal(file, fs.readFileSync(file))
    if (journal.pid !== pid) continue
    for (const [id, records] of journal.threads) {
      for (const r of records) if (!first.has(id) || r.at < first.get(id)!.at) first.set(id, r)
    }
  }
  let cut = 0
  for (const [id, record] of first) {
    const transcript = path.join(dir, 'threads', id, 'transcript.jsonl')
    if (!fs.existsSync(transcript) || String(fs.statSync(transcript, { bigint: true }).ino) !== record.ino) continue
    fs.truncateSync(transcript, record.at)
    if (cut++ % 2 === 0) fs.appendFileSync(transcript, record.line.subarray(0, Math.floor(record.line.length / 2)))
  }
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
    while (killed < kills && !finishedEarly) {
      // Random moments: during start-up, recovery, spawning and the turn loop.
      const result = await runWorker(dir, 80 + Math.floor(Math.random() * 500), durability)
      if (result.signal === 'SIGKILL') {
        killed++
        if (powerLoss) linesCut += losePageCache(dir, result.pid)
      } else {
        expect(result.code, result.stderr).toBe(0)
        finishedEarly = true
      }
    }
    expect(killed, 'the workload finished before every kill landed').toBe(kills)
    // The power loss took something each time it could: the journal was there to give it back.
    if (powerLoss) expect(linesCut).toBeGreaterThan(0)
    const final = await runWorker(dir, null, durability)
    expect(final.code, final.stderr).toBe(0)

    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability })
    const rows = registry.list()
    registry.close()
    expect(rows).toHaveLength(THREADS)
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
      expect(row.cost?.turns).toBe(TURNS)
    }
    expect(rows.filter((r) => r.status === 'completed').length).toBeGreaterThanOrEqual(THREADS - 2)

    // Effects once: no charge ran twice under the same idempotency key.
    const charges = fs.readFileSync(path.join(dir, 'charges.log'), 'utf8').trim().split('\n').map((l) => l.split(' ')[0]!)
    expect(new Set(charges).size).toBe(charges.length)
    // Each thread charges on every third turn; a charge interrupted by a kill may be missing
    // (reported to the model as TOOL_INTERRUPTED), but never doubled.
    const perThread = Math.floor((TURNS - 1) / 3)
    expect(charges.length).toBeLessThanOrEqual(THREADS * perThread)
    expect(charges.length).toBeGreaterThan(THREADS * perThread - KILLS - THREADS)
  }, 600_000)
})
