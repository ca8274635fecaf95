/**
 * The events of the thread event stream (`rt.events()`, `rt.on('thread.…')`): their types, and
 * what each is made from — a checkpointed transition of a live thread, a decision that wakes a
 * suspended one, a spawn, a takeover. Pure: the event stream (eventStream.ts) stages what these
 * functions return with the registry change they describe.
 */
import type { LimitName, Limits } from '../../machines/threadPolicy.js'
import type { BudgetHit, ErrorCategory, ThreadEvent as MachineEvent } from '../../machines/threadEvents.js'
import type { SuspendReason, ThreadContext } from '../../machines/threadContext.js'
import type { NewEvent } from '../../persistence/eventLog.js'
import type { ThreadStatus } from '../../persistence/types.js'
import { isStateValue, statusOfValue } from '../thread/threadStatus.js'

/** What a thread waits at: a limit (`rt.approve` raises it), its budget, or a tool call's approval. */
export type ApprovalKind = 'limit' | 'budget' | 'tool'

/** The limit a thread reached, as its approval request states it. */
export interface LimitReached {
  limit: LimitName
  used: number
  max: number
  /** What the escalation policy proposes; null when it proposes nothing (approve with explicit limits). */
  proposed: number | null
}

/** The fields every event of the stream has. */
export interface StreamEventBase {
  threadId: string
  /** When it happened, ms since epoch, by the clock of the process that made the change. */
  at: number
  /** Where the event sits in the directory's log: `rt.events({ after: cursor })` resumes right after it. Opaque. */
  cursor: string
}

/**
 * One lifecycle change of a thread of the data directory, told by whichever process made it. A
 * discriminated union on `type`; see docs/events.md for when each is told.
 */
export type ThreadStreamEvent = StreamEventBase &
  (
    | { type: 'thread.spawned'; directive: string; parentId: string | null; previousThreadId: string | null }
    | { type: 'thread.started' }
    /** Stopped until something decides: `reason` says what (an approval, an answer, a resume). */
    | { type: 'thread.suspended'; reason: SuspendReason | null; limit: LimitReached | null; budget: BudgetHit | null; error: { code: string; message: string } | null }
    /** Told right after `thread.suspended` when a person's approval carries it on. */
    | {
        type: 'thread.approval_pending'
        kind: ApprovalKind
        requestId: string | null
        /** kind 'limit' */
        limit?: LimitReached
        /** kind 'budget' */
        budget?: BudgetHit
        /** kind 'tool': the call that waits, with the model's input. */
        tool?: string
        callId?: string
        input?: unknown
        request?: unknown
        deadlineAt: number | null
      }
    /** Told right after `thread.suspended` when a tool call waits for an answer (`ask_human`, `waitForAnswer`). */
    | { type: 'thread.question_pending'; requestId: string; tool: string; callId: string; input: unknown; request: unknown; deadlineAt: number | null }
    | {
        type: 'thread.approved'
        kind: ApprovalKind
        requestId: string | null
        by: string
        /** kind 'limit' and 'budget': the limits it carries on under. */
        limits?: Partial<Limits>
        tool?: string
        callId?: string
        /** kind 'tool': the input the call runs with; `edited` when the approver changed the model's. */
        input?: unknown
        edited?: boolean
        message?: string
      }
    /** At a limit or budget the thread then ends `cancelled`; at a tool call the model gets the denial and goes on. */
    | { type: 'thread.denied'; kind: ApprovalKind; requestId: string | null; by: string; reason: string | null; tool?: string; callId?: string }
    /** `timedOut`: nobody answered before the call's deadline (`by` is 'deadline', no `answer`). */
    | { type: 'thread.answered'; requestId: string; tool: string; callId: string; by: string; answer?: unknown; timedOut: boolean }
    /** `rt.resume` / `spindle resume`: carried on after a suspension for `reason` (an error, a crash loop …). */
    | { type: 'thread.resumed'; by: string; reason: SuspendReason | null }
    /** A model call failed and is tried again: `attempt` runs after `delayMs` (at `dueAt`). */
    | { type: 'thread.retrying'; attempt: number; category: ErrorCategory; message: string; delayMs: number; dueAt: number }
    | { type: 'thread.cancelled'; reason: string | null }
    | { type: 'thread.completed'; result: string | null }
    | { type: 'thread.error'; error: { code: string; message: string } }
    /** Ended `continued`: `nextThreadId` carries the task on. */
    | { type: 'thread.continued'; nextThreadId: string | null }
    /** A runtime process took the thread over from one that stopped or died (recovery, orphan takeover). */
    | { type: 'thread.taken_over'; owner: string; pid: number; host: string }
  )

