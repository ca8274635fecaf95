/**
 * The operator's decisions from the command line — approve, deny, cancel, resume — and the thread
 * tree, run as real child processes: a host process leaves threads suspended, the CLI writes its
 * decision, and the next host process on the directory carries it out.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function host(dir: string, mode: 'limit' | 'error' | 'tree' | 'run'): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8', env: { ...process.env } })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

function statuses(dir: string): Array<{ id: string; status: string; result: unknown; error: { code: string; message: string } | null }> {
  return JSON.parse(host(dir, 'run'))
}

describe('operator decisions from the CLI', () => {
  it('should approve a limit escalation with new limits, and the next host runs the thread to the end', () => {
    const dir = tempDir('spindle-cli-approve')
    const id = host(dir, 'limit')
    const approved = spindle('approve', id, '--turns', '10', '--message', 'go on', '--dir', dir, '--json')
    expect(approved.code, approved.stderr).toBe(0)
    expect(JSON.parse(approved.stdout)).toMatchObject({ threadId: id, action: 'approve', file: expect.stringContaining('.response.json') })
    expect(statuses(dir)).toEqual([expect.objectContaining({ id, status: 'completed', result: 'capped done' })])
  })

  it('should deny a limit escalation: the thread ends cancelled with its partial result', () => {
    const dir = tempDir('spindle-cli-deny')
    const id = host(dir, 'limit')
    expect(spindle('deny', id, '--reason', 'too expensive', '--dir', dir).code).toBe(0)
    expect(statuses(dir)).toEqual([expect.objectContaining({ id, status: 'cancelled', result: 'turn 2' })])
  })

  it('should cancel a suspended thread through its nonce-checked cancel file', () => {
    const dir = tempDir('spindle-cli-cancel')
    const id = host(dir, 'limit')
    const cancelled = spindle('cancel', id, '--reason', 'no longer needed', '--dir', dir, '--json')
    expect(cancelled.code, cancelled.stderr).toBe(0)
    expect(JSON.parse(cancelled.stdout).file).toMatch(/cancel\.requested$/)
    expect(statuses(dir)).toEqual([expect.objectContaining({ id, status: 'cancelled', result: 'turn 2' })])
    const log = fs.readFileSync(path.join(dir, 'requests.log.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    expect(log).toEqual([expect.objectContaining({ kind: 'cancel', threadId: id, outcome: 'honoured', reason: 'no longer needed' })])
    // A finished thread cannot be cancelled: exit 6, nothing written.
    expect(spindle('cancel', id, '--dir', dir).code).toBe(6)
  })

  it('should resume a thread suspended after its retries ran out, and refuse one at a limit', () => {
    const dir = tempDir('spindle-cli-resume')
    const id = host(dir, 'error')
    expect(spindle('resume', id, '--dir', dir).code).toBe(0)
    expect(statuses(dir)).toEqual([expect.objectContaining({ id, status: 'completed', result: 'flaky done' })])

    const atLimit = host(dir, 'limit')
    const refused = spindle('resume', atLimit, '--dir', dir)
    expect(refused.code).toBe(6)
    expect(refused.stderr).toContain(`spindle approve ${atLimit}`)
  })

  it('should say clearly what is wrong with an unknown or unsuitable thread', () => {
    const dir = tempDir('spindle-cli-errors')
    const id = host(dir, 'error')
    expect(spindle('approve', 'nobody-aaaaaaaaaaaa', '--dir', dir).code).toBe(4)
    const notPending = spindle('approve', id, '--dir', dir)
    expect(notPending.code).toBe(6)
    expect(notPending.stderr).toContain('no pending approval request')
    expect(spindle('approve', '../../etc', '--dir', dir).code).toBe(3)
    expect(spindle('approve', id, '--turns', '-3', '--dir', dir).code).toBe(3)
  })

  it('should show the thread tree with parent and child, as JSON and as text', () => {
    const dir = tempDir('spindle-cli-tree')
    const parent = host(dir, 'tree')
    const tree = spindle('tree', '--dir', dir, '--json')
    expect(tree.code, tree.stderr).toBe(0)
    const [top] = JSON.parse(tree.stdout)
    expect(top).toMatchObject({ id: parent, directive: 'parent', status: 'completed', children: [expect.objectContaining({ directive: 'kid', status: 'completed' })] })
    const text = spindle('tree', top.children[0].id, '--dir', dir)
    expect(text.stdout).toContain(parent)
    expect(text.stdout).toMatch(/└─ kid-[a-z0-9]{12}\s+kid\s+completed/)
  })
})
