/**
 * Decisions on threads: approve, deny, resume and cancel — each wakes a suspended thread (loaded
 * from its checkpoint into a live actor) or reaches a live one with an event, recorded before it
 * acts — and settling an orphan without running it. Also the cancel cascade to a thread's children.
 */
import type { Clock } from '../base/clock.js'
import { SpindleError, isSpindleError, midSentence } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'
import { LimitsSchema } from '../../config/schema.js'
import type { Limits } from '../../machines/threadPolicy.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { Registry, RequestInbox, TranscriptStore } from '../../persistence/types.js'
import type { LiveThread } from '../thread/liveThread.js'
import type { ThreadHandle } from '../thread/threadView.js'
import { proposeLimit } from '../policies/escalation.js'
import { limitStillExceeded, openRequestId } from '../thread/approvalDecision.js'
import { cancelRefusal } from '../thread/requests.js'
import { isActive, statusOfValue } from '../thread/threadStatus.js'
import type { ApproveOptions, CancelResult } from './api.js'
import type { Approvals } from './approvals.js'
import type { Budgets } from './budgets.js'
import type { CrashLoopGuard } from './crashLoop.js'
import type { Lifecycle, Reporter } from './events.js'
import type { EventStream } from './eventStream.js'
import type { Family } from './family.js'
import type { Leases } from './leases.js'
import { intentsOf } from './loadThread.js'
import type { ThreadLoader } from './loadThread.js'
import type { Parking } from './parking.js'
import type { Supervisor } from './supervisor.js'
import type { ThreadTable } from './threadTable.js'
import type { Waiting } from './waiting.js'

/**
 * A reason, message or `by` given to a decision: recorded in the transcript, so it must be text of
 * a sensible length.
 */
export function assertText(value: unknown, field: string): void {
  if (value === undefined) return
  if (typeof value !== 'string' || value.length > 10_000) {
    throw new SpindleError('INVALID_OPTIONS', `${field} must be a string of at most 10,000 characters (got ${typeof value === 'string' ? `${value.length} characters` : typeof value}).`, {
      details: { field },
    })
  }
}

export interface DecisionsDeps {
  dir: string
  inbox: Pick<RequestInbox, 'askCancel'>
  table: ThreadTable
  registry: Registry
  transcripts: Pick<TranscriptStore, 'close'>
  commit: Pick<GroupCommit, 'whenLogged'>
  leases: Pick<Leases, 'take' | 'release'>
  loader: ThreadLoader
  approvals: Pick<Approvals, 'unwatch' | 'writeDecision' | 'owe' | 'paid'>
  budgets: Pick<Budgets, 'raise'>
  family: Pick<Family, 'openChildren' | 'spawnsSettled'>
  parking: Pick<Parking, 'cancel'>
  crashLoop: Pick<CrashLoopGuard, 'reset'>
  supervisor: Pick<Supervisor, 'supervise'>
  waiting: Pick<Waiting, 'wake' | 'settled'>
  clock: Clock
  bus: Reporter
  life: Lifecycle
  /** The thread event stream, told of each decision before the thread acts on it. */
  events?: Pick<EventStream, 'decided'>
}

export type Suspended = { snapshot: unknown; context: ThreadContext; intents: ReturnType<typeof intentsOf> }

export class Decisions {
  constructor(private readonly deps: DecisionsDeps) {}