export type ThreadStreamEventType = ThreadStreamEvent['type']

export interface EventsOptions {
  /** A cursor from an event: the stream starts right after it. Absent: with the next event to happen. '0': with the oldest kept. */
  after?: string
  /** Only this thread's events. */
  threadId?: string
  /** Only events of these types. */
  types?: ThreadStreamEventType[]
  /** Ends the iterator (its `next()` resolves done). */
  signal?: AbortSignal
}

/** Every type of the stream, e.g. to check a name a host passes. */
export const STREAM_EVENT_TYPES: ReadonlySet<string> = new Set<ThreadStreamEventType>([
  'thread.spawned',
  'thread.started',
  'thread.suspended',
  'thread.approval_pending',
  'thread.question_pending',
  'thread.approved',
  'thread.denied',
  'thread.answered',
  'thread.resumed',
  'thread.retrying',
  'thread.cancelled',
  'thread.completed',
  'thread.error',
  'thread.continued',
  'thread.taken_over',
])

/** An event as staged: everything but the cursor, which its row gives. */
type Fields = Record<string, unknown>

function event(threadId: string, type: ThreadStreamEventType, at: number, data: Fields): NewEvent {
  return { threadId, type, at, data }
}

function limitReached(context: ThreadContext): LimitReached | null {
  const hit = context.limitHit
  return hit ? { limit: hit.limit, used: hit.used, max: hit.max, proposed: hit.proposed } : null
}

/** Why a thread stopped for an error: its error, else the model failure that used up its retries. */
function failureOf(context: ThreadContext): { code: string; message: string } | null {
  if (context.error) return { code: context.error.code, message: context.error.message }
  const failure = context.lastFailure
  return failure ? { code: failure.code ?? failure.category, message: failure.message } : null
}

/** What a thread waits at once it has suspended, if a person's decision carries it on. */
function pendingOf(threadId: string, at: number, context: ThreadContext): NewEvent | null {
  const call = context.pendingCall
  if (context.suspendReason === 'tool_approval' && call) {
    const { requestId, tool, callId, input, request, deadlineAt } = call
    return event(threadId, 'thread.approval_pending', at, { kind: 'tool', requestId, tool, callId, input, request, deadlineAt })
  }
  if (context.suspendReason === 'waiting' && call) {
    const { requestId, tool, callId, input, request, deadlineAt } = call
    return event(threadId, 'thread.question_pending', at, { requestId, tool, callId, input, request, deadlineAt })
  }
  if (context.suspendReason === 'limit' && context.limitHit) {
    return event(threadId, 'thread.approval_pending', at, { kind: 'limit', requestId: context.limitHit.requestId, limit: limitReached(context), deadlineAt: null })
  }
  if (context.suspendReason === 'budget' && context.budgetHit) {
    return event(threadId, 'thread.approval_pending', at, { kind: 'budget', requestId: null, budget: { ...context.budgetHit }, deadlineAt: null })
  }
  return null
}

/**
 * The events a checkpointed transition of a live thread makes, in order (usually none: a turn
 * that only carries a thread forward changes nothing the stream tells).
 */
