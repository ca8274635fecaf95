/**
 * Child process of the shutdown tests (shutdown.test.ts): a host program with one thread on a data
 * directory, which the test stops with a signal at a known point and starts again.
 *
 * argv: <dir> <scenario> [graceMs]
 * - `slow`: the thread's model call takes a minute (it heeds its abort signal); prints `calling`
 *   once the call is under way. `answer`: the same thread, its model answering at once.
 * - `charge`: turn 1 calls `charge`, a tool that is not idempotent and takes CHARGE_MS (or, with
 *   `charge-forever`, until it is aborted); it prints `charging` when it starts and appends its
 *   idempotency key to charges.log when it has charged. Turn 2 answers with what the model was
 *   given as the tool's result.
 * - `optout`: `charge` with `shutdownSignals: []` and a SIGTERM listener of the host's own, which
 *   prints `host got SIGTERM` and lets the thread finish.
 *
 * Prints `recovery <json>` once open, then `outcome <json>` when the thread stops, or `closed
 * <code>` when the runtime closed under it (its `done` rejected).
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { createRuntime, defineTool, isSpindleError } from '../../src/index.js'
import type { ModelAdapter, ModelRequest, ModelResponse, RuntimeOptions } from '../../src/index.js'

export const CHARGE_MS = 1_500
const SLOW_MS = 60_000

const [dir, scenario = 'slow', graceArg] = process.argv.slice(2)
const scenarios = ['slow', 'answer', 'charge', 'charge-forever', 'optout']
if (!dir || !scenarios.includes(scenario)) throw new Error(`usage: shutdownWorker <dir> <${scenarios.join('|')}> [graceMs]`)
const say = (line: string): void => void process.stdout.write(`${line}\n`)

function reply(text: string, toolCalls: ModelResponse['toolCalls'] = []): ModelResponse {
  return { text, toolCalls, usage: { inputTokens: 10, outputTokens: 5 } }
}

/** Resolves with `value` after `ms`, or rejects with the abort reason of `signal`. */
function after<T>(ms: number, signal: AbortSignal, value: () => T): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => resolve(value()), ms)
    signal.addEventListener('abort', () => {
      clearTimeout(timer)
      reject(signal.reason as Error)
    }, { once: true })
  })
}

const model: ModelAdapter = {
  name: 'shutdown-test',
  generate: (request: ModelRequest) => {
    if (scenario === 'slow' || scenario === 'answer') {
      if (scenario === 'answer') return Promise.resolve(reply('answered'))
      say('calling')
      return after(SLOW_MS, request.signal, () => reply('answered slowly'))
    }
    if (request.turn === 1) return Promise.resolve(reply('', [{ id: 'call-1', name: 'charge', input: {} }]))
    const result = [...request.messages].reverse().find((m) => m.role === 'tool')
    return Promise.resolve(reply(`the tool said: ${result?.content ?? 'nothing'}`))
  },
}

const charge = defineTool({
  name: 'charge',
  description: 'Charges a card: running it twice charges twice',
  input: z.object({}),
  execute: async (_input, { signal, idempotencyKey }) => {
    say('charging')
    await after(scenario === 'charge-forever' ? SLOW_MS : CHARGE_MS, signal, () => null)
    fs.appendFileSync(path.join(dir, 'charges.log'), `${idempotencyKey}\n`)
    return { charged: true }
  },
})

const options: RuntimeOptions = { dir, model, tools: [charge], durability: 'fsync', userConfig: null }
if (graceArg !== undefined) options.timeouts = { shutdownGraceMs: Number(graceArg) }
if (scenario === 'optout') {
  options.shutdownSignals = []
  process.on('SIGTERM', () => say('host got SIGTERM'))
}
const rt = await createRuntime(options)
say(`recovery ${JSON.stringify(rt.lastRecovery)}`)
const thread = rt.active()[0] ?? (rt.list().length === 0 ? await rt.spawn({ directive: { name: 'payer', prompt: 'pay' } }) : null)
if (thread) {
  try {
    say(`outcome ${JSON.stringify(await thread.done)}`)
  } catch (error) {
    if (!isSpindleError(error)) throw error
    say(`closed ${error.code}`)
  }
}
await rt.close()
if (scenario === 'optout') process.exit(0)
