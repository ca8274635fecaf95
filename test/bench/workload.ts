/**
 * One benchmark configuration in a process of its own (so peak RSS is its own). Prints one JSON line.
 *
 *   workload.js turns <dir> <fsync|process|memory> <threads> <turns> [stream]
 *                                         with `stream`, the scripted model streams each reply (one
 *                                         character a piece) to a subscriber consuming rt.replies()
 *   workload.js leave <dir> <threads>     spawn threads that hang in their first model call, then SIGKILL self
 *   workload.js rehydrate <dir>           time a runtime opening on what `leave` left
 *   workload.js suspend <dir> <threads>   spawn threads that suspend at once at their turn limit
 *   workload.js open <dir>                open a runtime on suspended threads, approve one, report memory
 *   workload.js live <dir> <threads> <fsync|process>
 *                                         spawn threads that wait in their first model call until all are
 *                                         live, report descriptors and memory per live thread, then let them end
 */
import fs from 'node:fs'
import type { ModelAdapter } from '../../src/index.js'
import { execFileSync } from 'node:child_process'
import v8 from 'node:v8'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [mode, dir, a, b, c, d] = process.argv.slice(2)
if (!dir) throw new Error('usage: workload <mode> <dir> ...')

const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n }) })

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : 0
}

function diskBytes(path: string): number {
  try {
    return Number(execFileSync('du', ['-sb', path]).toString().split('\t')[0])
  } catch {
    return 0
  }
}

