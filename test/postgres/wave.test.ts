/**
 * Recovery matrix row "hosts that share nothing but the database": three worker processes, each
 * with a working directory, HOME and TMPDIR of its own, run a wave of lead threads that a fourth
 * process — a host with `maxThreads: 0` — spawned; each lead spawns children (`spawn_thread`) and
 * waits for them (`wait_threads`) within its budget. One worker is killed with SIGKILL mid-wave.
 * After it every thread has completed exactly once: no model turn recorded twice, no child spawned
 * twice, no charge (a tool that is not idempotent) made twice, every handle of the host settled,
 * every transcript verifies and replays, and the ledger adds up. The second row runs the same with
 * each worker on a test host of its own (a network namespace and hostname, a veth link to the
 * database), where the machine allows it.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { toolIdempotencyKey } from '../../actors/threadEffects.js'
import type { ToolCall } from '../../machines/threadEvents.js'
import { openPostgresStores } from '../../src/runtime/openPostgresStores.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { startEmbeddedPostgres } from '../helpers/embeddedPostgres.js'
import type { RunningPostgres } from '../helpers/embeddedPostgres.js'
import { storedThreads } from '../helpers/pgThreads.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'
import { makeTestHosts, testHostsUnavailable } from './testHosts.js'
import type { TestHosts } from './testHosts.js'

const WORKERS = 3
const MAX_THREADS = 2
const LEADS = 6
const CHILDREN = 3
const TURNS = 30
// Long enough that a loaded machine still renews in time (heartbeat: a third of it).
const THRESHOLD_MS = 3000
// A lead's budget: its own three turns ($0.001 each) and its children's reservations (twice what
// their turns cost, see waveWorker.ts), with little to spare: a child spawned twice over would not fit.
const CHILD_SPEND = (2 * TURNS) / 10_000
const LEAD_SPEND = 0.003 + CHILDREN * CHILD_SPEND + 0.004

interface Proc {
  child: ChildProcess
  /** Its own directory: working directory, HOME and TMPDIR, shared with no other process. */
  dir: string
  output: () => string
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

/** Where a process of the wave runs: the database URL it uses, and how it is started there. */
interface Placement {
  url: string
  /** The hostname the process must see (a test host's own), if any. */
  hostname?: string
  command(file: string, args: string[]): [string, string[]]
}

const onThisHost = (url: string): Placement => ({ url, command: (file, args) => [file, args] })

function start(label: string, script: string, args: string[], schema: string, where: Placement): Proc {
  const dir = tempDir(`spindle-pg-wave-${label}`)
  const [file, argv] = where.command(process.execPath, [compiled(script), ...args])
  const child = spawn(file, argv, {
    cwd: dir,
    // Nothing of the test's environment: what the process knows of the others is the database.
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, TMPDIR: dir, XDG_CONFIG_HOME: path.join(dir, 'config'), PG_URL: where.url, PG_SCHEMA: schema },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let out = ''
  child.stdout!.on('data', (d) => (out += d))
  child.stderr!.on('data', (d) => (out += d))
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  return { child, dir, output: () => out, exited }
}

async function until(check: () => boolean, ms: number, what: () => string): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out:\n${what()}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

function lines(file: string): string[][] {
  if (!fs.existsSync(file)) return []
  return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' '))
}

/** A model call a worker logged: thread, directive, turn, and how many threads it had taken from the database then. */
const callsOf = (worker: Proc) => lines(path.join(worker.dir, 'calls.log')).map(([id, name, turn, taken]) => ({ id: id!, name: name!, turn: Number(turn), taken: Number(taken) }))
/** A charge a worker made: its idempotency key and thread. */
const chargesOf = (worker: Proc) => lines(path.join(worker.dir, 'charges.log')).map(([key, id]) => ({ key: key!, id: id! }))

/**
 * Runs the wave with `workers` placed as given and the host on `host`; kills one worker once it
 * waits in a lead and its children are under way; checks everything that must hold after it.
 * `url` is this process's way to the same database, for reading it back.
 */
