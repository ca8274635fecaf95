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

export interface ModelRequest {
  threadId: string
  directiveName: string
  turn: number
  attempt: number
  messages: readonly Message[]
  tools: readonly ToolDefinition[]
  /** Aborted on cancel, on timeout and when the runtime closes. Adapters must stop promptly. */
  signal: AbortSignal
}

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
