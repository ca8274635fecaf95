/**
 * Deadlines of paused tool calls: a thread suspended at a call with a deadline (a wait for an
 * answer, a tool approval whose policy denies once `approvals.timeoutSeconds` have passed) is
 * decided when it passes, by whichever runtime watches the thread — also one that opened the
 * directory long after the request was made (a deadline already past is acted on at once). Owns
 * the timers.
 */
import type { Clock } from '../base/clock.js'
import { atDeadline } from '../base/clock.js'
import { isSpindleError } from '../base/errors.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { Lifecycle, Reporter } from './events.js'

/** Errors that say the thread moved on before its deadline was acted on: nothing to report. */
const MOVED_ON = new Set(['THREAD_NOT_SUSPENDED', 'NO_PENDING_APPROVAL', 'THREAD_NOT_FOUND', 'LEASE_HELD', 'RUNTIME_CLOSED'])

export interface CallDeadlinesDeps {
  /** Decides the call whose deadline passed (callDecisions.ts). */
  passed(id: string, requestId: string): Promise<boolean>
  clock: Clock
  bus: Reporter
  life: Pick<Lifecycle, 'closed'>
}

export class CallDeadlines {
  private readonly timers = new Map<string, { requestId: string; stop: () => void }>()

  constructor(private readonly deps: CallDeadlinesDeps) {}

  /** A suspended thread watched here: its paused call's deadline, when it has one that acts. */
  track(id: string, context: ThreadContext): void {
    const call = context.pendingCall
    const acts = call != null && call.deadlineAt !== null && (call.kind === 'wait' || (context.policy.approvals?.onTimeout ?? 'deny') === 'deny')
    const current = this.timers.get(id)
    if (current && (!acts || current.requestId !== call!.requestId)) this.untrack(id)
    if (!acts || this.timers.has(id)) return
    const requestId = call!.requestId
    const stop = atDeadline(this.deps.clock, call!.deadlineAt!, () => {
      this.timers.delete(id)
      if (this.deps.life.closed) return
      this.deps.passed(id, requestId).catch((error: unknown) => {
        if (!isSpindleError(error) || !MOVED_ON.has(error.code)) this.deps.bus.report(error, id)
      })
    })
    this.timers.set(id, { requestId, stop })
  }

  untrack(id: string): void {
    this.timers.get(id)?.stop()
    this.timers.delete(id)
  }

  close(): void {
    for (const { stop } of this.timers.values()) stop()
    this.timers.clear()
  }
}
