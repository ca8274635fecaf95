/**
 * Recovery matrix row "killed during a follow-up's model call" (issue 23, item 7): a real chat host
 * follows a completed thread up and is killed with SIGKILL inside the follow-up's model call. What
 * must hold: the next process carries the follow-up on with the whole conversation, the first
 * exchange keeps its answer, there is one follow-up (linked to the first by previousThreadId), and
 * its transcript replays to its snapshot.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { verifyReplay } from '../../src/testing.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function worker(dir: string, step: string) {
  const run = spawnSync(process.execPath, [compiled('test/crash/followUpKillWorker.js'), dir, step], { encoding: 'utf8' })
  return { code: run.status, signal: run.signal, stdout: run.stdout.trim(), stderr: run.stderr }
}

describe('a chat host killed during a follow-up', () => {
  it('should carry the follow-up on in the next process with the whole conversation', () => {
    const dir = tempDir('spindle-follow-up-kill')
    const killed = worker(dir, 'chat')
    expect(killed.signal, killed.stderr).toBe('SIGKILL')
    const resumed = worker(dir, 'resume')
    expect(resumed.code, resumed.stderr).toBe(0)
    const report = JSON.parse(resumed.stdout) as { seen: string[][]; threads: Array<{ id: string; status: string; result: string; previousThreadId: string | null }> }
    expect(report.seen).toEqual([['Capital of France?', 'Paris', 'And Germany?']])
    const first = report.threads.find((t) => t.previousThreadId === null)!
    const next = report.threads.find((t) => t.previousThreadId !== null)!
    expect(report.threads).toHaveLength(2)
    expect(first).toMatchObject({ status: 'completed', result: 'Paris' })
    expect(next).toMatchObject({ status: 'completed', result: 'Berlin', previousThreadId: first.id })
    expect(verifyReplay(dir, next.id).matches).toBe(true)
  }, 60_000)
})
