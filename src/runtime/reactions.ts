/**
 * What follows a checkpointed transition, in one ordered list: the crash-loop guard hears of
 * progress, a suspension is watched (and its approval request written), the hooks on transitions
 * run, a failed child's parent is told, a failed task is recovered, usage reaches the ledger, and a
 * thread's budget returns to its parent when it ends. Also the end of a thread whose own files are
 * damaged, which has no transition to observe.
 */
import type { Clock } from '../base/clock.js'
import type { SpindleError } from '../base/errors.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { Registry, ThreadStatus } from '../../persistence/types.js'
import type { LiveThread } from '../thread/liveThread.js'
import { isActive, isStateValue, statusOfValue } from '../thread/threadStatus.js'
import type { Approvals } from './approvals.js'
import type { Budgets } from './budgets.js'
import type { CrashLoopGuard } from './crashLoop.js'
import type { Emitter, Reporter } from './events.js'
import type { EventStream } from './eventStream.js'
import type { PolicyDesk } from './policyDesk.js'
import type { TaskRecovery } from './taskRecovery.js'
import type { ThreadTable } from './threadTable.js'

export interface ReactionsDeps {
  table: ThreadTable
  registry: Registry
  crashLoop: Pick<CrashLoopGuard, 'progressed'>
  approvals: Pick<Approvals, 'suspendedNow'>
  policies: Pick<PolicyDesk, 'fireHook'>
  taskRecovery: Pick<TaskRecovery, 'failed'>
  budgets: Pick<Budgets, 'recordUsage' | 'release'>
  clock: Clock
  bus: Reporter & Emitter
  /** The thread event stream, told of an end in error that no transition shows. */
  events?: Pick<EventStream, 'failed'>
}

export class Reactions {
  constructor(private readonly deps: ReactionsDeps) {}

  /** Every checkpointed transition of a live thread, after it is staged. */
  observe(thread: LiveThread, snapshot: { value: unknown; context: ThreadContext }, previous: { status: ThreadStatus | null; value: unknown }): void {
    const { policies, budgets } = this.deps
    const status = statusOfValue(snapshot.value as never)
    const context = snapshot.context
    this.deps.crashLoop.progressed(thread.id, snapshot.value)
    if (status === 'suspended' && previous.status !== 'suspended') {
      this.deps.approvals.suspendedNow(thread.id, context)
      const call = context.pendingCall
      if (call) {
        const { kind, requestId, tool, callId, input, request, deadlineAt } = call
        this.deps.bus.emit({ type: 'call_waiting', at: this.deps.clock.now(), threadId: thread.id, kind, requestId, tool, callId, input, request, deadlineAt })
      }
    }
    if (previous.status === 'created' && status === 'running') policies.fireHook(thread, 'thread_started', context)
    const wasRunningTools = isStateValue(previous.value, 'runningTools')
    const wasCalling = isStateValue(previous.value, 'callingModel')
    if ((wasRunningTools && !isStateValue(snapshot.value, 'runningTools')) || (wasCalling && status === 'completed')) {
      policies.fireHook(thread, 'after_step', context, { step: { turn: context.usage.turns, toolCalls: context.toolCalls.length } })
    }
    if (!isActive(status) && status !== 'suspended') {
      policies.fireHook(thread, 'after_complete', context, { outcome: { status, result: context.result } })
    }
    if (status === 'error' && previous.status !== 'error') {
      this.childFailed(thread.id, context)
      this.deps.taskRecovery.failed(thread.id, context)
    }
    budgets.recordUsage(thread.id, context.usage, context.previousThreadId != null)
    if (status === 'suspended' && previous.status !== 'suspended' && context.suspendReason === 'budget') this.budgetSuspended(thread.id, context)
    // A continued thread's successor spends from the same account.
    if (!isActive(status) && status !== 'suspended' && status !== 'continued') budgets.release(thread.id, context.previousThreadId != null)
  }

  /** Ends a thread whose own files are damaged in `error`, as any thread in error ends, without a transition. */
  endDamaged(id: string, thread: LiveThread, error: SpindleError): void {
    const context: ThreadContext = { ...thread.context(), error: { code: error.code, message: error.message } }
    thread.abandon(error)
    this.deps.events?.failed(id, error)
    // What the end of any thread in error does (observe), without a transition to observe.
    this.deps.policies.fireHook(thread, 'after_complete', context, { outcome: { status: 'error', result: context.result } })
    this.childFailed(id, context)
    this.deps.taskRecovery.failed(id, context)
    this.deps.budgets.release(id, context.previousThreadId != null)
  }

  /**
   * A thread's folder was no real directory when its checkpoint was written (a link swapped in
   * while it ran): nothing was written through it. The thread ends in `error` with
   * DATA_DIR_INVALID, its files left as they are for a person to look at; the others go on.
   */
  folderInvalid(threadId: string, error: SpindleError): void {
    this.deps.bus.report(error, threadId)
    // Not inside the store's round: abandoning stages the registry change for the next one.
    queueMicrotask(() => {
      const thread = this.deps.table.get(threadId)
      if (thread && !thread.stopped) this.endDamaged(threadId, thread, error)
    })
  }

  /** A child that ended in error: its parent's transcript says so, and host code is told. */
  private childFailed(id: string, context: ThreadContext): void {
    const { registry, table, clock, bus } = this.deps
    const parentId = registry.get(id)?.parentId ?? null
    if (!parentId) return
    const error = context.error ?? { code: 'error', message: 'failed' }
    table.get(parentId)?.note('child_thread_failed', { at: clock.now(), childId: id, directive: context.directive.name, error })
    bus.emit({ type: 'child_thread_failed', at: clock.now(), threadId: id, parentId, error })
  }

  /** A thread suspended for its budget: its parent's transcript says so, host code is told. */
  private budgetSuspended(id: string, context: ThreadContext): void {
    const { registry, table, clock, bus } = this.deps
    const hit = context.budgetHit
    if (!hit) return
    const parentId = registry.get(id)?.parentId ?? null
    if (parentId) table.get(parentId)?.note('child_budget_exhausted', { at: clock.now(), childId: id, ...hit })
    bus.emit({ type: 'budget_exhausted', at: clock.now(), threadId: id, parentId, ...hit })
  }
}