async function runWave(url: string, host: Placement, workers: Placement[]): Promise<void> {
  const schema = freshSchema()
  const procs: Proc[] = []
  try {
    // Half the wave is in the database before any worker runs (recovered as they open), half is
    // spawned while they run (heard of through the database).
    const hostProc = start('host', 'test/postgres/waveHost.js', [String(LEADS), String(CHILDREN), String(LEAD_SPEND), String(LEADS / 2)], schema, host)
    procs.push(hostProc)
    await until(() => hostProc.output().includes('waiting for workers'), 60_000, hostProc.output)
    const workerProcs = workers.map((where, i) => start(`worker${i}`, 'test/postgres/waveWorker.js', [String(MAX_THREADS), String(CHILDREN), String(TURNS), String(THRESHOLD_MS)], schema, where))
    procs.push(...workerProcs)
    const all = () => [`--- host\n${hostProc.output()}`, ...workerProcs.map((p, i) => `--- worker ${i} (pid ${p.child.pid})\n${p.output()}`), `--- model calls\n${ranWhere(workerProcs)}`].join('\n')
    await until(() => workerProcs.every((p) => p.output().includes('ready')), 60_000, all)
    workers.forEach((where, i) => {
      if (where.hostname) expect(workerProcs[i]!.output()).toContain(`ready ${workerProcs[i]!.child.pid} ${where.hostname}\n`)
    })
    hostProc.child.stdin!.write('go\n')

    // The fault: a worker with a lead waiting for its children, some of which it is running.
    let victim = -1
    await until(
      () => {
        victim = workerProcs.findIndex((p) => {
          const calls = callsOf(p)
          return calls.some((c) => c.name.startsWith('lead') && c.turn >= 2) && calls.filter((c) => c.name.startsWith('part')).length >= 10
        })
        return victim >= 0
      },
      60_000,
      all,
    )
    const killed = workerProcs[victim]!
    killed.child.kill('SIGKILL')
    expect((await killed.exited).signal).toBe('SIGKILL')

    expect((await hostProc.exited).code, all()).toBe(0)
    const survivors = workerProcs.filter((_, i) => i !== victim)
    for (const p of survivors) p.child.stdin!.end()
    for (const p of survivors) expect((await p.exited).code, all()).toBe(0)

    // Every handle the host held settled, once, as completed.
    const outcomes = hostProc.output().split('\n').filter((l) => l.startsWith('settled ')).map((l) => l.split(' '))
    expect(outcomes).toHaveLength(LEADS * (1 + CHILDREN))
    expect(new Set(outcomes.map(([, id]) => id)).size).toBe(outcomes.length)
    expect(outcomes.filter(([, , status]) => status !== 'completed'), all()).toEqual([])

    checkThreads(url, schema, workerProcs, victim, all)
    for (const p of procs) fs.rmSync(p.dir, { recursive: true, force: true })
  } finally {
    for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL')
    await dropSchema(url, schema)
  }
}

/** Which workers made each thread's model calls, in order (`turn@worker`, runs of one worker folded): for a failure's message. */
function ranWhere(workers: Proc[]): string {
  const runs = new Map<string, string[]>()
  workers.forEach((p, i) => {
    for (const c of callsOf(p)) {
      const list = runs.get(c.id) ?? []
      const last = list.at(-1)
      if (!last?.endsWith(`@${i}`)) list.push(`${c.turn}@${i}`)
      runs.set(c.id, list)
    }
  })
  return [...runs].map(([id, list]) => `${id}: ${list.join(' ')}`).sort().join('\n')
}

