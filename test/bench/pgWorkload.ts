/**
 * One worker process of the PostgreSQL bench rows (test/bench/pgBench.ts), on a database shared
 * with the other workers of the row and no data directory.
 *
 *   pgWorkload.js turns <url> <schema> <threads> <turns> <startAtMs>
 *       spawns and runs its own threads (the same workload as the file rows: a scripted model that
 *       answers at once, one tool call per turn), starting at the same moment as the other workers
 *   pgWorkload.js leave <url> <schema> <threads>
 *       spawns threads that hang in their first model call, then SIGKILLs itself
 *   pgWorkload.js rehydrate <url> <schema>
 *       opens a runtime on the database and times its recovery of every unfinished thread
 */
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [mode, url, schema, a, b, c] = process.argv.slice(2)
if (!url || !schema) throw new Error('usage: pgWorkload <mode> <url> <schema> ...')
const database = { url, schema }

const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n }) })

if (mode === 'turns') {
  const threads = Number(a)
  const turns = Number(b)
  const lastCall = new Map<string, number>()
  const latencies: number[] = []
  const model = scriptedModel((r) => {
    const now = performance.now()
    const prev = lastCall.get(r.threadId)
    if (prev !== undefined) latencies.push(now - prev)
    lastCall.set(r.threadId, now)
    return r.turn < turns ? { toolCalls: [{ name: 'echo', input: { n: r.turn } }] } : { text: 'done' }
  })
  const rt = await createRuntime({ database, model, tools: [echo], userConfig: null, shutdownSignals: [] })
  const startAt = Number(c)
  while (Date.now() < startAt) await new Promise((r) => setTimeout(r, 5))
  const started = Date.now()
  const handles = await Promise.all(Array.from({ length: threads }, (_, i) => rt.spawn({ directive: { name: `bench${process.pid}x${i}`, prompt: 'go' } })))
  const outcomes = await Promise.all(handles.map((h) => h.done))
  const ended = Date.now()
  const stats = rt.stats()
  await rt.close()
  latencies.sort((x, y) => x - y)
  process.stdout.write(
    JSON.stringify({
      totalTurns: outcomes.reduce((n, o) => n + o.cost.turns, 0),
      completed: outcomes.filter((o) => o.status === 'completed').length,
      started,
      ended,
      latencies,
      logCommits: stats.logCommits,
      commits: stats.commits,
      peakRssMb: process.resourceUsage().maxRSS / 1024,
    }) + '\n',
  )
  process.exit(0)
} else if (mode === 'leave') {
  const threads = Number(a)
  const rt = await createRuntime({ database, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), userConfig: null, shutdownSignals: [] })
  for (let i = 0; i < threads; i += 500) {
    await Promise.all(Array.from({ length: Math.min(500, threads - i) }, (_, j) => rt.spawn({ directive: { name: `idle${i + j}`, prompt: 'wait' } })))
  }
  process.stdout.write(JSON.stringify({ left: rt.active().length }) + '\n', () => process.kill(process.pid, 'SIGKILL'))
} else if (mode === 'rehydrate') {
  const started = performance.now()
  const rt = await createRuntime({ database, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), userConfig: null, shutdownSignals: [] })
  const ms = performance.now() - started
  process.stdout.write(JSON.stringify({ rehydrated: rt.lastRecovery.resumed.length, failed: rt.lastRecovery.failed.length, ms, peakRssMb: process.resourceUsage().maxRSS / 1024 }) + '\n')
  process.exit(0)
} else {
  throw new Error(`unknown mode ${mode}`)
}
