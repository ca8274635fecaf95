/**
 * Recovery matrix row "killed between an invalid structured answer and its retry" (issue 23,
 * item 6): a real host process spawns a thread with a zod output schema; its first answer fails
 * the schema and is recorded with the errors, and the process is killed with SIGKILL inside the
 * model call that retries it. What must hold: the next process asks the model once more, for turn
 * 2 only, with the errors as the conversation's last message (rebuilt from the transcript); the
 * thread completes with the valid output; its transcript replays to the same snapshot.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { verifyReplay } from '../../src/testing.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function worker(dir: string, step: string) {
  const run = spawnSync(process.execPath, [compiled('test/crash/structuredKillWorker.js'), dir, step], { encoding: 'utf8' })
  return { code: run.status, signal: run.signal, stdout: run.stdout.trim(), stderr: run.stderr }
}

describe('a host killed between an invalid structured answer and its retry', () => {
  it('should ask the model once more in the next process, with the errors, and complete with the valid output', () => {
    const dir = tempDir('spindle-structured-kill')
    const killed = worker(dir, 'start')
    expect(killed.signal, killed.stderr).toBe('SIGKILL')
    // From the directory, not from what the worker printed: the kill can come before stdout is flushed.
    const id = fs.readdirSync(path.join(dir, 'threads'))[0]!
    const resumed = worker(dir, 'resume')
    expect(resumed.code, resumed.stderr).toBe(0)
    const report = JSON.parse(resumed.stdout) as {
      seen: Array<{ turn: number; last: string }>
      outcomes: Array<{ status: string; output?: unknown; cost: { turns: number } }>
      threads: Array<{ id: string; status: string }>
    }
    // Turn 1's invalid answer was recorded before the kill: never asked again.
    expect(report.seen.map((s) => s.turn)).toEqual([2])
    expect(report.seen[0]!.last).toContain('number: Invalid string: must match pattern')
    expect(report.seen[0]!.last).toContain('total: Too small')
    expect(report.outcomes).toEqual([expect.objectContaining({ status: 'completed', output: { number: 'INV-42', total: 99.5 }, cost: expect.objectContaining({ turns: 2 }) })])
    expect(report.threads).toEqual([{ id, status: 'completed' }])
    expect(verifyReplay(dir, id).matches).toBe(true)
  }, 60_000)
})
