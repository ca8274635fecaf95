/**
 * Recovery matrix rows for the database's own faults, with worker processes sharing a PostgreSQL
 * server of this file's own (the shared test server serves every other file): connections
 * terminated by the server (a few times, and every 100 ms), the server restarted mid-run and
 * while a worker recovers 500 threads, the server gone for longer than a lease, a worker frozen
 * with a transaction open (its locks in the way of the takeover). After each: no thread lost or
 * left running, none run in two places at once, the non-idempotent tool run at most once per
 * call, every transcript verifies and replays, the ledger agrees with the threads' costs, every
 * thread completed with exactly its turns.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { startEmbeddedPostgres, type RunningPostgres } from '../helpers/embeddedPostgres.js'
import { freshSchema } from '../helpers/postgres.js'
import { storedThreads } from '../helpers/pgThreads.js'

// Long enough that a loaded machine still renews in time (heartbeat: a third of it).
const THRESHOLD_MS = 3000
const SPEND = 5
const GENEROUS = 60_000

/** How long the workers may take to finish every thread after the last fault (far more than they need). */
const WORKERS_END_MS = 150_000

let server: RunningPostgres
const children: ChildProcess[] = []
beforeAll(async () => {
  server = await startEmbeddedPostgres()
}, 120_000)
afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  await server?.stop()
})

interface Worker {
  child: ChildProcess
  pid: string
  output: () => string
  exited: Promise<number | null>
}

interface Run {
  schema: string
  threads: number
  turns: number
  calls: string
  tools: string
  workers: Worker[]
}

interface Call {
  thread: string
  turn: number
  pid: string
  at: number
}

function newRun(threads: number, turns: number): Run {
  const dir = tempDir('spindle-pg-faults')
  const run = { schema: freshSchema(), threads, turns, calls: path.join(dir, 'calls.log'), tools: path.join(dir, 'tools.log'), workers: [] }
  fs.writeFileSync(run.calls, '')
  fs.writeFileSync(run.tools, '')
  return run
}

function start(run: Run, mode: 'spawn' | 'join', maxThreads?: number, pauseFile?: string): Worker {
  const child = spawn(process.execPath, [compiled('test/postgres/faultWorker.js'), mode], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      PG_URL: server.url,
      PG_SCHEMA: run.schema,
      CALLS: run.calls,
      TOOLS: run.tools,
      THREADS: String(run.threads),
      TURNS: String(run.turns),
      THRESHOLD_MS: String(THRESHOLD_MS),
      SPEND: String(SPEND),
      ...(maxThreads === undefined ? {} : { MAX_THREADS: String(maxThreads) }),
      ...(pauseFile === undefined ? {} : { PAUSE_FILE: pauseFile }),
    },
  })
  children.push(child)
  let out = ''
  child.stdout!.on('data', (d) => (out += d))
  child.stderr!.on('data', (d) => (out += d))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const worker = { child, pid: String(child.pid), output: () => out, exited }
  run.workers.push(worker)
  return worker
}

/** The tail of each worker's output; the whole of it is written next to the logs. */
function outputs(run: Run): string {
  return run.workers
    .map((w) => {
      const file = path.join(path.dirname(run.calls), `worker-${w.pid}.log`)
      fs.writeFileSync(file, w.output())
      return `--- worker ${w.pid} (all of it: ${file})\n${w.output().slice(-6000)}`
    })
    .join('\n')
}

async function until(check: () => boolean, ms: number, what: () => string = () => ''): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out\n${what()}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

function calls(run: Run): Call[] {
  return lines(run.calls).map(([thread, turn, pid, at]) => ({ thread: thread!, turn: Number(turn), pid: pid!, at: Number(at) }))
}

function lines(file: string): string[][] {
  return fs.readFileSync(file, 'utf8').trim().split('\n').filter(Boolean).map((l) => l.split(' '))
}

/** Waits until the workers have made `more` model calls beyond `from`: they are running threads. */
async function progress(run: Run, from: number, more: number): Promise<number> {
  await until(() => calls(run).length >= from + more, GENEROUS, () => outputs(run))
  return calls(run).length
}

/** Terminates every connection spindle holds to the server (the bridges name themselves 'spindle'). */
async function terminateSpindleConnections(): Promise<number> {
  const admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
  try {
    const { rows } = await admin.query("SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity WHERE application_name = 'spindle' AND pid <> pg_backend_pid()")
    return rows.filter((r: { ended: boolean }) => r.ended).length
  } finally {
    await admin.end()
  }
}

/**
 * A thread's model calls, in the order they were made, by whichever process made them: each call
 * is for the turn of the one before or the next (a call whose reply was not recorded is made
 * again), and the thread changes hands at most `handoffs` times. Two processes running it at once
 * would make calls of the same turns in turn, or go back.
 */
function runInTwoPlaces(sequence: Call[], handoffs: number): string | null {
  let switches = 0
  for (let i = 1; i < sequence.length; i++) {
    const [before, call] = [sequence[i - 1]!, sequence[i]!]
    if (call.turn !== before.turn && call.turn !== before.turn + 1) return `turn ${before.turn} (pid ${before.pid}) then turn ${call.turn} (pid ${call.pid})`
    if (call.pid !== before.pid) switches++
  }
  return switches > handoffs ? `changed hands ${switches} times (at most ${handoffs} expected)` : null
}