if (mode === 'turns') {
  const store = a as 'fsync' | 'process' | 'memory'
  const threads = Number(b)
  const turns = Number(c)
  const streamed = d === 'stream'
  const lastCall = new Map<string, number>()
  const latencies: number[] = []
  /** When each thread's final reply left the scripted model (it answers at once): `done` is timed from there. */
  const finalReply = new Map<string, number>()
  const doneLatencies: number[] = []
  const model = scriptedModel((r) => {
    const now = performance.now()
    const prev = lastCall.get(r.threadId)
    if (prev !== undefined) latencies.push(now - prev)
    lastCall.set(r.threadId, now)
    if (r.turn >= turns) finalReply.set(r.threadId, now)
    return r.turn < turns ? { toolCalls: [{ name: 'echo', input: { n: r.turn } }] } : { text: 'done' }
  }, streamed ? { stream: { chunkChars: 1 } } : {})
  const rt = await createRuntime({
    dir,
    model,
    tools: [echo],
    ...(store === 'memory' ? { store: 'memory' as const } : { durability: store }),
  })
  let deltas = 0
  const subscriber = streamed ? rt.replies() : null
  const consumed = subscriber
    ? (async () => {
        for await (const _ of subscriber) deltas++
      })()
    : null
  // What Node with spindle's modules and an open runtime holds before a thread runs, and how far V8
  // has grown its young generation by then: the floor under the run's peak (docs/benchmark.md, "Memory").
  const openRssMb = process.memoryUsage().rss / 1048576
  const youngMb = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')!.space_size / 1048576
  const openYoungMb = youngMb()
  const started = performance.now()
  const handles = await Promise.all(Array.from({ length: threads }, (_, i) => rt.spawn({ directive: { name: `bench${i}`, prompt: 'go' } })))
  const outcomes = await Promise.all(
    handles.map((h) =>
      h.done.then((outcome) => {
        doneLatencies.push(performance.now() - finalReply.get(h.id)!)
        return outcome
      }),
    ),
  )
  const seconds = (performance.now() - started) / 1000
  const totalTurns = outcomes.reduce((n, o) => n + o.cost.turns, 0)
  const stats = rt.stats()
  await rt.close()
  await consumed
  latencies.sort((x, y) => x - y)
  doneLatencies.sort((x, y) => x - y)
  process.stdout.write(
    JSON.stringify({
      store,
      threads,
      turns,
      totalTurns,
      seconds,
      turnsPerSecond: totalTurns / seconds,
      streamed,
      deltas,
      checkpointsStaged: stats.checkpointsStaged,
      checkpointsWritten: stats.checkpointsWritten,
      logCommits: stats.logCommits,
      commits: stats.commits,
      settleCommits: stats.settleCommits,
      // A turn records a reply and a tool result: two messages.
      messages: totalTurns * 2,
      bytesOnDisk: store === 'memory' ? 0 : diskBytes(dir),
      p50ms: percentile(latencies, 50),
      p99ms: percentile(latencies, 99),
      doneP50ms: percentile(doneLatencies, 50),
      doneP99ms: percentile(doneLatencies, 99),
      peakRssMb: process.resourceUsage().maxRSS / 1024,
      openRssMb,
      openYoungMb,
      endYoungMb: youngMb(),
    }) + '\n',
  )
  process.exit(0)
} else if (mode === 'leave') {
  const threads = Number(a)
  const rt = await createRuntime({ dir, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), durability: 'process' })
  for (let i = 0; i < threads; i += 500) {
    await Promise.all(Array.from({ length: Math.min(500, threads - i) }, (_, j) => rt.spawn({ directive: { name: `idle${i + j}`, prompt: 'wait' } })))
  }
  process.stdout.write(JSON.stringify({ left: rt.active().length }) + '\n', () => process.kill(process.pid, 'SIGKILL'))
} else if (mode === 'rehydrate') {
  const started = performance.now()
  const rt = await createRuntime({ dir, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), durability: 'fsync' })
  const ms = performance.now() - started
  process.stdout.write(
    JSON.stringify({ rehydrated: rt.lastRecovery.resumed.length, failed: rt.lastRecovery.failed.length, ms, peakRssMb: process.resourceUsage().maxRSS / 1024 }) + '\n',
  )
  process.exit(0)
} else if (mode === 'suspend') {
  const threads = Number(a)
  const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'never asked' }]), durability: 'process', userConfig: null })
  for (let i = 0; i < threads; i += 500) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(500, threads - i) }, (_, j) => rt.spawn({ directive: { name: `wait${i + j}`, prompt: 'p' }, limits: { turns: 0 } })),
    )
    await Promise.all(batch.map((t) => t.done))
  }
  await rt.close()
  process.stdout.write(JSON.stringify({ suspended: threads }) + '\n')
} else if (mode === 'open') {
  global.gc?.()
  const before = process.memoryUsage().rss
  const started = performance.now()
  // BENCH_SCAN_PER_POLL: compare with a poll that looks in every thread directory.
  const scan = process.env.BENCH_SCAN_PER_POLL ? { config: { requests: { scanPerPoll: Number(process.env.BENCH_SCAN_PER_POLL) } } } : {}
  const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'approved and done' }]), durability: 'fsync', userConfig: null, ...scan })
  const ms = performance.now() - started
  global.gc?.()
  const heapMb = process.memoryUsage().heapUsed / 1048576
  // What one poll for request files costs when there are none: the runtime does it every second.
  const polls: number[] = []
  for (let i = 0; i < 7; i++) {
    const t = performance.now()
    await rt.checkRequests()
    polls.push(performance.now() - t)
  }
  polls.sort((x, y) => x - y)
  const suspended = rt.list({ status: 'suspended', limit: 1 })[0]!
  const approved = await rt.approve(suspended.id, { limits: { turns: 5 } })
  const outcome = await approved.done
  process.stdout.write(
    JSON.stringify({
      openMs: ms,
      live: rt.active().length,
      heapMb,
      idlePollMs: polls[3],
      rssGrowthMb: (process.memoryUsage().rss - before) / 1048576,
      peakRssMb: process.resourceUsage().maxRSS / 1024,
      approvedStatus: outcome.status,
    }) + '\n',
  )
  process.exit(0)
} else if (mode === 'live') {
  const threads = Number(a)
  const durability = b as 'fsync' | 'process'
  const descriptors = (): number => fs.readdirSync('/proc/self/fd').length
  const limitLine = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files')) ?? ''
  const limit = Number(limitLine.slice('Max open files'.length).trim().split(/\s+/)[0])
  // Every model call waits until all threads are live, then its reply ends the thread. They are let
  // go 500 at a time, a turn of the event loop apart, as replies from a provider would arrive: all
  // in one microtask queue would hold the event loop (and the lease heartbeat) for as long as they run.
  const waiting: Array<() => void> = []
  let open = false
  const reply = scriptedModel([{ text: 'done' }])
  const model: ModelAdapter = {
    name: 'gated',
    async generate(request) {
      if (!open) await new Promise<void>((resolve) => waiting.push(resolve))
      return reply.generate(request)
    },
  }
  const release = async (): Promise<void> => {
    open = true
    for (let i = 0; i < waiting.length; i += 500) {
      for (const go of waiting.slice(i, i + 500)) go()
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
  const rt = await createRuntime({ dir, model, durability, userConfig: null })
  global.gc?.()
  const openRss = process.memoryUsage().rss
  const openHeap = process.memoryUsage().heapUsed
  const openDescriptors = descriptors()
  let peakDescriptors = openDescriptors
  const sampler = setInterval(() => (peakDescriptors = Math.max(peakDescriptors, descriptors())), 50)
  const started = performance.now()
  const handles = []
  for (let i = 0; i < threads; i += 500) {
    handles.push(...(await Promise.all(Array.from({ length: Math.min(500, threads - i) }, (_, j) => rt.spawn({ directive: { name: `live${i + j}`, prompt: 'wait' } })))))
  }
  while (waiting.length < threads) await new Promise((resolve) => setTimeout(resolve, 20))
  const spawnSeconds = (performance.now() - started) / 1000
  global.gc?.()
  const live = rt.active().length
  const liveDescriptors = descriptors()
  const rssPerThreadKb = (process.memoryUsage().rss - openRss) / 1024 / threads
  const heapPerThreadKb = (process.memoryUsage().heapUsed - openHeap) / 1024 / threads
  const released = performance.now()
  await release()
  const outcomes = await Promise.all(handles.map((h) => h.done))
  const endSeconds = (performance.now() - released) / 1000
  clearInterval(sampler)
  await rt.close()
  process.stdout.write(
    JSON.stringify({
      threads,
      durability,
      limit,
      live,
      spawnSeconds,
      openDescriptors,
      liveDescriptors,
      peakDescriptors,
      rssPerThreadKb,
      heapPerThreadKb,
      completed: outcomes.filter((o) => o.status === 'completed').length,
      endSeconds,
      peakRssMb: process.resourceUsage().maxRSS / 1024,
    }) + '\n',
  )
  process.exit(0)
}
