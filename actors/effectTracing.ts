/**
 * What the thread effects (threadEffects.ts) tell tracing: a span per model call and per tool call.
 * Side effects. Not imported by machines/. The runtime implements it over OpenTelemetry
 * (src/runtime/tracing.ts); without tracing the effect host has none, and the effects make no
 * call at all, so that the hot path pays one null check.
 */
import type { FailureInfo, ToolCall } from '../machines/threadEvents.js'
import type { ModelResponse } from './model.js'
import type { ToolOutcome } from './tools.js'

/** The span of one model call. Every method may be called after `end`; it then does nothing. */
export interface ModelCallTrace {
  /** Runs `body` with the call's span active, so that an adapter's own spans (HTTP, SDK) nest under it. */
  within<T>(body: () => T): T
  /** The reply as it will be recorded. */
  replied(reply: ModelResponse): void
  /** The failure as classified (the span gets error status). */
  failed(failure: FailureInfo): void
  /** Ends the span; one that neither replied nor failed was stopped (a cancel, a restart). */
  end(): void
}

/** The span of one tool call. */
export interface ToolCallTrace {
  /** Runs `body` with the call's span active: a `spawn_thread` child's spans go under it. */
  within<T>(body: () => T): T
  /** Ends the span with the call's outcome; without one, the call was stopped or paused. */
  end(outcome?: ToolOutcome, paused?: 'approval' | 'wait'): void
}

export interface EffectTracing {
  /** A span for attempt `at.attempt` of turn `at.turn` on model `model` (the runtime's name) of adapter `adapter`; null when the thread is not traced. */
  modelCall(threadId: string, at: { turn: number; attempt: number }, model: string, adapter: string): ModelCallTrace | null
  /** A span for one tool call of turn `turn`; null when the thread is not traced. */
  toolCall(threadId: string, turn: number, call: ToolCall): ToolCallTrace | null
}