/** How many threads are not completed, and the first of them: what a failure shows. */
function stuck(run: Run): unknown {
  const left = storedThreads(server.url, run.schema).filter(({ record }) => record.status !== 'completed')
  return { count: left.length, first: left.slice(0, 10).map(({ record, entries }) => ({ id: record.id, status: record.status, turns: record.cost?.turns, entries })) }
}

/**
 * Stops `worker` (SIGSTOP) at a moment its connection has a transaction open, holding the row
 * locks of what it was writing: stopped and woken at random moments until the server shows a
 * spindle session idle in a transaction for longer than any live worker's would be.
 */
async function freezeInTransaction(worker: Worker): Promise<void> {
  const admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
  try {
    for (let attempt = 0; attempt < 2000; attempt++) {
      worker.child.kill('SIGSTOP')
      await sleep(50)
      const { rows } = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'spindle' AND state = 'idle in transaction' AND now() - state_change > interval '40 milliseconds'",
      )
      if (rows[0].n > 0) return
      worker.child.kill('SIGCONT')
      await sleep(Math.random() * 30)
    }
    throw new Error('never caught the worker with a transaction open')
  } finally {
    await admin.end()
  }
}

/**
 * What must hold after every fault, once every worker has ended by itself. `late`: model calls a
 * stopped worker made when it woke, after another had taken their threads (left out of the order).
 */
async function expectEveryThreadDoneOnce(run: Run, handoffs: number, late: Call[] = []): Promise<void> {
  const codes = await Promise.race([Promise.all(run.workers.map((w) => w.exited)), sleep(WORKERS_END_MS).then(() => null)])
  if (!codes) throw new Error(`the workers did not end within ${WORKERS_END_MS / 1000} s; threads: ${JSON.stringify(stuck(run))}\n${outputs(run)}`)
  expect(codes, outputs(run)).toEqual(run.workers.map(() => 0))

  const threads = storedThreads(server.url, run.schema)
  expect(threads).toHaveLength(run.threads)
  for (const { record, replays } of threads) {
    expect(record.status, record.id).toBe('completed')
    expect(record.cost?.turns, record.id).toBe(run.turns)
    expect(replays, record.id).toBe(true)
  }

  const byThread = new Map<string, Call[]>()
  const key = (c: Call) => `${c.thread} ${c.turn} ${c.pid} ${c.at}`
  const lateKeys = new Set(late.map(key))
  for (const call of calls(run)) if (!lateKeys.has(key(call))) byThread.set(call.thread, [...(byThread.get(call.thread) ?? []), call])
  expect(byThread.size).toBe(run.threads)
  for (const [id, sequence] of byThread) {
    expect(runInTwoPlaces(sequence, handoffs), id).toBeNull()
    expect(new Set(sequence.map((c) => c.turn)).size, id).toBe(run.turns)
  }

  const keys = lines(run.tools).map(([key]) => key!)
  const twice = keys.filter((key, i) => keys.indexOf(key) !== i)
  expect(twice, 'non-idempotent tool calls run twice').toEqual([])

  // The ledger, read as host code reads it, from a runtime that runs nothing.
  const watcher = await createRuntime({ database: { url: server.url, schema: run.schema }, maxThreads: 0, recover: false, model: scriptedModel([{ text: 'runs nothing' }]), userConfig: null, shutdownSignals: [] })
  try {
    for (const { record } of threads) {
      const budget = watcher.budget(record.id)
      expect(budget.limit.spend, record.id).toBe(SPEND)
      expect(budget.spent.own.spend, record.id).toBeCloseTo(record.cost!.spend, 9)
      expect(budget.spent.own.tokens, record.id).toBe(record.cost!.inputTokens + record.cost!.outputTokens)
      expect(budget.reserved, record.id).toEqual({ spend: 0, tokens: 0 })
      expect(budget.released, record.id).toBe(true)
    }
  } finally {
    await watcher.close()
  }
}

/** Two workers of three threads each, both running: one spawns six threads and leaves three to the other. */
async function twoBusyWorkers(turns: number): Promise<Run> {
  const run = newRun(6, turns)
  const joined = start(run, 'join', 3)
  await until(() => joined.output().includes('ready'), GENEROUS, () => outputs(run))
  const spawner = start(run, 'spawn', 3)
  await until(() => spawner.output().includes('spawned'), GENEROUS, () => outputs(run))
  await until(() => new Set(calls(run).map((c) => c.pid)).size === 2, GENEROUS, () => outputs(run))
  return run
}

