/**
 * Child process of descriptorLimit.test.ts, started under `ulimit -n` (RLIMIT_NOFILE). Prints one
 * JSON line.
 *
 *   descriptorLimitWorker.js many <dir> <threads> [fsync|process]
 *     spawns the threads (durability 'process' unless told), each held at its first model call until every one is live, then lets
 *     them all go (a tool call, then a reply) and waits for every one to end, sampling the
 *     descriptors the process holds (/proc/self/fd) throughout.
 *   descriptorLimitWorker.js starved <dir> <threads>
 *     a runtime on a simulated clock, keeping 2 transcript files open: once every thread is held at
 *     its first model call, host code takes every descriptor the process can still open (and keeps
 *     taking any that is freed). The threads are let go as far as their second model call (their
 *     lines still find descriptors: the store gives up its own to open a file), held there until
 *     the checkpoint rounds have failed and the store's idle descriptors were taken too, then let
 *     go, and the clock moved on until each has ended or given up. Then the descriptors are given
 *     back and `rt.recover()` carries on the threads that gave up.
 */
import fs from 'node:fs'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { ModelAdapter, ThreadHandle } from '../../src/index.js'
import { createTestRuntime } from '../../src/testing.js'

const [mode, dir, threadsArg, durabilityArg] = process.argv.slice(2)
const threads = Number(threadsArg)

const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n }) })
const script = scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'echo', input: { n: 1 } }] } : { text: 'done' }))

/**
 * The scripted model, holding each thread's first call of turn `n` until `release(n)` (counted in
 * `held(n)`). The held calls are let go 500 at a time, one turn of the event loop apart, as replies
 * from a provider arrive: 100,000 continuations in one microtask queue would hold the event loop
 * (and the lease heartbeat with it) for longer than a lease lasts.
 */
