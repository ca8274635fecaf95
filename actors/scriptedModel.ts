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
  /**
   * A stream that breaks half way: the first `afterChars` characters of the turn's reply text
   * (default half of it) stream, then the call fails as a connection reset (ECONNRESET,
   * transient). Without a listener nothing streams and it fails the same.
   */
  | { fault: 'break'; afterChars?: number; message?: string }

/** One turn of a script: a reply, or faults for the first attempts followed by a reply. */
export type ScriptedTurn = ScriptedReply | { faults: ScriptedFault[]; reply: ScriptedReply }

export type Script = ScriptedTurn[] | ((request: ModelRequest) => ScriptedTurn)

export interface ScriptedModelOptions {
  /** Simulated latency of every call, in ms (default 0: answer at once). A function may vary it. */
  latencyMs?: number | ((request: ModelRequest) => number)
  /** Price per million input / output tokens, in US dollars (defaults 1 and 4). */
  pricePerMillion?: { input: number; output: number }
  /**
   * Stream replies to whoever listens (`request.streaming`): the text in pieces of `chunkChars`
   * characters (default 8), then each tool call (its start, then its input's JSON in pieces), with
   * `chunkDelayMs` between pieces (default 0: all at once, each piece still its own delta). `true`
   * takes the defaults. Nothing streams while nobody listens.
   */
  stream?: boolean | { chunkChars?: number; chunkDelayMs?: number }
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

/** A connection reset, as Node reports one: transient for the classifier. */
function connectionReset(message: string): Error {
  return Object.assign(new Error(message), { code: 'ECONNRESET' })
}

function raise(fault: ScriptedFault, signal: AbortSignal): Promise<never> {
  switch (fault.fault) {
    case 'break':
      return Promise.reject(connectionReset(fault.message ?? 'scripted stream broken: socket hang up'))
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

interface Chunking {
  chunkChars: number
  chunkDelayMs: number
}

/** Hands the reply to `request.emit` piece by piece, as a provider's stream would. */
async function streamParts(request: ModelRequest, text: string, toolCalls: ReadonlyArray<{ id: string; name: string; input: unknown }>, chunking: Chunking): Promise<void> {
  const emit = request.emit!
  const size = Math.max(1, Math.floor(chunking.chunkChars))
  const pause = async (): Promise<void> => {
    if (chunking.chunkDelayMs > 0) await sleep(chunking.chunkDelayMs, request.signal)
    else if (request.signal.aborted) throw request.signal.reason
  }
  for (let i = 0; i < text.length; i += size) {
    if (i > 0) await pause()
    emit({ type: 'text', text: text.slice(i, i + size) })
  }
  for (const call of toolCalls) {
    await pause()
    emit({ type: 'tool_call', callId: call.id, toolName: call.name })
    const json = JSON.stringify(call.input) ?? '{}'
    for (let i = 0; i < json.length; i += size) {
      if (i > 0) await pause()
      emit({ type: 'tool_input', callId: call.id, text: json.slice(i, i + size) })
    }
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
  const chunking = options.stream ? { chunkChars: 8, chunkDelayMs: 0, ...(options.stream === true ? {} : options.stream) } : null
  return {
    name: 'scripted',
    async generate(request: ModelRequest): Promise<ModelResponse> {
      const streams = chunking && request.streaming && request.emit ? chunking : null
      const step = pickTurn(script, request)
      const latency = typeof options.latencyMs === 'function' ? options.latencyMs(request) : (options.latencyMs ?? 0)
      if (latency > 0) await sleep(latency, request.signal)
      let reply: ScriptedReply
      if ('faults' in step) {
        const fault = step.faults[request.attempt - 1]
        if (fault?.fault === 'break' && streams) {
          const text = step.reply.text ?? ''
          await streamParts(request, text.slice(0, fault.afterChars ?? Math.floor(text.length / 2)), [], streams)
        }
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
      if (streams) await streamParts(request, text, toolCalls, streams)
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