describe('workers sharing a PostgreSQL database that fails under them', () => {
  it('should carry on after the server terminates every spindle connection, three times mid-run', async () => {
    const run = await twoBusyWorkers(150)
    let made = await progress(run, 0, 60)
    for (let kill = 0; kill < 3; kill++) {
      // Both workers' connections, and whatever else spindle holds open on this server.
      expect(await terminateSpindleConnections()).toBeGreaterThanOrEqual(2)
      made = await progress(run, made, 60)
    }
    expect(made).toBeLessThan(run.threads * run.turns)
    await expectEveryThreadDoneOnce(run, 3)
  }, 300_000)

  it('should finish every thread once, with every budget whole, while the server terminates every spindle connection every 100 ms', async () => {
    const run = newRun(20, 12)
    const joined = start(run, 'join', 10)
    await until(() => joined.output().includes('ready'), GENEROUS, () => outputs(run))
    const spawner = start(run, 'spawn', 10)
    await until(() => spawner.output().includes('spawned'), GENEROUS, () => outputs(run))
    // Threads end all through the storm: a reply, its ledger entry and the release of the
    // thread's budget are separate statements, any of them the one that finds its connection gone.
    let kills = 0
    while (calls(run).length < run.threads * run.turns && kills < 200) {
      await terminateSpindleConnections()
      kills++
      await sleep(100)
    }
    await expectEveryThreadDoneOnce(run, kills)
  }, 300_000)

  it('should carry on after the database restarts mid-run, twice', async () => {
    const run = await twoBusyWorkers(150)
    let made = await progress(run, 0, 60)
    for (let restart = 0; restart < 2; restart++) {
      await server.restart()
      made = await progress(run, made, 60)
    }
    expect(made).toBeLessThan(run.threads * run.turns)
    await expectEveryThreadDoneOnce(run, 2)
  }, 300_000)

  it('should stop acting while the database is unreachable for longer than a lease, then resume and finish every thread', async () => {
    const run = await twoBusyWorkers(150)
    await progress(run, 0, 60)
    await server.halt()
    const haltedAt = Date.now()
    await sleep(THRESHOLD_MS * 2)
    const startedAt = Date.now()
    await server.start()
    // A call whose request was recorded just before the server went may still be made; after a
    // heartbeat nothing is, while nothing can be recorded.
    const quietFrom = haltedAt + THRESHOLD_MS / 3
    const madeWhileDown = calls(run).filter((c) => c.at >= quietFrom && c.at < startedAt)
    expect(madeWhileDown, 'model calls while the database was down').toEqual([])
    const ranWhileDown = lines(run.tools).filter(([, , at]) => Number(at) >= quietFrom && Number(at) < startedAt)
    expect(ranWhileDown, 'tool runs while the database was down').toEqual([])
    await expectEveryThreadDoneOnce(run, 1)
  }, 300_000)

  it('should recover 500 unfinished threads on a worker that opens while the database restarts', async () => {
    const run = newRun(500, 6)
    // 500 threads left unfinished by a worker killed mid-run: running ones part way through their
    // transcripts, and created ones it had not started. A host that runs none spawns them.
    const host = start(run, 'spawn', 0)
    await until(() => host.output().includes('spawned'), 180_000, () => outputs(run))
    const killed = start(run, 'join')
    await progress(run, 0, 800)
    killed.child.kill('SIGKILL')
    await killed.exited
    run.workers.splice(run.workers.indexOf(killed), 1)
    expect(storedThreads(server.url, run.schema).filter(({ record }) => record.status !== 'completed').length).toBeGreaterThan(400)

    // A worker opens, takes their leases, and is about to load them when the server goes away.
    const pauseFile = path.join(path.dirname(run.calls), 'go')
    const recovering = start(run, 'join', undefined, pauseFile)
    await until(() => recovering.output().includes('paused'), GENEROUS, () => outputs(run))
    await server.halt()
    fs.writeFileSync(pauseFile, '')
    await sleep(THRESHOLD_MS / 3)
    await server.start()
    start(run, 'join')
    await expectEveryThreadDoneOnce(run, 2)
  }, 600_000)

  it('should take over the threads of a worker frozen with a transaction open, the server ending its session', async () => {
    const run = newRun(4, 150)
    const frozen = start(run, 'spawn')
    await until(() => frozen.output().includes('spawned'), GENEROUS, () => outputs(run))
    const other = start(run, 'join')
    await until(() => other.output().includes('ready'), GENEROUS, () => outputs(run))
    await progress(run, 0, 40)

    await freezeInTransaction(frozen)
    const frozenAt = Date.now()
    await until(() => calls(run).some((c) => c.pid === other.pid), GENEROUS, () => outputs(run))
    // Its locks would hold the takeover up for as long as it is stopped: the server lets them go.
    expect(Date.now() - frozenAt).toBeLessThan(THRESHOLD_MS * 2 + 1_000)
    const takenAt = calls(run).length
    frozen.child.kill('SIGCONT')

    // A call the frozen worker had let through its lease check just before the stop is made when
    // it wakes (model calls run at least once): at most one per thread, and its reply is never
    // recorded.
    const codes = await Promise.all(run.workers.map((w) => w.exited))
    expect(codes, outputs(run)).toEqual([0, 0])
    const late = calls(run)
      .slice(takenAt)
      .filter((c) => c.pid === frozen.pid)
    expect(new Set(late.map((c) => c.thread)).size, JSON.stringify(late)).toBe(late.length)
    await expectEveryThreadDoneOnce(run, 1, late)
  }, 300_000)
})