/** What must hold of the database and the workers' logs after the wave. */
function checkThreads(url: string, schema: string, procs: Proc[], victim: number, all: () => string): void {
  const runByVictim = new Set(callsOf(procs[victim]!).map((c) => c.id))
  const threads = storedThreads(url, schema)
  expect(threads).toHaveLength(LEADS * (1 + CHILDREN))
  for (const { record, replays } of threads) {
    expect(record.status, `${record.id}\n${all()}`).toBe('completed')
    expect(replays, `transcript of ${record.id} replays`).toBe(true)
  }
  const leads = threads.filter((t) => t.record.parentId === null).map((t) => t.record)
  expect(leads.map((l) => l.directiveName).sort()).toEqual(Array.from({ length: LEADS }, (_, i) => `lead${i}`))
  for (const lead of leads) {
    // spawn_thread run again on another worker found the child its call id had made.
    const children = threads.filter((t) => t.record.parentId === lead.id).map((t) => t.record)
    expect(children.map((c) => c.directiveName).sort(), lead.id).toEqual(Array.from({ length: CHILDREN }, (_, i) => `part${i}-of-${lead.directiveName}`))
    expect(lead.result, lead.id).toBe(`wave finished: ${CHILDREN} completed`)
  }

  const stores = openPostgresStores({ url, schema }, { problem: () => {}, folderInvalid: () => {} })
  try {
    const logged = procs.flatMap(chargesOf)
    // A charge is made at most once, whichever worker made it.
    expect(new Set(logged.map((c) => c.key)).size, 'a charge made twice').toBe(logged.length)
    const loggedKeys = new Set(logged.map((c) => c.key))
    const recordedKeys = new Set<string>()
    for (const { record } of threads) {
      const { entries } = stores.transcripts.read(record.id)
      // Each model turn recorded once, and the thread's cost counts each once.
      const turns = entries.filter((e) => e.type === 'MODEL_REPLIED').map((e) => (e.data as { turn: number }).turn)
      expect(new Set(turns).size, `a turn of ${record.id} recorded twice`).toBe(turns.length)
      expect(turns.length, record.id).toBe(record.parentId === null ? 3 : TURNS)
      expect(record.cost?.turns, record.id).toBe(turns.length)
      const calls = new Map<string, ToolCall & { turn: number }>()
      for (const e of entries) {
        if (e.type !== 'MODEL_REPLIED') continue
        const { turn, toolCalls } = e.data as { turn: number; toolCalls: ToolCall[] }
        for (const call of toolCalls) calls.set(call.id, { ...call, turn })
      }
      for (const e of entries) {
        if (e.type !== 'TOOL_DONE') continue
        const { callId, ok, turn } = e.data as { callId: string; ok: boolean; turn: number }
        if (calls.get(callId)?.name !== 'charge') continue
        const key = toolIdempotencyKey(record.id, turn, callId)
        recordedKeys.add(key)
        // A charge recorded as made was made; one recorded as interrupted was cut by the kill.
        if (ok) expect(loggedKeys.has(key), `charge ${key} recorded but never made`).toBe(true)
        else expect(runByVictim.has(record.id), `charge ${key} of ${record.id} interrupted, but the killed worker never ran it`).toBe(true)
      }
    }
    for (const key of loggedKeys) expect(recordedKeys.has(key), `charge ${key} made but never recorded`).toBe(true)

    // Budgets: every lead's account holds its own spend and its children's, within its limit, and
    // nothing stays reserved once every child is released.
    expect(stores.ledger.check()).toEqual([])
    for (const lead of leads) {
      const account = stores.ledger.get(lead.id)!
      const children = threads.filter((t) => t.record.parentId === lead.id).map((t) => t.record)
      expect(account.limit.spend).toBeCloseTo(LEAD_SPEND, 9)
      expect(account.spent.spend).toBeCloseTo(lead.cost!.spend + children.reduce((sum, c) => sum + c.cost!.spend, 0), 9)
      expect(account.spent.spend).toBeLessThanOrEqual(LEAD_SPEND)
      expect(account.reserved.spend).toBe(0)
      const accounts = stores.ledger.children(lead.id)
      expect(accounts.map((a) => a.threadId).sort()).toEqual(children.map((c) => c.id).sort())
      for (const child of accounts) {
        expect(child.released, child.threadId).toBe(true)
        expect(child.ownSpent.spend).toBeCloseTo(children.find((c) => c.id === child.threadId)!.cost!.spend, 9)
      }
    }
  } finally {
    stores.close()
  }

  // Shared out: every worker ran a lead, none ran more threads taken from the database than its
  // maxThreads at once (children its leads spawn come along), and what the killed worker left
  // unfinished was carried on by the others.
  for (const p of procs) {
    const calls = callsOf(p)
    expect(calls.some((c) => c.name.startsWith('lead')), `worker ${p.child.pid} ran no lead`).toBe(true)
    expect(Math.max(...calls.map((c) => c.taken)), `worker ${p.child.pid} ran more than maxThreads`).toBeLessThanOrEqual(MAX_THREADS)
  }
  const carriedOn = procs.filter((_, i) => i !== victim).flatMap(callsOf).filter((c) => runByVictim.has(c.id))
  expect(carriedOn.length, 'nothing the killed worker ran was left for the others').toBeGreaterThan(0)
}

describe('a wave on workers that share nothing but the database', () => {
  it('should complete every lead and child exactly once after a worker is killed with SIGKILL mid-wave', async () => {
    const url = testDatabaseUrl()
    await runWave(url, onThisHost(url), Array.from({ length: WORKERS }, () => onThisHost(url)))
  }, 240_000)

  describe('on test hosts of their own', () => {
    let hosts: TestHosts | null = null
    let server: RunningPostgres | null = null
    afterAll(async () => {
      await server?.stop()
      hosts?.remove()
    })

    it('should complete every lead and child exactly once with each worker in a network namespace of its own, reaching the database over a veth link', async (ctx) => {
      const unavailable = testHostsUnavailable()
      if (unavailable) ctx.skip(`no test hosts on this machine (network namespaces with veth links): ${unavailable}`)
      hosts = makeTestHosts(WORKERS)
      // A server of its own, listening at the test's end of every link.
      server = await startEmbeddedPostgres({ listen: { addresses: hosts.hosts.map((h) => h.gateway), clients: hosts.clients } })
      const url = server.url
      const over = (gateway: string): string => {
        const u = new URL(url)
        u.hostname = gateway
        return u.toString()
      }
      const workers = hosts.hosts.map((h): Placement => ({ url: over(h.gateway), hostname: h.name, command: (file, args) => hosts!.command(h, file, args) }))
      await runWave(url, onThisHost(url), workers)
    }, 240_000)
  })
})
