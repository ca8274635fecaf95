/**
 * Trees of threads across SIGKILL at chosen moments (real processes, real data directories):
 * a child's budget reserved by a spawn that never returned, spawn_thread re-run after such a
 * spawn, and a fail-fast wave whose failure was recorded just before the kill.
 */
import { spawn } from 'node:child_process'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { readThreadFiles, verifyReplay } from '../../src/index.js'
import { messagesFromTranscript } from '../../src/thread/messages.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function step(dir: string, scenario: string, name: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/crash/treeKillsWorker.js'), dir, scenario, name], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    child.on('exit', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
}

async function killed(dir: string, scenario: string, name: string): Promise<void> {
  const result = await step(dir, scenario, name)
  expect(result.signal, result.stderr).toBe('SIGKILL')
}

async function finished(dir: string, scenario: string, name: string): Promise<any> {
  const result = await step(dir, scenario, name)
  expect(result.code, result.stderr).toBe(0)
  return JSON.parse(result.stdout.trim().split('\n').at(-1)!)
}

function ledgerOf(dir: string) {
  return openSqliteLedger({ path: path.join(dir, 'ledger.db'), durability: 'process' })
}

function rowsOf(dir: string) {
  const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
  try {
    return registry.list()
  } finally {
    registry.close()
  }
}

describe('trees of threads killed at chosen moments', () => {
  it('should return the budget of a spawn killed before it returned, so spawning again is not refused', async () => {
    const dir = tempDir('spindle-tree-unborn')
    await finished(dir, 'unborn', 'setup')
    await killed(dir, 'unborn', 'spawn-kill')
    // The next runtime: the kid that never existed holds nothing of the lead's $1.
    const again = await finished(dir, 'unborn', 'respawn')
    expect(again).toMatchObject({ status: 'completed' })
    const lead = rowsOf(dir).find((r) => r.directiveName === 'lead')!
    const ledger = ledgerOf(dir)
    try {
      expect(ledger.children(lead.id).map((a) => a.threadId)).toEqual([again.spawned])
      expect(ledger.get(lead.id)!.reserved.spend).toBe(0)
      expect(ledger.check()).toEqual([])
    } finally {
      ledger.close()
    }
  }, 20_000)

  it('should give a child spawned again by spawn_thread one history and a transcript that replays', async () => {
    const dir = tempDir('spindle-tree-rerun')
    // Killed as the child's actor starts: files and reservation written, no registry row.
    await killed(dir, 'rerun', 'kill-at-spawn')
    // Then it runs and is killed in a tool: the next process rebuilds its history from its transcript.
    await killed(dir, 'rerun', 'kill-in-tool')
    await finished(dir, 'rerun', 'finish')

    const rows = rowsOf(dir)
    expect(rows.map((r) => `${r.directiveName} ${r.status}`).sort()).toEqual(['lead completed', 'part0 completed'])
    const part0 = rows.find((r) => r.directiveName === 'part0')!
    // The model saw the task once, not once per spawn attempt.
    expect(part0.result).toBe('user messages: 1')
    const { entries } = readThreadFiles(dir, part0.id)
    expect(entries.filter((e) => e.type === 'thread_spawned')).toHaveLength(2)
    expect(messagesFromTranscript(entries).filter((m) => m.role === 'user')).toHaveLength(1)
    for (const row of rows) expect(verifyReplay(dir, row.id).matches, row.id).toBe(true)
    const ledger = ledgerOf(dir)
    try {
      const lead = rows.find((r) => r.directiveName === 'lead')!
      expect(ledger.children(lead.id).map((a) => [a.threadId, a.released])).toEqual([[part0.id, true]])
      // Its limit is the reservation of the spawn that returned, in the ledger and in the thread.
      const limit = ledger.get(part0.id)!.limit.spend!
      // A quarter of what the lead had left when spawn_thread ran again: $1 less its first reply's $0.001.
      expect(limit).toBeCloseTo(0.999 * 0.25, 9)
      expect(readThreadFiles(dir, part0.id).envelope!.snapshot).toMatchObject({ context: { limits: { spend: limit } } })
      expect(ledger.get(lead.id)!.spent.spend).toBeCloseTo(lead.cost!.spend + part0.cost!.spend, 9)
      expect(ledger.check()).toEqual([])
    } finally {
      ledger.close()
    }
  }, 20_000)

  it('should fail fast at once after a kill that came right after a child failed', async () => {
    const dir = tempDir('spindle-tree-failfast')
    await killed(dir, 'failfast', 'kill-at-failure')
    const { left } = await finished(dir, 'failfast', 'finish')
    expect(left).toEqual([])
    const rows = rowsOf(dir)
    const lead = rows.find((r) => r.directiveName === 'lead')!
    const report = JSON.parse(lead.result as string)
    const part1 = rows.find((r) => r.directiveName === 'part1')!
    expect(report.timedOut).toBe(false)
    expect(report.failed).toMatchObject({ threadId: part1.id, status: 'error' })
    expect(report.cancelled.sort()).toEqual(rows.filter((r) => r.directiveName === 'part0' || r.directiveName === 'part2').map((r) => r.id).sort())
    expect(rows.map((r) => `${r.directiveName} ${r.status}`).sort()).toEqual(['lead completed', 'part0 cancelled', 'part1 error', 'part2 cancelled'])
  }, 20_000)
})