function gatedModel(turns: number): { model: ModelAdapter; release: (turn: number) => Promise<void>; held: (turn: number) => number } {
  const waiting = Array.from({ length: turns }, () => [] as Array<() => void>)
  const open = Array.from({ length: turns }, () => false)
  const model: ModelAdapter = {
    name: 'gated',
    async generate(request) {
      const turn = request.turn - 1
      if (turn < turns && !open[turn] && request.attempt === 1) await new Promise<void>((resolve) => waiting[turn]!.push(resolve))
      return script.generate(request)
    },
  }
  const release = async (turn: number): Promise<void> => {
    open[turn - 1] = true
    const held = waiting[turn - 1]!
    for (let i = 0; i < held.length; i += 500) {
      for (const go of held.slice(i, i + 500)) go()
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
  return { model, release, held: (turn) => waiting[turn - 1]!.length }
}

const openDescriptors = (): number => fs.readdirSync('/proc/self/fd').length
const limit = Number(
  fs
    .readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('Max open files'))
    ?.slice('Max open files'.length)
    .trim()
    .split(/\s+/)[0],
)
const count = (values: string[]): Record<string, number> => values.reduce<Record<string, number>>((a, v) => ((a[v] = (a[v] ?? 0) + 1), a), {})
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

async function spawnAll(spawn: (i: number) => Promise<ThreadHandle>): Promise<ThreadHandle[]> {
  const handles: ThreadHandle[] = []
  // In batches, as a host spawning many threads would: each waits for its checkpoint.
  for (let i = 0; i < threads; i += 500) handles.push(...(await Promise.all(Array.from({ length: Math.min(500, threads - i) }, (_, j) => spawn(i + j)))))
  return handles
}

const settleOf = (h: ThreadHandle): Promise<string> =>
  h.done.then(
    (o) => o.status,
    (e: { code?: string }) => `rejected:${String(e.code)}`,
  )

if (mode === 'many') {
  const { model, release, held } = gatedModel(1)
  const problems: string[] = []
  const rt = await createRuntime({
    dir: dir!,
    model,
    tools: [echo],
    durability: durabilityArg === 'fsync' ? 'fsync' : 'process',
    userConfig: null,
    onProblem: (p) => {
      // The first of each kind, for whoever reads a failed run.
      if (!problems.includes(p.code)) process.stderr.write(`${p.code}: ${p.message}\n`)
      problems.push(p.code)
    },
  })
  let maxDescriptors = openDescriptors()
  // Not more often: reading /proc/self/fd costs a few ms with thousands of descriptors open.
  const sampler = setInterval(() => (maxDescriptors = Math.max(maxDescriptors, openDescriptors())), 200)
  const rssBefore = process.memoryUsage().rss
  const handles = await spawnAll((i) => rt.spawn({ directive: { name: `fd${i}`, prompt: 'go' } }))
  while (held(1) < threads) await sleep(20)
  // Every thread is live at once, each waiting in its model call.
  const live = rt.active().length
  const descriptorsWhileLive = openDescriptors()
  const rssPerLiveThreadKb = (process.memoryUsage().rss - rssBefore) / 1024 / threads
  await release(1)
  const outcomes = await Promise.all(handles.map(settleOf))
  clearInterval(sampler)
  maxDescriptors = Math.max(maxDescriptors, openDescriptors())
  const statuses = count(rt.list({ limit: threads + 1 }).map((r) => r.status))
  await rt.close()
  process.stdout.write(
    JSON.stringify({ limit, spawned: handles.length, live, descriptorsWhileLive, maxDescriptors, rssPerLiveThreadKb, outcomes: count(outcomes), statuses, problems: count(problems) }) + '\n',
  )
} else if (mode === 'starved') {
  const { model, release, held } = gatedModel(2)
  const problems: string[] = []
  const rt = await createTestRuntime({ dir: dir!, model, tools: [echo], maxOpenTranscripts: 2, onProblem: (p) => problems.push(p.code) })
  const handles = await spawnAll((i) => rt.spawn({ directive: { name: `starved${i}`, prompt: 'go' } }))
  while (held(1) < threads) await sleep(10)
  // Host code that leaks descriptors: it takes every one the process can open, again and again.
  const taken: number[] = []
  const take = (): void => {
    for (;;) {
      try {
        taken.push(fs.openSync('/dev/null', 'r'))
      } catch {
        return
      }
    }
  }
  take()
  const taker = setInterval(take, 2)
  const settled = new Map<string, string>()
  for (const h of handles) void settleOf(h).then((s) => settled.set(h.id, s))
  await release(1)
  while (held(2) < threads) await sleep(10)
  // A checkpoint round has failed (the store gave its idle descriptors up then, and they were taken).
  for (let i = 0; i < 200 && !problems.includes('DESCRIPTORS_EXHAUSTED'); i++) await sleep(50)
  await sleep(50)
  await release(2)
  // Parking waits on the runtime's clock, checkpoint rounds on real time (at most 5 s apart).
  for (let i = 0; i < 150 && settled.size < threads; i++) {
    await rt.advance(5_000)
    await sleep(100)
  }
  const duringStarvation = count([...settled.values()])
  const pending = threads - settled.size
  clearInterval(taker)
  for (const fd of taken.splice(0)) fs.closeSync(fd)
  // Descriptors back: what gave up is carried on; what ended has its checkpoint written.
  const report = await rt.recover()
  const recovered = report.resumed.map((id) => rt.get(id))
  const after = recovered.map(settleOf)
  for (let i = 0; i < 100 && recovered.some((h) => h.status !== 'completed'); i++) {
    await rt.advance(1_000)
    await sleep(20)
  }
  const afterRecovery = count(await Promise.all(after))
  let statuses = count(rt.list().map((r) => r.status))
  for (let i = 0; i < 100 && statuses.completed !== threads; i++) {
    await sleep(100)
    statuses = count(rt.list().map((r) => r.status))
  }
  await rt.close()
  process.stdout.write(
    JSON.stringify({ limit, spawned: handles.length, pending, duringStarvation, recovered: report.resumed.length, afterRecovery, statuses, problems: count(problems) }) + '\n',
  )
}
