/**
 * Recovery matrix row "killed during a model call of a thread with instructions" (issue 23,
 * item 1): a real host process spawns a thread with instructions and is killed with SIGKILL inside
 * its second model call. What must hold: the next process carries the thread on from its recorded
 * first turn, gives the model the same instructions on the calls it makes, the thread completes,
 * and its transcript replays to the same snapshot.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { verifyReplay } from '../../src/testing.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function worker(dir: string, step: string) {
  const run = spawnSync(process.execPath, [compiled('test/crash/instructionsKillWorker.js'), dir, step], { encoding: 'utf8' })
  return { code: run.status, signal: run.signal, stdout: run.stdout.trim(), stderr: run.stderr }
}

describe('a host killed during a model call of a thread with instructions', () => {
  it('should carry the thread on in the next process with the instructions it started with', () => {
    const dir = tempDir('spindle-instructions-kill')
    const killed = worker(dir, 'start')
    expect(killed.signal, killed.stderr).toBe('SIGKILL')
    const id = killed.stdout
    const resumed = worker(dir, 'resume')
    expect(resumed.code, resumed.stderr).toBe(0)
    const report = JSON.parse(resumed.stdout) as { seen: Array<{ turn: number; instructions: string | null }>; threads: Array<{ id: string; status: string; result: string }> }
    const instructions = 'You are the archivist. Quote sources by their shelf mark.'
    // Turn 1's reply was recorded before the kill: it is never asked again.
    expect(report.seen).toEqual([
      { turn: 2, instructions },
      { turn: 3, instructions },
    ])
    expect(report.threads).toEqual([{ id, status: 'completed', result: 'archived' }])
    expect(verifyReplay(dir, id).matches).toBe(true)
  }, 60_000)
})
