/**
 * Child process of the wave crash test: a lead thread spawns a wave of children through
 * `spawn_thread`, waits for them with `wait_threads`, and reports. The parent test kills this
 * process with SIGKILL at random moments; each new process recovers the directory and carries on.
 *
 * argv: <dir> <children> <turns>
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import type { Message } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, childrenArg = '5', turnsArg = '6'] = process.argv.slice(2)
if (!dir) throw new Error('usage: waveWorker <dir> [children] [turns]')
const children = Number(childrenArg)
const turns = Number(turnsArg)
const charges = path.join(dir, 'charges.log')
// A child turn costs $0.0001: room for every turn, and the lead's budget for every child, however
// many kills the test asks for (SPINDLE_WAVE_KILLS), so no child stops at its budget for a person.
const childSpend = Math.max(0.05, Math.ceil(turns * 2) / 10_000)
const leadSpend = Math.max(1, 2 * children * childSpend)

// Not idempotent: each run appends a line. A key appearing twice means an effect ran twice.
const charge = defineTool({
  name: 'charge',
  description: 'Charge a card',
  input: z.object({ cents: z.number().int() }),
  execute: ({ cents }, { idempotencyKey }) => {
    const fd = fs.openSync(charges, 'a')
    fs.writeSync(fd, `${idempotencyKey} ${cents}\n`)
    fs.fsyncSync(fd)
    fs.closeSync(fd)
    return { charged: cents }
  },
})

function spawned(messages: readonly Message[]): string[] {
  return messages
    .filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === 'spawn_thread')
    .map((m) => JSON.parse(m.content).threadId as string)
}

const model = scriptedModel(
  (r) => {
    if (r.directiveName === 'lead') {
      if (r.turn === 1) {
        return {
          toolCalls: Array.from({ length: children }, (_, i) => ({ name: 'spawn_thread', input: { name: `part${i}`, prompt: `part ${i}`, limits: { spend: childSpend } } })),
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
  // Time-bound work: the test's kills must land before the wave ends, whatever the runtime's speed.
  { latencyMs: (r) => 10 + ((r.turn * 7 + r.threadId.length) % 9) },
)

// No crash-loop detection: the test kills this process from outside, and on a loaded machine a kill
// can land before any thread has taken a step, run after run. Four such runs in a row would
// quarantine the lead in its first model call, before it spawned a child (crashLoop.test.ts
// covers the detection).
const rt = await createRuntime({
  dir,
  model,
  tools: [charge],
  durability: 'fsync',
  defaultLimits: { turns: null, spend: leadSpend },
  config: { supervision: { maxRecoveries: null } },
})
if (rt.list().length === 0) await rt.spawn({ directive: { name: 'lead', prompt: 'run the wave' } })
// Children appear while the lead runs: wait until nothing is left running here.
while (rt.active().length > 0) await Promise.all(rt.active().map((t) => t.done.catch(() => undefined)))
await rt.close()
process.stdout.write('wave stopped\n')
