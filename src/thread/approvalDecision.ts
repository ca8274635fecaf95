/**
 * How an approval request was decided, as its decision file says it and as a transcript records
 * it; and the one check an approval must pass against the thread's stored state, shared by
 * `rt.approve` and the functions that write an answer for it (`respondToApproval`, the CLI), so
 * that both refuse the same answers with the same words. Pure: no files.
 */
import type { Limits } from '../../machines/threadPolicy.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { exceeded } from '../../machines/threadContext.js'
import type { TranscriptEntry } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'

/**
 * What `<rid>.decision.json` holds. `approved` and `denied` answer the request; `cancelled` and
 * `failed` closed it otherwise (the thread was cancelled, or failed, while it waited). `recovered`:
 * written after a crash from the transcript, not by the process that decided.
 */
export interface ApprovalDecision {
  decision: 'approved' | 'denied' | 'answered' | 'timed_out' | 'cancelled' | 'failed'
  by: string | null
  /** ISO time of the decision. */
  at: string
  limits?: Partial<Limits>
  /** A tool call approved with edited input: the input it ran with. */
  input?: unknown
  /** A question's answer. */
  answer?: unknown
  message: string | null
  recovered?: true
}

type Data = Record<string, unknown>

const text = (value: unknown): string | null => (typeof value === 'string' ? value : null)
const isoOf = (at: unknown, fallback: string): string => (typeof at === 'number' && Number.isFinite(at) ? new Date(at).toISOString() : fallback)

/**
 * The request a suspended thread waits at — a limit's approval request, a tool call's approval
 * request, a question — or null when it waits at none.
 */
export function openRequestId(context: Pick<ThreadContext, 'suspendReason' | 'limitHit' | 'pendingCall'>): string | null {
  if (context.suspendReason === 'limit') return context.limitHit?.requestId ?? null
  if (context.suspendReason === 'tool_approval' || context.suspendReason === 'waiting') return context.pendingCall?.requestId ?? null
  return null
}

/**
 * How approval request `requestId` was decided, read from the thread's transcript: the
 * `approval_decided` entry that names it, else the input that took the thread out of its
 * suspension at it (a `CANCEL`, a `FAIL`, a `RESUME`). Null while the transcript shows the thread
 * still waiting at it, or when it does not hold the suspension at all.
 */
export function decisionFromTranscript(entries: readonly TranscriptEntry[], requestId: string): ApprovalDecision | null {
  const named = (e: TranscriptEntry): boolean => (e.data as Data | null)?.requestId === requestId
  let asked = -1
  for (let i = entries.length - 1; i >= 0; i--) {
    if ((entries[i]!.type === 'LIMIT_DECIDED' || entries[i]!.type === 'TOOL_PAUSED') && named(entries[i]!)) {
      asked = i
      break
    }
  }
  for (let i = asked + 1; i < entries.length; i++) {
    const entry = entries[i]!
    const data = (entry.data ?? {}) as Data
    if (entry.type === 'CALL_DECIDED' && named(entry)) {
      const decision = data.decision === 'denied' || data.decision === 'answered' || data.decision === 'timed_out' ? data.decision : 'approved'
      return {
        decision,
        by: text(data.by),
        at: isoOf(data.at, entry.ts),
        ...(data.input !== undefined ? { input: data.input } : {}),
        ...(data.answer !== undefined ? { answer: data.answer } : {}),
        // An approval's note, a denial's reason.
        message: text(data.message ?? data.reason),
      }
    }
    if (entry.type === 'approval_decided' && named(entry)) {
      const decision = data.decision === 'denied' ? 'denied' : 'approved'
      return {
        decision,
        by: text(data.by),
        at: isoOf(data.at, entry.ts),
        ...(decision === 'approved' && data.limits && typeof data.limits === 'object' ? { limits: data.limits as Partial<Limits> } : {}),
        message: text(data.message),
      }
    }
    // Without the suspension in the transcript (rewritten by hand), only the entry naming it counts.
    if (asked < 0) continue
    if (entry.type === 'CANCEL') return { decision: 'cancelled', by: text(data.by), at: isoOf(data.at, entry.ts), message: text(data.reason) }
    if (entry.type === 'FAIL') return { decision: 'failed', by: null, at: isoOf(data.at, entry.ts), message: text((data.error as Data | undefined)?.message) }
    if (entry.type === 'RESUME') {
      return { decision: 'approved', by: text(data.by), at: isoOf(data.at, entry.ts), ...(data.limits ? { limits: data.limits as Partial<Limits> } : {}), message: null }
    }
  }
  return null
}

/**
 * LIMIT_STILL_EXCEEDED when approving thread `id` with `limits` would suspend it again at once
 * (it has used at least the new limit), else null.
 */
export function limitStillExceeded(id: string, context: Pick<ThreadContext, 'limits' | 'usage' | 'activeMs'>, limits: Partial<Limits>): SpindleError | null {
  const still = exceeded({ ...context, limits: { ...context.limits, ...limits } })
  if (!still) return null
  return new SpindleError(
    'LIMIT_STILL_EXCEEDED',
    `Approving thread ${id} with these limits would suspend it again at once: it has used ${still.used} of ${still.limit}, and the limit would be ${still.max}. Raise ${still.limit} above ${still.used}.`,
    { details: { threadId: id, ...still } },
  )
}

/**
 * Of the requests `undecided` (stored with no decision), those the thread no longer waits at, each
 * with how its transcript says it was decided (null: it does not say). A process killed between
 * recording a decision and storing it leaves these; the stored decision is owed.
 */
export function decisionsOwed(
  undecided: readonly string[],
  entries: readonly TranscriptEntry[],
  replayed: { status: string; snapshot: unknown },
): Array<{ requestId: string; decision: ApprovalDecision | null }> {
  const context = (replayed.snapshot as { context?: ThreadContext }).context
  const open = replayed.status === 'suspended' && context ? openRequestId(context) : null
  return undecided.filter((requestId) => requestId !== open).map((requestId) => ({ requestId, decision: decisionFromTranscript(entries, requestId) }))
}