  /** A suspended thread's stored state, read (not yet loaded) so that a request can be checked first. */
  async readSuspended(id: string): Promise<Suspended> {
    const { table, registry, dir } = this.deps
    this.deps.life.assertOpen()
    assertThreadId(id)
    const live = table.get(id)
    if (live && !live.stopped) {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} is ${live.status}, not suspended.`, { details: { threadId: id, status: live.status } })
    }
    // A thread that just suspended here is live until its checkpoint is durable.
    if (live) await live.done.catch(() => {})
    const record = registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}. List threads with rt.list() or \`spindle ls\`.`, {
        details: { threadId: id },
      })
    }
    if (table.has(id)) {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} was just loaded by another request.`, { details: { threadId: id } })
    }
    const restored = this.deps.loader.load(id, record.status)
    const status = statusOfValue((restored.snapshot as { value: never }).value)
    if (status !== 'suspended') {
      this.deps.transcripts.close(id)
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} is ${status}, not suspended.`, { details: { threadId: id, status } })
    }
    return {
      snapshot: restored.snapshot,
      context: (restored.snapshot as { context: ThreadContext }).context,
      intents: intentsOf(restored.tail),
    }
  }

  /** Loads a suspended thread into a live actor and hands it `event`, synchronously. */
  wake(id: string, stored: { snapshot: unknown; context: ThreadContext; intents: ReturnType<typeof intentsOf> }, note: [string, unknown] | null, event: ThreadEvent): LiveThread {
    const { table, registry } = this.deps
    try {
      this.deps.leases.take(id)
    } catch (error) {
      this.deps.transcripts.close(id)
      throw error
    }
    this.deps.approvals.unwatch(id)
    // Read before the actor starts (XState may change what it restores), staged under the lease just taken.
    this.deps.events?.decided(id, stored.context, note, event)
    const thread = table.adopt(id, { intents: stored.intents })
    thread.start(threadMachine, { snapshot: stored.snapshot })
    this.deps.supervisor.supervise(id, registry.get(id)?.parentId ?? null)
    this.deps.waiting.wake(id)
    if (note) thread.note(note[0], note[1])
    if (!thread.deliver(event)) {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} did not accept ${event.type}.`, { details: { threadId: id } })
    }
    return thread
  }

  /** @param read the thread's stored state when the caller has read it already. */
  async approve(id: string, options: ApproveOptions = {}, read?: Suspended): Promise<ThreadHandle> {
    const { clock } = this.deps
    assertText(options.by, 'by')
    assertText(options.message, 'message')
    const stored = read ?? (await this.readSuspended(id))
    const { context } = stored
    if (context.suspendReason === 'budget' && context.budgetHit) {
      if (context.budgetHit.amount === 'spend' || context.budgetHit.amount === 'tokens') return this.approveBudget(id, stored, options)
      // A governance budget (wall time, retries): approving carries the thread on; the next time
      // the budget is exceeded the next step of the degrade policy applies.
      const by = options.by ?? 'api'
      const at = clock.now()
      return this.wake(id, stored, ['approval_decided', { at, requestId: null, decision: 'approved', by, governance: context.budgetHit }], {
        type: 'RESUME',
        at,
        decision: 'approved',
        by,
      })
    }
    const hit = context.limitHit
    if (context.suspendReason !== 'limit' || !hit) {
      throw new SpindleError(
        'THREAD_NOT_SUSPENDED',
        `Thread ${id} is suspended for ${context.suspendReason ?? 'an unknown reason'}, not at a limit: carry it on with rt.resume(id), or deny it.`,
        { details: { threadId: id, suspendReason: context.suspendReason } },
      )
    }
    let limits: Partial<Limits>
    if (options.limits !== undefined) {
      const checked = LimitsSchema.partial().safeParse(options.limits)
      if (!checked.success) {
        const issue = checked.error.issues[0]!
        throw new SpindleError('INVALID_OPTIONS', `approve: limits.${issue.path.join('.')} ${midSentence(issue.message)}.`, {
          details: { field: `limits.${issue.path.join('.')}` },
        })
      }
      limits = checked.data
    } else if (hit.proposed !== null) {
      limits = { [hit.limit]: hit.proposed }
    } else {
      throw new SpindleError(
        'APPROVAL_NEEDS_LIMITS',
        `Thread ${id} hit its ${hit.limit} limit and its escalation policy proposes no new one: approve with explicit limits, e.g. { limits: { ${hit.limit}: ${hit.max * 2} } }.`,
        { details: { threadId: id, limit: hit.limit } },
      )
    }
    const still = limitStillExceeded(id, context, limits)
    if (still) throw still
    // The ledger keeps the same spend and token limits: raised first, so a refusal changes nothing.
    this.deps.budgets.raise(id, limits, () => this.deps.transcripts.close(id))
    const by = options.by ?? 'api'
    const at = clock.now()
    return this.deciding(id, hit.requestId, async () => {
      const thread = this.wake(
        id,
        stored,
        ['approval_decided', { at, requestId: hit.requestId, decision: 'approved', by, limits, ...(options.message ? { message: options.message } : {}) }],
        { type: 'RESUME', at, limits, decision: 'approved', by, ...(hit.requestId ? { requestId: hit.requestId } : {}) },
      )
      await this.deps.commit.whenLogged()
      this.deps.approvals.writeDecision(id, hit.requestId, { decision: 'approved', by, limits, at: new Date(at).toISOString(), message: options.message ?? null })
      return thread
    })
  }

  /**
   * Wakes a thread by a decision on its approval request `requestId` (`decide`: wake it, wait until
   * the decision is logged, write the decision file). Its lease is held until the file is written,
   * even when the thread stops first: a process killed in between leaves a dead process's lease,
   * which leads the next runtime to the thread (recovered, or found among the leases of stopped
   * threads) and so to the decision its transcript holds.
   */
  async deciding<T>(id: string, requestId: string | null, decide: () => Promise<T>): Promise<T> {
    if (requestId === null) return decide()
    this.deps.approvals.owe(id)
    try {
      return await decide()
    } finally {
      this.deps.approvals.paid(id)
    }
  }

  /** Whether what was appended so far became durable; false when it could not (yet). */
  logged(): Promise<boolean> {
    return this.deps.commit.whenLogged().then(
      () => true,
      () => false,
    )
  }

  /**
   * Approves more budget for a thread suspended for it: the ledger raises its account (a child's
   * raise is reserved from its parent, BUDGET_EXCEEDED when the parent cannot cover it), then the
   * same thread carries on.
   */
  private async approveBudget(id: string, stored: Suspended, options: ApproveOptions): Promise<ThreadHandle> {
    const { context } = stored
    const hit = context.budgetHit! as { amount: 'spend' | 'tokens'; used: number; max: number }
    const requested = options.limits?.[hit.amount]
    const proposed = requested !== undefined ? requested : proposeLimit(hit.max, context.policy.escalation[hit.amount])
    if (proposed === null || proposed === undefined || proposed <= hit.used) {
      throw new SpindleError(
        'APPROVAL_NEEDS_LIMITS',
        `Thread ${id} ran out of its ${hit.amount} budget (${hit.used} used of ${hit.max}): approve with a larger one, e.g. { limits: { ${hit.amount}: ${hit.max * 2} } }.`,
        { details: { threadId: id, amount: hit.amount } },
      )
    }
    const limits: Partial<Limits> = { ...options.limits, [hit.amount]: proposed }
    this.deps.budgets.raise(id, limits, () => this.deps.transcripts.close(id))
    const by = options.by ?? 'api'
    const at = this.deps.clock.now()
    const thread = this.wake(
      id,
      stored,
      ['approval_decided', { at, requestId: null, decision: 'approved', by, limits, budget: true, ...(options.message ? { message: options.message } : {}) }],
      { type: 'RESUME', at, limits, decision: 'approved', by },
    )
    await this.deps.commit.whenLogged()
    return thread
  }

  async deny(id: string, reason?: string, options: { by?: string } = {}, read?: Suspended): Promise<ThreadOutcome> {
    assertText(reason, 'reason')
    assertText(options.by, 'by')
    const stored = read ?? (await this.readSuspended(id))
    const requestId = openRequestId(stored.context)
    const by = options.by ?? 'api'
    const at = this.deps.clock.now()
    const thread = await this.deciding(id, requestId, async () => {
      const woken = this.wake(
        id,
        stored,
        ['approval_decided', { at, requestId, decision: 'denied', by, ...(reason ? { message: reason } : {}) }],
        { type: 'CANCEL', at, reason: reason ? `denied: ${reason}` : 'denied', by, ...(this.deps.family.openChildren(id).length > 0 ? { awaitChildren: true } : {}) },
      )
      // Once logged, not once the thread has stopped: the decision is made, whatever its children take.
      // A log that cannot be made durable (a full disk) leaves the file to recovery, and `done` to parking.
      if (await this.logged()) this.deps.approvals.writeDecision(id, requestId, { decision: 'denied', by, at: new Date(at).toISOString(), message: reason ?? null })
      return woken
    })
    return thread.done
  }

  async settleOrphan(id: string, action: 'mark_error' | 'mark_cancelled', reason = 'settled by an operator as an orphan'): Promise<ThreadOutcome> {
    const { table, registry, dir, clock } = this.deps
    this.deps.life.assertOpen()
    assertThreadId(id)
    if (table.has(id)) {
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} runs in this runtime: it is no orphan. Cancel it with rt.cancel.`, { details: { threadId: id } })
    }
    const record = registry.get(id)
    if (!record) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}.`, { details: { threadId: id } })
    if (!isActive(record.status)) {
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is ${record.status}: only a created or running thread can be an orphan.`, { details: { threadId: id, status: record.status } })
    }
    this.deps.leases.take(id)
    let snapshot: unknown
    let intents: ReturnType<typeof intentsOf>
    try {
      const read = this.deps.loader.load(id, record.status)
      snapshot = read.snapshot
      intents = intentsOf(read.tail)
    } catch (error) {
      this.deps.leases.release(id)
      throw error
    }
    const thread = table.adopt(id, { intents })
    thread.noteBeforeNext('orphan_settled', { at: clock.now(), action, reason, pid: process.pid })
    thread.start(threadMachine, { snapshot })
    // Decided before any effect of the restored state can act: effects wait for the checkpoint.
    const at = clock.now()
    const event: ThreadEvent =
      action === 'mark_error'
        ? { type: 'FAIL', at, error: { code: 'ORPHAN_MARKED', message: `${reason}.` } }
        : { type: 'CANCEL', at, reason, by: 'operator', ...(this.deps.family.openChildren(id).length > 0 ? { awaitChildren: true } : {}) }
    if (!thread.deliver(event)) {
      thread.detach(new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} did not accept ${event.type}.`))
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} could not be settled from its state.`, { details: { threadId: id } })
    }
    return thread.done
  }

  async resume(id: string, options: { by?: string } = {}): Promise<ThreadHandle> {
    assertText(options.by, 'by')
    const stored = await this.readSuspended(id)
    const pending = stored.context.pendingCall
    if (pending && (stored.context.suspendReason === 'tool_approval' || stored.context.suspendReason === 'waiting')) {
      this.deps.transcripts.close(id)
      const how = stored.context.suspendReason === 'tool_approval' ? 'approve or deny the call (rt.approve / rt.deny, spindle approve / deny)' : 'answer it (rt.answer, spindle answer)'
      throw new SpindleError('NO_PENDING_APPROVAL', `Thread ${id} waits at its ${pending.tool} call (request ${pending.requestId}), not for a resume: ${how}.`, {
        details: { threadId: id, requestId: pending.requestId },
      })
    }
    if (stored.context.suspendReason === 'limit') {
      const hit = stored.context.limitHit
      throw new SpindleError(
        'APPROVAL_NEEDS_LIMITS',
        `Thread ${id} is suspended at its ${hit?.limit ?? ''} limit: approve it (rt.approve / spindle approve) to raise the limit, or deny it.`,
        { details: { threadId: id } },
      )
    }
    const by = options.by ?? 'api'
    // A person decided to try again: a thread quarantined for a crash loop starts a new count.
    this.deps.crashLoop.reset(id)
    return this.wake(id, stored, null, { type: 'RESUME', at: this.deps.clock.now(), decision: 'resumed', by })
  }

  /** `rt.cancel`: checked, then cancelled as the host. */
  async cancel(id: string, reason = 'cancelled by operator'): Promise<CancelResult> {
    this.deps.life.assertOpen()
    assertThreadId(id)
    assertText(reason, 'reason')
    return this.cancelAs(id, reason, 'api')
  }

  /**
   * Cancels a thread: a live one at once, a suspended one loaded from disk; one running in another
   * process gets a cancel request file.
   */
  async cancelAs(id: string, reason: string, by: string): Promise<CancelResult> {
    const { table, registry, dir, clock } = this.deps
    const live = table.get(id)
    if (live && !live.stopped) {
      // Just suspended, still live until its checkpoint is durable: its request closes all the same.
      const requestId = live.status === 'suspended' ? openRequestId(live.context()) : null
      if (requestId !== null) this.deps.approvals.unwatch(id)
      this.deps.parking.cancel(live, reason, by)
      const outcome = await live.done
      if (requestId !== null) this.deps.approvals.writeDecision(id, requestId, { decision: 'cancelled', by, at: new Date(clock.now()).toISOString(), message: reason })
      return { status: 'cancelled', outcome }
    }
    if (live) await live.done.catch(() => {})
    const record = registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}. List threads with rt.list() or \`spindle ls\`.`, {
        details: { threadId: id },
      })
    }
    if (record.status === 'suspended') {
      const stored = await this.readSuspended(id)
      const awaitChildren = this.deps.family.openChildren(id).length > 0
      // A cancel closes the approval request the thread waited at: its decision file says so.
      const requestId = openRequestId(stored.context)
      const at = clock.now()
      const thread = await this.deciding(id, requestId, async () => {
        const woken = this.wake(id, stored, null, { type: 'CANCEL', at, reason, by, ...(awaitChildren ? { awaitChildren } : {}) })
        if (requestId !== null && (await this.logged())) {
          this.deps.approvals.writeDecision(id, requestId, { decision: 'cancelled', by, at: new Date(at).toISOString(), message: reason })
        }
        return woken
      })
      return { status: 'cancelled', outcome: await thread.done }
    }
    // Run by another process: it finds the request, with the thread's nonce, in the shared inbox.
    if (isActive(record.status) && cancelRefusal(record, { nonce: record.nonce }) === null) {
      const file = this.deps.inbox.askCancel(id, { nonce: record.nonce, reason, by })
      if (file !== null) return { status: 'requested', file }
    }
    throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is ${record.status}; only a running or suspended thread can be cancelled.`, {
      details: { threadId: id, status: record.status },
    })
  }

  /** The `settleChildren` effect of a cancelled thread: cancel every open child, wait for each. */
  async settleChildren(id: string, reason: string, signal: AbortSignal): Promise<string[]> {
    // Children whose spawn_thread call was under way when the cancel came are registered once it
    // returns: wait for them, else they would run on under a cancelled parent.
    await this.deps.family.spawnsSettled(id, signal)
    const children = this.deps.family.openChildren(id)
    const cause = `parent ${id} was cancelled: ${reason}`
    await Promise.all(
      children.map(async (child) => {
        try {
          await this.cancelAs(child.id, cause, `parent ${id}`)
        } catch (error) {
          // Settled in the meantime (completed, or cancelled by someone else): nothing to cancel.
          if (!isSpindleError(error) || error.code !== 'THREAD_NOT_ACTIVE') this.deps.bus.report(error, child.id)
        }
        if (signal.aborted) return
        await this.deps.waiting.settled(child.id).promise.catch(() => {})
      }),
    )
    return children.map((c) => c.id)
  }
}