export function eventsOfTransition(
  threadId: string,
  at: number,
  snapshot: { value: unknown; context: ThreadContext },
  previous: { status: ThreadStatus | null; value: unknown },
): NewEvent[] | null {
  const status = statusOfValue(snapshot.value)
  const context = snapshot.context
  if (status === previous.status) {
    // Within running: a failed model call waiting for its retry.
    if (status === 'running' && context.retry && isStateValue(snapshot.value, 'waitingToRetry') && !isStateValue(previous.value, 'waitingToRetry')) {
      const { dueAt, failure } = context.retry
      const failedAt = context.lastAt ?? at
      return [event(threadId, 'thread.retrying', at, { attempt: context.attempt + 1, category: failure.category, message: failure.message, delayMs: Math.max(0, dueAt - failedAt), dueAt })]
    }
    return null
  }
  switch (status) {
    case 'running':
      return previous.status === 'created' || previous.status === null ? [event(threadId, 'thread.started', at, {})] : null
    case 'suspended': {
      const suspended = event(threadId, 'thread.suspended', at, {
        reason: context.suspendReason,
        limit: context.suspendReason === 'limit' ? limitReached(context) : null,
        budget: context.suspendReason === 'budget' && context.budgetHit ? { ...context.budgetHit } : null,
        error: context.suspendReason === 'error' || context.suspendReason === 'crash_loop' || context.suspendReason === 'context_length' ? failureOf(context) : null,
      })
      const pending = pendingOf(threadId, at, context)
      return pending ? [suspended, pending] : [suspended]
    }
    case 'completed':
      return [event(threadId, 'thread.completed', at, { result: context.result })]
    case 'error':
      return [event(threadId, 'thread.error', at, { error: context.error ?? { code: 'error', message: 'failed' } })]
    case 'cancelled':
      return [event(threadId, 'thread.cancelled', at, { reason: context.cancelReason })]
    case 'continued':
      return [event(threadId, 'thread.continued', at, { nextThreadId: context.nextThreadId })]
    default:
      return null
  }
}

/**
 * The event a decision on a suspended thread makes (decisions.ts `wake`), given what the thread
 * waited at; null for one the transition tells already (a cancel is `thread.cancelled`).
 */
export function eventOfDecision(threadId: string, context: ThreadContext, note: [string, unknown] | null, decided: MachineEvent): NewEvent | null {
  const at = decided.at
  const call = context.pendingCall
  if (decided.type === 'CALL_DECIDED') {
    const where = { requestId: decided.requestId, tool: call?.tool ?? '', callId: decided.callId }
    switch (decided.decision) {
      case 'approved': {
        const edited = decided.input !== undefined
        return event(threadId, 'thread.approved', at, {
          kind: 'tool',
          ...where,
          by: decided.by,
          input: edited ? decided.input : call?.input,
          edited,
          ...(decided.message !== undefined ? { message: decided.message } : {}),
        })
      }
      case 'denied':
        return event(threadId, 'thread.denied', at, { kind: 'tool', ...where, by: decided.by, reason: decided.reason ?? null })
      case 'answered':
        return event(threadId, 'thread.answered', at, { ...where, by: decided.by, answer: decided.answer, timedOut: false })
      case 'timed_out':
        return event(threadId, 'thread.answered', at, { ...where, by: decided.by, timedOut: true })
    }
  }
  const kind: ApprovalKind = context.suspendReason === 'budget' ? 'budget' : 'limit'
  if (decided.type === 'RESUME') {
    if (decided.decision === 'approved') {
      return event(threadId, 'thread.approved', at, {
        kind,
        requestId: decided.requestId ?? null,
        by: decided.by ?? 'api',
        ...(decided.limits ? { limits: decided.limits } : {}),
        ...messageOf(note),
      })
    }
    return event(threadId, 'thread.resumed', at, { by: decided.by ?? 'api', reason: context.suspendReason })
  }
  if (decided.type === 'CANCEL' && note?.[0] === 'approval_decided') {
    const decision = note[1] as { requestId?: string | null; by?: string; message?: string }
    return event(threadId, 'thread.denied', at, { kind, requestId: decision.requestId ?? null, by: decision.by ?? decided.by ?? 'api', reason: decision.message ?? null })
  }
  return null
}

function messageOf(note: [string, unknown] | null): { message?: string } {
  const message = (note?.[1] as { message?: unknown } | undefined)?.message
  return typeof message === 'string' ? { message } : {}
}

/** A stored event as the stream hands it out. */
export function toStreamEvent(row: { id: number; threadId: string; type: string; at: number; data: Record<string, unknown> }): ThreadStreamEvent {
  return { ...row.data, type: row.type, threadId: row.threadId, at: row.at, cursor: String(row.id) } as ThreadStreamEvent
}
