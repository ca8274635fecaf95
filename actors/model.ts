/**
 * The model adapter contract. Side effects. Not imported by machines/.
 */
import { z } from 'zod'
import type { ModelUsage, ToolCall } from '../machines/threadEvents.js'

export type Message =
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls?: ToolCall[] }
  | { role: 'tool'; toolCallId: string; toolName: string; content: string; isError?: boolean }

/** What a model sees of a tool: its name, description and JSON Schema of its input. */
export interface ToolDefinition {
  name: string
  description: string
  inputSchema: Record<string, unknown>
}

/**
 * One model call: what `ModelAdapter.generate` is asked. `threadId`, `turn` and `attempt` together
 * name the call; a call cut short by a crash is made again with the same three (at least once).
 */
export interface ModelRequest {
  /** The thread the call is for (e.g. `research-3f9k2m1x0q7a`): the same across restarts. */
  threadId: string
  /**
   * The name of the directive the thread runs: `directive.name` given to `rt.spawn`, a directive
   * file's `name`, the `name` of a `spawn_thread` call. A continuation keeps its predecessor's; a
   * thread that recovery escalation started has its handler's. What a script or an adapter tells
   * threads apart by (a model per kind of task, a test's script per thread).
   */
  directiveName: string
  /**
   * The turn the reply will answer, from 1: the replies recorded so far plus one (a continuation
   * counts on from its predecessor). Every attempt at one turn has the same turn.
   */
  turn: number
  /**
   * Which attempt at this turn, from 1: one more for each failed call retried
   * (`retry.maxRetries`); a call made again after a crash keeps its attempt.
   */
  attempt: number
  /**
   * The directive's instructions: the system prompt, the same on every call of the thread (absent
   * when it has none). Not part of `messages`: an adapter sends it the way its provider takes a
   * system prompt (the AI SDK adapter as `system`).
   */
  instructions?: string
  /**
   * The JSON Schema the final answer must match: the directive's `output` (absent: the answer is
   * text). An adapter with a structured-output mode asks the provider for it (the AI SDK adapter
   * does); one without should tell the model in its prompt. Spindle parses and validates the
   * answer of a reply without tool calls either way, and asks again with the errors.
   */
  outputSchema?: Record<string, unknown>
  /**
   * The conversation so far, oldest first: the directive's prompt as the first `user` message
   * (a continuation's restates it and carries the recent part of its predecessor's), then each
   * `assistant` reply and each `tool` result. Read-only: it is the thread's own cache.
   */
  messages: readonly Message[]
  /**
   * The tools the thread may call: the runtime's tools (with the built-in `spawn_thread` and
   * `wait_threads` unless `builtinTools` is false), narrowed to the directive's `tools` list and
   * its permissions. Each has a JSON Schema of its input, made from its zod schema.
   */
  tools: readonly ToolDefinition[]
  /** Aborted on cancel, on timeout and when the runtime closes. Adapters must stop promptly. */
  signal: AbortSignal
  /**
   * True when someone listens to this call's reply as it arrives (`rt.replies`, `rt.onReply`,
   * `handle.replies`): an adapter that can stream should, and hand each part to `emit`. False (or
   * absent, when a host calls the adapter itself): nobody would see the parts, and an adapter may
   * make a plain call instead.
   */
  streaming?: boolean
  /**
   * Hands over a part of the reply as it arrives, in order. Parts are for watching only: the
   * adapter still returns the whole `ModelResponse`, and only that is recorded. A part emitted after
   * the call was stopped (cancelled, timed out) is dropped. A no-op while `streaming` is false.
   */
  emit?: (part: ModelStreamPart) => void
}

/**
 * A part of a reply as it streams: a piece of its text, a tool call begun (its id and tool), a
 * piece of a tool call's input as the model writes it (JSON text, in pieces that need not parse).
 */
export type ModelStreamPart =
  | { type: 'text'; text: string }
  | { type: 'tool_call'; callId: string; toolName: string }
  | { type: 'tool_input'; callId: string; text: string }

/**
 * A model's reply. A reply without tool calls ends the thread: it completes, and `text` becomes
 * its `result`. A reply with tool calls runs them and calls the model again; its `text`, unless
 * empty, is kept as the thread's partial result (what it returns if it is cancelled later).
 */
export interface ModelResponse {
  text: string
  toolCalls: ToolCall[]
  usage: ModelUsage
}

/**
 * Calls a model. Throw on failure: spindle classifies what was thrown (an `status` and `headers`
 * property on the error are read as HTTP status and response headers).
 *
 * Failure semantics: a call in flight when the process dies is made again after recovery (at least
 * once); its reply is recorded before the thread acts on it, so a recorded reply is never requested
 * twice.
 */
export interface ModelAdapter {
  readonly name: string
  /** The model's context window in tokens; when known, `context_window_pressure` hooks can fire. */
  readonly contextWindow?: number
  generate(request: ModelRequest): Promise<ModelResponse>
}

/** An HTTP-like failure from a provider: status, headers and the body's error code. */
export class ModelHttpError extends Error {
  readonly status: number
  readonly headers: Record<string, string>
  readonly code: string | undefined

  constructor(status: number, message: string, options: { headers?: Record<string, string>; code?: string } = {}) {
    super(message)
    this.status = status
    this.headers = Object.fromEntries(Object.entries(options.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v]))
    this.code = options.code
  }
}
ModelHttpError.prototype.name = 'ModelHttpError'

const tokenCount = z.number().int().nonnegative()

/** What an adapter must return; checked before the reply is recorded, so a bad one never reaches the transcript. */
export const ModelResponseSchema = z.object({
  text: z.string(),
  toolCalls: z.array(z.object({ id: z.string().min(1), name: z.string().min(1), input: z.unknown() })),
  usage: z.object({ inputTokens: tokenCount, outputTokens: tokenCount, cost: z.number().nonnegative().optional() }),
})

/** Thrown (and classified permanent) when an adapter returns something that is not a ModelResponse. */
export class InvalidModelResponseError extends Error {
  constructor(adapter: string, detail: string) {
    super(`Model adapter "${adapter}" returned an invalid response: ${detail}. Fix the adapter to return { text, toolCalls, usage }.`)
  }
}
InvalidModelResponseError.prototype.name = 'InvalidModelResponseError'
