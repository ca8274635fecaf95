/**
 * What subscribers of streamed replies see (`rt.replies`, `rt.onReply`, `handle.replies`), and the
 * port a model call hands its parts to. Types only: the fan-out is src/runtime/replyStream.ts.
 */
import type { ErrorCategory } from '../machines/threadEvents.js'
import type { ModelStreamPart } from './model.js'

/** Which model call a delta belongs to: its thread, the turn it answers and the attempt at it. */
export interface ReplyAttempt {
  threadId: string
  turn: number
  attempt: number
}

/**
 * Why what was streamed of an attempt will never be recorded: the call failed (a broken stream,
 * an error reply, an invalid response — a retry, if any, streams again as the next attempt), the
 * thread was cancelled or left the step, the call ran past `timeouts.modelMs`, or the runtime closed.
 */
export type ReplyDiscardReason = 'failed' | 'cancelled' | 'timed_out' | 'closed'

/**
 * One event of a reply as it streams. `text`, `tool_call` and `tool_input` come as the model
 * writes; then exactly one of `reply_recorded` (the finished reply is durable in the transcript:
 * what streamed is what the thread goes on with) or `reply_discarded` (none of what streamed of
 * this attempt counts).
 */
export type ReplyDelta =
  | (ReplyAttempt & { type: 'text'; text: string })
  | (ReplyAttempt & { type: 'tool_call'; callId: string; toolName: string })
  | (ReplyAttempt & { type: 'tool_input'; callId: string; text: string })
  | (ReplyAttempt & { type: 'reply_recorded' })
  | (ReplyAttempt & { type: 'reply_discarded'; reason: ReplyDiscardReason; category?: ErrorCategory })

/**
 * Where one model call's parts go while someone listens. The first of `recorded` and `discarded`
 * ends the attempt; parts and ends after it are dropped.
 */
export interface ReplySink {
  emit(part: ModelStreamPart): void
  /** The reply was recorded: told to subscribers once it is durable. */
  recorded(): void
  discarded(reason: ReplyDiscardReason, category?: ErrorCategory): void
}
