/**
 * The built-in deterministic model: drives the demo and the tests, and injects faults.
 */
import { SpindleError } from '../src/base/errors.js'
import type { ModelAdapter, ModelRequest, ModelResponse } from './model.js'
import { ModelHttpError } from './model.js'

/** A reply the scripted model gives. Usage defaults to an estimate from the text sizes. */
export interface ScriptedReply {
  text?: string
  toolCalls?: Array<{ name: string; input?: unknown; id?: string }>
  usage?: { inputTokens?: number; outputTokens?: number; cost?: number }
}

/** A fault the scripted model injects instead of replying. */
export type ScriptedFault =
  | { fault: 'http'; status: number; headers?: Record<string, string>; message?: string; code?: string }
  | { fault: 'hang' }
  | { fault: 'throw'; message: string }

/** One turn of a script: a reply, or faults for the first attempts followed by a reply. */
export type ScriptedTurn = ScriptedReply | { faults: ScriptedFault[]; reply: ScriptedReply }

export type Script = ScriptedTurn[] | ((request: ModelRequest) => ScriptedTurn)

export interface ScriptedModelOptions {
  /** Simulated latency of every call, in ms (default 0: answer at once). A function may vary it. */
  latencyMs?: number | ((request: ModelRequest) => number)
  /** Price per million input / output tokens, in US dollars (defaults 1 and 4). */
  pricePerMillion?: { input: number; output: number }
}

function estimateTokens(text: string): number {
  return Math.ceil(text.length / 4)
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason)
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(signal.reason)
    }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

function raise(fault: ScriptedFault, signal: AbortSignal): Promise<never> {
  switch (fault.fault) {
    case 'http':
      return Promise.reject(
        new ModelHttpError(fault.status, fault.message ?? `scripted HTTP ${fault.status}`, {
          ...(fault.headers ? { headers: fault.headers } : {}),
          ...(fault.code ? { code: fault.code } : {}),
        }),
      )
    case 'throw':
      return Promise.reject(new Error(fault.message))
    case 'hang':
      return new Promise((_, reject) => {
        if (signal.aborted) reject(signal.reason)
        signal.addEventListener('abort', () => reject(signal.reason), { once: true })
      })
  }
}

function pickTurn(script: Script, request: ModelRequest): ScriptedTurn {
  if (typeof script === 'function') return script(request)
  const turn = script[request.turn - 1]
  if (turn === undefined) {
    throw new SpindleError(
      'MODEL_SCRIPT_EXHAUSTED',
      `The scripted model has ${script.length} turns but thread ${request.threadId} asked for turn ${request.turn}. ` +
        `Add turns to the script or end it with a reply that has no tool calls.`,
      { details: { threadId: request.threadId, turn: request.turn } },
    )
  }
  return turn
}

/**
 * A deterministic model: the reply depends only on the request's thread, turn and attempt, so a
 * thread recovered after a crash sees the same replies it would have seen.
 *
 * @example
 * scriptedModel([
 *   { toolCalls: [{ name: 'lookup', input: { q: 'X' } }] },
 *   { faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '2' } }], reply: { text: 'X is 42' } },
 * ])
 */
export function scriptedModel(script: Script, options: ScriptedModelOptions = {}): ModelAdapter {
  const price = options.pricePerMillion ?? { input: 1, output: 4 }
  return {
    name: 'scripted',
    async generate(request: ModelRequest): Promise<ModelResponse> {
      const step = pickTurn(script, request)
      const latency = typeof options.latencyMs === 'function' ? options.latencyMs(request) : (options.latencyMs ?? 0)
      if (latency > 0) await sleep(latency, request.signal)
      let reply: ScriptedReply
      if ('faults' in step) {
        const fault = step.faults[request.attempt - 1]
        if (fault) return raise(fault, request.signal)
        reply = step.reply
      } else {
        reply = step
      }
      const text = reply.text ?? ''
      const toolCalls = (reply.toolCalls ?? []).map((call, i) => ({
        id: call.id ?? `call_${request.turn}_${i + 1}`,
        name: call.name,
        input: call.input ?? {},
      }))
      const inputTokens =
        reply.usage?.inputTokens ??
        request.messages.reduce((n, m) => n + estimateTokens(m.content) + 4, request.instructions ? estimateTokens(request.instructions) + 4 : 0)
      const outputTokens =
        reply.usage?.outputTokens ?? estimateTokens(text) + toolCalls.reduce((n, c) => n + estimateTokens(JSON.stringify(c.input)) + 8, 0)
      const cost = reply.usage?.cost ?? (inputTokens * price.input + outputTokens * price.output) / 1_000_000
      return { text, toolCalls, usage: { inputTokens, outputTokens, cost } }
    },
  }
}
