/**
 * Worker process of the PostgreSQL wave test: a runtime on the shared database with no data
 * directory, running at most <maxThreads> threads it takes from the database (new threads the host
 * left, orphans of a dead worker). A lead thread spawns its children with `spawn_thread` and waits
 * for them with `wait_threads`; a child charges a card (not idempotent) every turn. Model calls and
 * charges are logged to files in this process's own working directory, which no other process of
 * the test shares: the test reads them afterwards as its own observation, not the runtime's.
 *
 * env: PG_URL, PG_SCHEMA. argv: <maxThreads> <children> <turns> <thresholdMs>.
 * Prints `ready <pid> <hostname>` once open; closes when its standard input ends.
 */
import fs from 'node:fs'
import os from 'node:os'
import { z } from 'zod'
import type { Message, Runtime } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [maxThreadsArg, childrenArg, turnsArg, thresholdArg] = process.argv.slice(2)
if (!maxThreadsArg || !childrenArg || !turnsArg || !thresholdArg) throw new Error('usage: waveWorker <maxThreads> <children> <turns> <thresholdMs>')
const children = Number(childrenArg)
const turns = Number(turnsArg)
/** Each child's budget, reserved from its lead's: twice what its turns cost ($0.0001 each). */
const childSpend = (2 * turns) / 10_000

/** Appended and fdatasynced before it counts: a SIGKILL right after must not lose the line. */
function logLine(file: string, line: string): void {
  const fd = fs.openSync(file, 'a')
  try {
    fs.writeSync(fd, line)
    fs.fdatasyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

// Not idempotent: each run appends a line. A key appearing twice, in any worker's log, is an
// effect run twice.
const charge = defineTool({
  name: 'charge',
  description: 'Charge a card',
  input: z.object({ cents: z.number().int() }),
  execute: ({ cents }, { idempotencyKey, threadId }) => {
    logLine('charges.log', `${idempotencyKey} ${threadId} ${cents}\n`)
    return { charged: cents }
  },
})

function spawned(messages: readonly Message[]): string[] {
  return messages
    .filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === 'spawn_thread')
    .map((m) => JSON.parse(m.content).threadId as string)
}

/**
 * How many threads this worker runs that it took from the database rather than spawned itself: the
 * leads, and children whose lead is not here (taken over). maxThreads bounds these; children that
 * a lead here spawns come along with it.
 */
function takenHere(): number {
  const names = runtime?.active().map((h) => h.getSnapshot().directive.name) ?? []
  return names.filter((n) => n.startsWith('lead') || !names.includes(n.replace(/^part\d+-of-/, ''))).length
}

const model = scriptedModel(
  (r) => {
    logLine('calls.log', `${r.threadId} ${r.directiveName} ${r.turn} ${takenHere()}\n`)
    if (r.directiveName.startsWith('lead')) {
      if (r.turn === 1) {
        return {
          toolCalls: Array.from({ length: children }, (_, i) => ({
            name: 'spawn_thread',
            input: { name: `part${i}-of-${r.directiveName}`, prompt: `part ${i}`, limits: { spend: childSpend } },
          })),
          usage: { inputTokens: 100, outputTokens: 50, cost: 0.001 },
        }
      }
      if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawned(r.messages) } }], usage: { inputTokens: 100, outputTokens: 10, cost: 0.001 } }
      const waited = [...r.messages].reverse().find((m) => m.role === 'tool' && m.toolName === 'wait_threads')!
      const report = JSON.parse(waited.content) as { settled: Array<{ status: string }> }
      return { text: `wave finished: ${report.settled.filter((s) => s.status === 'completed').length} completed`, usage: { inputTokens: 100, outputTokens: 10, cost: 0.001 } }
    }
    return r.turn < turns
      ? { toolCalls: [{ name: 'charge', input: { cents: r.turn } }], usage: { inputTokens: 50, outputTokens: 10, cost: 0.0001 } }
      : { text: `${r.directiveName} done`, usage: { inputTokens: 50, outputTokens: 10, cost: 0.0001 } }
  },
  // Time-bound work, so that the test's kill lands while children are still at it.
  { latencyMs: (r) => 10 + ((r.turn * 7 + r.threadId.length) % 9) },
)

let runtime: Runtime | null = null
const rt = await createRuntime({
  database: { url: process.env.PG_URL!, schema: process.env.PG_SCHEMA! },
  maxThreads: Number(maxThreadsArg),
  model,
  tools: [charge],
  defaultLimits: { turns: null },
  config: { orphans: { thresholdMs: Number(thresholdArg) } },
  userConfig: null,
  shutdownSignals: [],
  // Reported problems go to stderr, where the test prints them when it fails.
  onProblem: (problem) => process.stderr.write(`problem ${JSON.stringify(problem)}\n`),
})
runtime = rt
process.stdout.write(`ready ${process.pid} ${os.hostname()}\n`)
process.stdin.resume()
process.stdin.on('end', () => {
  rt.close().then(
    () => process.stdout.write('closed\n'),
    (error: unknown) => {
      process.stderr.write(`close failed: ${String(error)}\n`)
      process.exitCode = 1
    },
  )
})
