/**
 * Recovery matrix row "writes fail for want of space", without privileges: a real child process
 * runs 20 threads under `ulimit -f` (RLIMIT_FSIZE), so every write that would grow a file past
 * 256 KB — a transcript, the journal, a SQLite file's WAL — fails with EFBIG, as on a full disk.
 * The host process must keep running and close cleanly; a new process without the limit must then
 * carry every thread to its end, with no non-idempotent call run twice and every file intact.
 * (test/runtime/diskFull.test.ts fills a real tmpfs and frees it under the same process.)
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { createRuntime, readThreadFiles, scriptedModel, verifyReplay } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const THREADS = 20
const TURNS = 40

interface WorkerReport {
  statuses: Record<string, number>
  spawned: number
  spawnFailures: number
  parked: number
  outcomes: Record<string, number>
  problems: Record<string, number>
  closeError: string | null
}

function runWorker(mode: 'limited' | 'free', dir: string, chargeLog: string): { code: number | null; report: WorkerReport; stderr: string } {
  const args = [compiled('test/crash/fileSizeLimitWorker.js'), mode, dir, chargeLog, String(THREADS), String(TURNS)]
  const quoted = [process.execPath, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  // bash counts `ulimit -f` in 1024-byte blocks.
  const run =
    mode === 'limited'
      ? spawnSync('bash', ['-c', `ulimit -f 256 && exec ${quoted}`], { encoding: 'utf8', timeout: 60_000 })
      : spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 60_000 })
  const last = run.stdout.trim().split('\n').at(-1) ?? ''
  let report: WorkerReport
  try {
    report = JSON.parse(last) as WorkerReport
  } catch {
    throw new Error(`worker (${mode}) printed no report; exit ${run.status} ${run.signal ?? ''}\n${run.stdout}\n${run.stderr}`)
  }
  return { code: run.status, report, stderr: run.stderr }
}

describe('writes that fail for want of space (RLIMIT_FSIZE)', () => {
  it('should keep the host process running, and let a new process carry every thread on with nothing run twice', async () => {
    const dir = path.join(tempDir('spindle-fsize'), 'data')
    const chargeLog = path.join(tempDir('spindle-fsize-charges'), 'charges.log')

    const limited = runWorker('limited', dir, chargeLog)
    // The fault happened, was told as a storage failure, and cost the host nothing.
    expect(limited.code, limited.stderr).toBe(0)
    expect(limited.report.problems.STORAGE_FAILED ?? 0, JSON.stringify(limited.report)).toBeGreaterThan(0)
    // No thread was failed or cancelled for it: each completed, or waits to be carried on.
    for (const status of Object.keys(limited.report.statuses)) expect(['completed', 'running', 'created']).toContain(status)
    for (const outcome of Object.keys(limited.report.outcomes)) expect(outcome === 'completed' || outcome.startsWith('rejected:')).toBe(true)
    const registered = Object.values(limited.report.statuses).reduce((n, c) => n + c, 0)
    expect(registered).toBe(limited.report.spawned)

    const free = runWorker('free', dir, chargeLog)
    expect(free.code, free.stderr).toBe(0)
    expect(free.report.statuses).toEqual({ completed: registered })

    const keys = fs.existsSync(chargeLog) ? fs.readFileSync(chargeLog, 'utf8').trim().split('\n') : []
    expect(keys.length).toBeGreaterThan(0)
    expect(new Set(keys).size, 'a charge ran twice').toBe(keys.length)
    const doctor = spawnSync(process.execPath, [compiled('src/cli.js'), 'doctor', '--dir', dir], { encoding: 'utf8' })
    expect(doctor.status, doctor.stdout).toBe(0)
    // No damage. A spawn refused for want of space may leave the files it began (a spawn that
    // never returned: doctor lists them, recovery leaves them alone) — one per refused spawn at most.
    expect(doctor.stdout).toMatch(/threads? checked: no damage(, \d+ other findings?)?\.$/m)
    const strays = doctor.stdout.split('\n').filter((line) => line.startsWith('stray'))
    for (const line of strays) expect(line).toContain('[UNREGISTERED_FILES]')
    expect(strays.length).toBeLessThanOrEqual(limited.report.spawnFailures)
    expect(doctor.stdout.split('\n').filter((line) => /^\S/.test(line) && !line.startsWith('stray') && !/threads? checked/.test(line))).toEqual([])

    // Every registered thread ran all its turns, and its files are whole and replay to its state.
    const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'unused' }]), userConfig: null })
    try {
      const rows = rt.list()
      expect(rows.length).toBeGreaterThan(0)
      for (const row of rows) {
        expect(row.status).toBe('completed')
        expect(row.cost?.turns, row.id).toBe(TURNS)
        expect(readThreadFiles(dir, row.id).torn, row.id).toBeNull()
        expect(verifyReplay(dir, row.id).matches, `replay of ${row.id}`).toBe(true)
      }
    } finally {
      await rt.close()
    }
  })
})
