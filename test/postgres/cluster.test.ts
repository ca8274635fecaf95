/**
 * Recovery matrix rows for runtime processes that share nothing but a PostgreSQL database: a worker
 * killed with SIGKILL, a worker frozen past its lease and woken. After each: every thread completed
 * exactly once, none run in two places at once, every transcript verifies and replays.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'
import { storedThreads } from '../helpers/pgThreads.js'

// Long enough that a loaded CI machine still renews in time (heartbeat: a third of it).
const THRESHOLD_MS = 3000
const THREADS = 4
const TURNS = 150

const schemas: string[] = []
afterAll(async () => {
  for (const schema of schemas) await dropSchema(testDatabaseUrl(), schema)
})

interface Worker {
  child: ChildProcess
  output: () => string
  exited: Promise<number | null>
}

function start(schema: string, mode: 'spawn' | 'join', calls: string): Worker {
  const child = spawn(process.execPath, [compiled('test/postgres/clusterWorker.js'), mode, String(THREADS), String(TURNS), String(THRESHOLD_MS), calls], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PG_URL: testDatabaseUrl(), PG_SCHEMA: schema },
  })
  let out = ''
  child.stdout!.on('data', (d) => (out += d))
  child.stderr!.on('data', (d) => (out += d))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  return { child, output: () => out, exited }
}

async function until(check: () => boolean, ms: number, what: () => string = () => ''): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out ${what()}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

function setUp(): { schema: string; calls: string; lines: () => string[][] } {
  const schema = freshSchema()
  schemas.push(schema)
  const calls = path.join(tempDir('spindle-pg-cluster'), 'calls.log')
  fs.writeFileSync(calls, '')
  return { schema, calls, lines: () => fs.readFileSync(calls, 'utf8').trim().split('\n').filter(Boolean).map((l) => l.split(' ')) }
}

describe('workers sharing a PostgreSQL database', () => {
  it('should take over the threads of a worker killed with SIGKILL within one lease period, never running a thread in both', async () => {
    const { schema, calls, lines } = setUp()
    const first = start(schema, 'spawn', calls)
    await until(() => first.output().includes('spawned'), 30_000, first.output)
    await new Promise((r) => setTimeout(r, 300))
    const second = start(schema, 'join', calls)
    await until(() => second.output().includes('ready'), 30_000, second.output)
    expect(second.output()).toContain(`resumed=0 elsewhere=${THREADS}`)
    await new Promise((r) => setTimeout(r, 500))
    // While the first worker lives (and renews its leases), the second runs none of its threads.
    expect(lines().every(([, , pid]) => pid === String(first.child.pid))).toBe(true)

    const killedAt = Date.now()
    first.child.kill('SIGKILL')
    await first.exited
    await until(() => lines().some(([, , pid]) => pid === String(second.child.pid)), 15_000, second.output)
    // Another host's worker cannot be seen dead: its threads wait out the lease (plus a heartbeat).
    expect(Date.now() - killedAt).toBeLessThan(THRESHOLD_MS * 2 + 1_000)
    expect(await second.exited, second.output()).toBe(0)

    const byThread = new Map<string, string[]>()
    for (const [id, , pid] of lines()) byThread.set(id!, [...(byThread.get(id!) ?? []), pid!])
    expect(byThread.size).toBe(THREADS)
    for (const [id, pids] of byThread) {
      const switchAt = pids.indexOf(String(second.child.pid))
      expect(switchAt, id).toBeGreaterThan(0)
      expect(pids.slice(switchAt).every((p) => p === String(second.child.pid)), id).toBe(true)
    }
    const threads = storedThreads(testDatabaseUrl(), schema)
    expect(threads).toHaveLength(THREADS)
    for (const { record, replays } of threads) {
      expect(record.status, record.id).toBe('completed')
      expect(record.cost?.turns, record.id).toBe(TURNS)
      expect(replays, record.id).toBe(true)
    }
  }, 120_000)

  it('should take over a frozen worker once its leases expire, and the woken worker must not write', async () => {
    const { schema, calls, lines } = setUp()
    const first = start(schema, 'spawn', calls)
    await until(() => first.output().includes('spawned'), 30_000, first.output)
    await new Promise((r) => setTimeout(r, 300))
    const second = start(schema, 'join', calls)
    await until(() => second.output().includes('ready'), 30_000, second.output)

    const stoppedAt = Date.now()
    first.child.kill('SIGSTOP')
    await until(() => lines().some(([, , pid]) => pid === String(second.child.pid)), 20_000, second.output)
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(THRESHOLD_MS - 600)
    const takenAt = lines().length
    first.child.kill('SIGCONT')
    expect(await second.exited, second.output()).toBe(0)
    expect(await first.exited, first.output()).toBe(0)

    // A call the frozen worker had let through its lease check just before the stop is made when
    // it wakes (model calls run at least once): at most one per thread, for its next turn, and
    // its reply is never recorded — every thread has exactly its turns.
    const firstPid = String(first.child.pid)
    const late = lines().slice(takenAt).filter(([, , pid]) => pid === firstPid)
    expect(new Set(late.map(([id]) => id)).size, JSON.stringify(late)).toBe(late.length)
    const threads = storedThreads(testDatabaseUrl(), schema)
    expect(threads).toHaveLength(THREADS)
    for (const { record, replays } of threads) {
      expect(record.status, record.id).toBe('completed')
      expect(record.cost?.turns, record.id).toBe(TURNS)
      expect(replays, record.id).toBe(true)
    }
  }, 120_000)
})
