/**
 * Child process of doneKill.test.ts: a host running many long threads and one short one, which
 * kills itself with SIGKILL in the continuation where the short thread's `done` resolves — right
 * after printing the outcome it was told, while the long threads' rounds go on.
 *
 * argv: <dir> <fsync|process>. With SPINDLE_TRACK_DURABLE=1 it records what each fdatasync made
 * durable (trackDurable.ts), for the power-loss row.
 */
import fs from 'node:fs'
import { z } from 'zod'
import { trackDurable } from './trackDurable.js'

const [dir, durabilityArg = 'fsync'] = process.argv.slice(2)
if (!dir) throw new Error('usage: doneKillWorker <dir> [fsync|process]')
if (process.env.SPINDLE_TRACK_DURABLE === '1') trackDurable(fs.realpathSync(dir))
const { createRuntime, defineTool, scriptedModel } = await import('../../src/index.js')

const LONG_THREADS = 40
const SHORT_TURNS = 3

const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n }) })
// The long threads never end on their own: they keep checkpoint rounds going when the short one ends.
const model = scriptedModel((r) =>
  r.directiveName === 'short' && r.turn >= SHORT_TURNS ? { text: `short done after ${r.turn} turns` } : { toolCalls: [{ name: 'echo', input: { n: r.turn } }] },
)
const rt = await createRuntime({ dir, model, tools: [echo], durability: durabilityArg === 'process' ? 'process' : 'fsync', defaultLimits: { turns: null } })
await Promise.all(Array.from({ length: LONG_THREADS }, (_, i) => rt.spawn({ directive: { name: `long${i}`, prompt: 'go on' } })))
const short = await rt.spawn({ directive: { name: 'short', prompt: 'be quick' } })
short.done.then(
  (outcome) => {
    // Written synchronously, then killed in the same continuation: nothing more runs after `done`.
    fs.writeSync(1, `${JSON.stringify({ id: short.id, status: outcome.status, result: outcome.result, turns: outcome.cost.turns })}\n`)
    process.kill(process.pid, 'SIGKILL')
  },
  (error: unknown) => {
    fs.writeSync(2, `done rejected: ${String(error)}\n`)
    process.exit(1)
  },
)
