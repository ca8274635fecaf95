/**
 * What host code holds and sees of a thread: the `ThreadHandle` a runtime gives it (for a thread it
 * runs, LiveThread; for one it only read, StoredThread), and the `ThreadView` a subscriber gets,
 * built from a snapshot by `viewOf`. Plain data over the machine's context; apart from the live
 * host because the stored handle, the runtime facade and the inspector build views without one.
 */
import type { StateValue } from 'xstate'
import type { Limits } from '../../machines/threadPolicy.js'
import type { ThreadContext, ThreadDirective } from '../../machines/threadContext.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import type { ErrorCategory } from '../../machines/threadEvents.js'
import { effectOf } from '../../machines/effectOf.js'
import type { ThreadEffect } from '../../machines/effectOf.js'
import type { Cost, ThreadStatus } from '../../persistence/types.js'
import { statusOfValue } from './threadStatus.js'
import type { ReplyDelta } from '../../actors/replyDelta.js'

/** What a subscriber sees at every transition: plain data, safe to keep. */
export interface ThreadView {
  id: string
  status: ThreadStatus
  /** The machine's state value, e.g. `{ running: 'callingModel' }`. */
  state: StateValue
  directive: ThreadDirective
  usage: Cost
  limits: Limits
  suspendReason: ThreadContext['suspendReason']
  limitHit: ThreadContext['limitHit']
  /** The tool call a thread suspended for `tool_approval` or `waiting` waits at, with its request id; else null. */
  pendingCall: NonNullable<ThreadContext['pendingCall']> | null
  retry: ThreadContext['retry']
  /** Model calls retried after a failure, over the thread's life. */
  retries: number
  /** The latest model error (its category and message), kept after a retry got past it; null when none failed. */
  lastError: { category: ErrorCategory; message: string } | null
  result: string | null
  error: { code: string; message: string } | null
  /** What the runtime runs for the thread at this point, or null (it waits for an event, or has stopped). */
  step: ThreadStep | null
}

/** The effect a thread's state asks for, as a subscriber sees it. */
export type ThreadStep =
  | { effect: 'callModel'; turn: number; attempt: number }
  | { effect: 'runTool'; turn: number; callId: string; tool: string }
  | { effect: 'decideLimit'; limit: string; used: number; max: number }
  | { effect: 'waitUntil'; dueAt: number }
  | { effect: 'settleChildren' }

/** The step a snapshot is at, for a view: null when its context cannot say (a hand-edited state.json). */
export function stepOfSnapshot(snapshot: { value: StateValue; context: ThreadContext }): ThreadStep | null {
  try {
    return stepOf(effectOf(snapshot))
  } catch {
    return null
  }
}

function stepOf(effect: ThreadEffect | null): ThreadStep | null {
  if (effect === null) return null
  switch (effect.src) {
    case 'callModel':
      return { effect: 'callModel', turn: effect.input.turn, attempt: effect.input.attempt }
    // Undefined only in a snapshot edited by hand (see effectOf): no step to show.
    case 'runTool':
      return effect.input.call ? { effect: 'runTool', turn: effect.input.turn, callId: effect.input.call.id, tool: effect.input.call.name } : null
    case 'decideLimit':
      return effect.input.hit ? { effect: 'decideLimit', ...effect.input.hit } : null
    case 'waitUntil':
      return { effect: 'waitUntil', dueAt: effect.input.dueAt }
    case 'settleChildren':
      return { effect: 'settleChildren' }
  }
}

/** A thread spawned or loaded by a runtime. */
export interface ThreadHandle<Output = unknown> {
  readonly id: string
  readonly status: ThreadStatus
  /** Settles when the thread stops: completed, error, cancelled, continued or suspended. */
  readonly done: Promise<ThreadOutcome<Output>>
  /** Called at every transition (and at once with the current view). Returns an unsubscribe function. */
  subscribe(listener: (view: ThreadView) => void): () => void
  /**
   * The thread's model replies as they stream: text and tool-call deltas of each call made from now
   * on, each call closed by `reply_recorded` or `reply_discarded` (docs/streaming.md). Ends when the
   * thread stops here (completed, failed, cancelled, suspended, or the runtime closed); at once for
   * a thread this runtime does not run. A consumer that falls behind gets text pieces joined, and
   * past 1000 waiting deltas loses the oldest.
   */
  replies(): AsyncIterableIterator<ReplyDelta>
  getSnapshot(): ThreadView
}

/** What a subscriber of the thread `id` sees at `snapshot`. */
export function viewOf(id: string, snapshot: { value: StateValue; context: ThreadContext }): ThreadView {
  const c = snapshot.context
  return {
    id,
    status: statusOfValue(snapshot.value),
    state: snapshot.value,
    directive: c.directive,
    usage: { ...c.usage },
    limits: c.limits,
    suspendReason: c.suspendReason,
    limitHit: c.limitHit,
    pendingCall: c.pendingCall ?? null,
    retry: c.retry,
    retries: c.retries ?? 0,
    lastError: c.lastError ? { ...c.lastError } : null,
    result: c.result,
    error: c.error,
    step: stepOfSnapshot(snapshot),
  }
}
