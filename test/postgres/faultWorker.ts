/**
 * Child process of the PostgreSQL fault tests (faults.test.ts): a runtime on a database the test
 * breaks under it — connections terminated by the server, the server restarted or stopped. With
 * `spawn` it starts the threads (each with a turn and spend budget); with `join` it only recovers
 * and takes over. What the test checks is what it observes itself, in two files: every model call
 * (`<thread> <turn> <pid> <ms>`) and every run of the non-idempotent tool (`<idempotency key>
 * <pid> <ms>`).
 *
 * With PAUSE_FILE set, recovery stops at its first progress report (the leases of the threads to
 * recover taken, none loaded yet) until that file exists: the test breaks the database there.
 *
 * env: PG_URL, PG_SCHEMA, CALLS, TOOLS, THREADS, TURNS, THRESHOLD_MS, MAX_THREADS (optional),
 * SPEND (the spend budget of each thread), PAUSE_FILE (optional). argv: spawn|join
 */
import fs from 'node:fs'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const mode = process.argv[2]
if (mode !== 'spawn' && mode !== 'join') throw new Error('usage: faultWorker spawn|join')
const env = (name: string): string => {
  const value = process.env[name]
  if (!value) throw new Error(`faultWorker: ${name} is not set`)
  return value
}
const calls = env('CALLS')
const tools = env('TOOLS')
const turns = Number(env('TURNS'))

// Not idempotent: run again after a crash it would do its effect twice, so the runtime must not.
const stamp = defineTool({
  name: 'stamp',
  description: 'records that it ran',
  input: z.object({}),
  idempotent: false,
  execute: (_input, { idempotencyKey }) => {
    fs.appendFileSync(tools, `${idempotencyKey} ${process.pid} ${Date.now()}\n`)
    return 'stamped'
  },
})
const model = scriptedModel(
  (r) => {
    fs.appendFileSync(calls, `${r.threadId} ${r.turn} ${process.pid} ${Date.now()}\n`)
    return r.turn < turns ? { text: `turn ${r.turn}`, toolCalls: [{ name: 'stamp', input: {} }] } : { text: 'done' }
  },
  { latencyMs: 20 },
)

const pauseFile = process.env.PAUSE_FILE
let paused = false
/** Holds the recovery loop (it runs inside the lifecycle callback's caller) until the test says go. */
function pauseRecovery(): void {
  if (!pauseFile || paused) return
  paused = true
  fs.writeSync(1, 'paused\n')
  const nap = new Int32Array(new SharedArrayBuffer(4))
  while (!fs.existsSync(pauseFile)) Atomics.wait(nap, 0, 0, 20)
}

process.stdout.write(`opening ${process.pid}\n`)
// What explains a LEASE_LOST when a test fails: the event loop held longer than a heartbeat.
{
  let last = Date.now()
  setInterval(() => {
    const now = Date.now()
    if (now - last > 600) process.stderr.write(`stall ${now} ${now - last}ms\n`)
    last = now
  }, 100).unref()
}
const rt = await createRuntime({
  database: { url: env('PG_URL'), schema: env('PG_SCHEMA') },
  model,
  tools: [stamp],
  defaultLimits: { turns: null },
  ...(process.env.MAX_THREADS ? { maxThreads: Number(process.env.MAX_THREADS) } : {}),
  config: { orphans: { thresholdMs: Number(env('THRESHOLD_MS')) } },
  userConfig: null,
  onLifecycle: (event) => {
    if (event.type !== 'recovery_progress') return
    process.stderr.write(`recovering ${Date.now()} ${event.done}/${event.total}\n`)
    pauseRecovery()
  },
  // Reported problems go to stderr, where the test prints them when it fails.
  onProblem: (problem) => process.stderr.write(`problem ${Date.now()} ${JSON.stringify(problem)}\n`),
})
process.stdout.write(`ready ${process.pid} resumed=${rt.lastRecovery.resumed.length}\n`)
if (mode === 'spawn') {
  const limits = { turns, spend: Number(env('SPEND')) }
  // Fifty at a time: each spawn waits for its row to commit, and rounds are shared.
  const all = Array.from({ length: Number(env('THREADS')) }, (_, i) => i)
  for (let from = 0; from < all.length; from += 50) {
    await Promise.all(all.slice(from, from + 50).map((i) => rt.spawn({ directive: { name: `faulted${i}`, prompt: `thread ${i}` }, limits })))
  }
  process.stdout.write('spawned\n')
}
// Run until every thread of the database has been spawned and has stopped, whoever ran it. The
// database may be down when asked: then ask again.
const threads = Number(env('THREADS'))
for (;;) {
  await new Promise((r) => setTimeout(r, 100))
  try {
    if (rt.list().length >= threads && rt.list({ status: ['created', 'running'] }).length === 0 && rt.active().length === 0) break
  } catch (error) {
    if ((error as { code?: string }).code !== 'DATABASE_UNAVAILABLE') throw error
  }
}
await rt.close()
process.stdout.write('all stopped\n')
