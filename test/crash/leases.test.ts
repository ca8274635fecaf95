/**
 * Recovery matrix row "orphan across processes": two runtime processes share a data directory.
 * The second leaves the first one's threads alone while its leases are renewed; when the first is
 * killed with SIGKILL, the second takes its threads over within one lease period, and no thread
 * is ever run by both.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import Database from 'better-sqlite3'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { createRuntime, scriptedModel, verifyReplay } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

// Long enough that a loaded CI machine still renews in time (heartbeat: a third of it).
const THRESHOLD_MS = 3000
const THREADS = 4
const TURNS = 200

function start(dir: string, mode: 'spawn' | 'join'): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, [compiled('test/crash/leaseWorker.js'), dir, mode, String(THREADS), String(TURNS), String(THRESHOLD_MS)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  child.stdout!.on('data', (d) => (out += d))
  child.stderr!.on('data', (d) => (out += d))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  return { child, output: () => out, exited }
}

async function until(check: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 25))
  }
}

describe('orphan leases across processes', () => {
  it('should take over the threads of a process killed with SIGKILL within one lease period, never running a thread in both', async () => {
    const dir = tempDir('spindle-leases')
    const first = start(dir, 'spawn')
    await until(() => first.output().includes('spawned'), 20_000)
    // Let the first process run a while; the second joins and must leave its threads alone.
    await new Promise((r) => setTimeout(r, 400))
    const second = start(dir, 'join')
    await until(() => second.output().includes('ready'), 20_000)
    expect(second.output()).toContain(`resumed=0 elsewhere=${THREADS}`)
    await new Promise((r) => setTimeout(r, THRESHOLD_MS))

    const callsLog = path.join(dir, 'calls.log')
    const lines = () => fs.readFileSync(callsLog, 'utf8').trim().split('\n').map((l) => l.split(' '))
    // While the first process lives (and renews its leases), the second runs none of its threads.
    expect(lines().every(([, , pid]) => pid === String(first.child.pid))).toBe(true)

    const killedAt = Date.now()
    first.child.kill('SIGKILL')
    await first.exited
    await until(() => lines().some(([, , pid]) => pid === String(second.child.pid)), 10_000)
    const tookOverMs = Date.now() - killedAt
    // Within one lease period (plus a heartbeat): the lease on the dead pid was seen stale at once.
    expect(tookOverMs).toBeLessThan(THRESHOLD_MS * 2)
    expect(await second.exited, second.output()).toBe(0)

    // No thread was run by both: per thread, the first process's turns all come before the second's.
    const byThread = new Map<string, string[]>()
    for (const [id, , pid] of lines()) byThread.set(id!, [...(byThread.get(id!) ?? []), pid!])
    expect(byThread.size).toBe(THREADS)
    for (const [id, pids] of byThread) {
      const switchAt = pids.indexOf(String(second.child.pid))
      expect(switchAt, id).toBeGreaterThan(0)
      expect(pids.slice(switchAt).every((p) => p === String(second.child.pid)), id).toBe(true)
    }
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' })
    for (const row of registry.list()) {
      expect(row.status, row.id).toBe('completed')
      expect(verifyReplay(dir, row.id).matches, row.id).toBe(true)
    }
    registry.close()
  }, 120_000)

  it('should take over a stalled process once its leases expire, and the stalled process must not write when it wakes', async () => {
    const dir = tempDir('spindle-leases-stop')
    const first = start(dir, 'spawn')
    await until(() => first.output().includes('spawned'), 20_000)
    await new Promise((r) => setTimeout(r, 300))
    const second = start(dir, 'join')
    await until(() => second.output().includes('ready'), 20_000)
    expect(second.output()).toContain(`elsewhere=${THREADS}`)

    const callsLog = path.join(dir, 'calls.log')
    const lines = () => fs.readFileSync(callsLog, 'utf8').trim().split('\n').map((l) => l.split(' '))
    // Alive but silent (a long GC pause, a stopped VM): its pid exists, so only expiry frees its threads.
    const stoppedAt = Date.now()
    first.child.kill('SIGSTOP')
    await until(() => lines().some(([, , pid]) => pid === String(second.child.pid)), 15_000)
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(THRESHOLD_MS - 600)
    const takenAt = lines().length
    first.child.kill('SIGCONT')
    expect(await second.exited, second.output()).toBe(0)
    expect(await first.exited, first.output()).toBe(0)

    // After the takeover the first process starts no model call of its own. A call it had let
    // through its lease check just before it was stopped is made when it wakes — a stop can land
    // between any two instructions, and model calls run at least once — but at most one per
    // thread, for that thread's next turn, and its reply is never recorded (the turns below).
    const firstPid = String(first.child.pid)
    const late = lines().slice(takenAt).filter(([, , pid]) => pid === firstPid)
    expect(new Set(late.map(([id]) => id)).size, JSON.stringify(late)).toBe(late.length)
    for (const [id, turn] of late) {
      const before = lines().slice(0, takenAt).filter(([thread, , pid]) => thread === id && pid === firstPid)
      expect(Number(turn), `${id} turn ${turn}`).toBeLessThanOrEqual(Number(before.at(-1)?.[1] ?? 0) + 1)
    }
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' })
    for (const row of registry.list()) {
      expect(row.status, row.id).toBe('completed')
      // Every turn recorded once: a reply the woken process got was not recorded.
      expect(row.cost?.turns, row.id).toBe(TURNS)
      expect(verifyReplay(dir, row.id).matches, row.id).toBe(true)
    }
    registry.close()
  }, 120_000)
  it('should remove, when a runtime opens the directory, the stale lease of a spawn that never returned, and keep one a live spawn holds', async () => {
    const dir = tempDir('spindle-leases-unborn')
    const first = start(dir, 'spawn')
    await until(() => first.output().includes('spawned'), 20_000)
    first.child.kill('SIGKILL')
    await first.exited
    // Killed between a thread's lease and its registry row: the row never came.
    const registryDb = new Database(path.join(dir, 'registry.db'))
    const unborn = (registryDb.prepare('SELECT id FROM threads ORDER BY id LIMIT 1').get() as { id: string }).id
    registryDb.prepare('DELETE FROM threads WHERE id = ?').run(unborn)
    registryDb.close()
    const leases = openSqliteLeases({ path: path.join(dir, 'leases.db'), durability: 'process' })
    const now = Date.now()
    // Another process on this host in the middle of a spawn (alive, lease live): not to be touched.
    leases.acquire('spawning-aaaaaaaaaaaa', { id: `${os.hostname()}:${process.pid}:x`, pid: process.pid, host: os.hostname() }, 600_000, now)
    // A spawn on another host whose lease ran out long ago.
    leases.acquire('gone-bbbbbbbbbbbb', { id: 'elsewhere:1:y', pid: 1, host: 'elsewhere' }, 1_000, now - 60_000)
    leases.close()

    const rt = await createRuntime({ dir, model: scriptedModel(() => ({ text: 'done' })), config: { orphans: { thresholdMs: THRESHOLD_MS } } })
    try {
      const after = openSqliteLeases({ path: path.join(dir, 'leases.db'), durability: 'process' })
      const held = new Map(after.list().map((l) => [l.threadId, l]))
      after.close()
      expect(held.has(unborn)).toBe(false)
      expect(held.has('gone-bbbbbbbbbbbb')).toBe(false)
      expect(held.get('spawning-aaaaaaaaaaaa')?.owner).toBe(`${os.hostname()}:${process.pid}:x`)
      // The registered threads of the killed process were recovered here, with their leases.
      expect(rt.lastRecovery.resumed).toHaveLength(THREADS - 1)
      expect(rt.lastRecovery.resumed).not.toContain(unborn)
    } finally {
      await rt.close()
    }
  }, 60_000)
})
