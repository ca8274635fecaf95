/**
 * The `Runtime` host code holds: each call checked, then handed to the part that does it.
 */
import { SpindleError } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'
import type { Config } from '../../config/schema.js'
import { outcomeOf } from '../../machines/threadOutcome.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import type { CommitStats } from '../../persistence/groupCommit.js'
import type { Durability, StateEnvelope, ThreadRecord, ThreadStatus } from '../../persistence/types.js'
import type { ThreadHandle } from '../thread/threadView.js'
import { viewOf } from '../thread/threadView.js'
import { isActive } from '../thread/threadStatus.js'
import type { WaitOptions, WaitReport } from '../thread/waits.js'
import type { AnswerOptions, ApproveOptions, FollowUpOptions, CancelResult, LifecycleEventType, RecoveryReport, RequestsReport, Runtime, SpawnOptions, OutputOf, OutputSpec } from './api.js'
import type { Parts } from './parts.js'
import { TOOL_ABORTED_AT_SHUTDOWN } from './shutdown.js'
import { validateSpawn } from './spawner.js'
import { budgetOf, childrenOf } from './budgetView.js'
import type { BudgetView, ChildSummary } from './budgetView.js'
import { StoredThread, storedOutcome } from './storedThread.js'
import type { ReplyDelta } from '../../actors/replyDelta.js'
import type { RepliesOptions } from './replyStream.js'
import type { EventsOptions, ThreadStreamEvent, ThreadStreamEventType } from './streamEvents.js'

/** The runtime host code holds: each call checked, then handed to the part that does it. */
export class SpindleRuntime implements Runtime {
  /** The close under way or done: closing twice waits for the one close. */
  private closing: Promise<void> | null = null

  constructor(private readonly parts: Parts) {}

  get dir(): string {
    return this.parts.dir
  }

  get durability(): Durability {
    return this.parts.durability
  }

  get config(): Config {
    return this.parts.config
  }

  get lastRecovery(): RecoveryReport {
    return this.parts.recovery.last
  }

  async spawn<Output extends OutputSpec = OutputSpec>(options: SpawnOptions<Output>): Promise<ThreadHandle<OutputOf<Output>>> {
    this.parts.life.assertOpen()
    validateSpawn(options)
    // The outcome's `output` is the schema's parse (outputSchemas.ts): the type follows the schema.
    // A runtime that runs no more threads (maxThreads) leaves the new one to a worker.
    const handOff = this.parts.table.size >= this.parts.maxThreads
    const handleOf = (id: string): ThreadHandle => this.handle(id, handOff || this.parts.runsElsewhere)
    if (options.id !== undefined) return (await this.parts.callerIds.spawn(options, options.id, handleOf, handOff)) as ThreadHandle<OutputOf<Output>>
    const thread = await this.parts.spawner.spawn(options, undefined, undefined, handOff)
    return (handOff ? handleOf(thread.id) : thread) as ThreadHandle<OutputOf<Output>>
  }

  get(id: string): ThreadHandle {
    return this.handle(id, this.parts.runsElsewhere)
  }

  /** The thread's handle; `waitElsewhere`: one another process runs settles when it ends there, rather than rejecting. */
  private handle(id: string, waitElsewhere: boolean): ThreadHandle {
    const { table, stores, dir, bus, life } = this.parts
    life.assertOpen()
    assertThreadId(id)
    const live = table.get(id)
    if (live) return live
    const record = stores.registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}. List threads with rt.list() or \`spindle ls\`.`, {
        details: { threadId: id },
      })
    }
    let envelope: StateEnvelope | null = null
    try {
      envelope = stores.checkpoints.load(id)
    } catch (error) {
      bus.report(error, id)
    }
    const context = (envelope?.snapshot as { context?: ThreadContext } | undefined)?.context
    const value = (envelope?.snapshot as { value?: unknown } | undefined)?.value
    const view = context && value !== undefined ? viewOf(id, { value: value as never, context }) : null
    const stopped = !isActive(record.status)
    let outcome: ThreadOutcome | null = null
    if (stopped && context) outcome = outcomeOf(record.status as ThreadOutcome['status'], context)
    else if (stopped) outcome = storedOutcome(record, null)
    // On a database, threads run on every worker: one that runs elsewhere settles when it ends there.
    const elsewhere = !stopped && waitElsewhere ? this.parts.waiting.settled(id).promise : undefined
    return new StoredThread(id, record.status, view, outcome, elsewhere)
  }

  list(filter?: { status?: ThreadStatus | ThreadStatus[]; limit?: number }): ThreadRecord[] {
    this.parts.life.assertOpen()
    return this.parts.stores.registry.list(filter)
  }

  active(): ThreadHandle[] {
    return this.parts.table.threads()
  }

  stats(): CommitStats & { live: number } {
    return { ...this.parts.commit.stats, live: this.parts.table.size }
  }

  recover(): Promise<RecoveryReport> {
    return this.parts.recovery.recover()
  }

  cancel(id: string, reason?: string): Promise<CancelResult> {
    return this.parts.decisions.cancel(id, reason)
  }

  approve(id: string, options?: ApproveOptions): Promise<ThreadHandle> {
    return this.parts.calls.approve(id, options)
  }

  async deny(id: string, reason?: string, options?: { by?: string; requestId?: string }): Promise<ThreadOutcome> {
    const denied = await this.parts.calls.deny(id, reason, options)
    return denied.goesOn ? denied.thread.done : denied.outcome
  }

  answer(id: string, answer: unknown, options?: AnswerOptions): Promise<ThreadHandle> {
    return this.parts.calls.answer(id, answer, options)
  }

  resume(id: string, options?: { by?: string }): Promise<ThreadHandle> {
    return this.parts.decisions.resume(id, options)
  }

  followUp(id: string, message: string, options?: FollowUpOptions): Promise<ThreadHandle> {
    this.parts.life.assertOpen()
    return this.parts.followUps.followUp(id, message, options)
  }

  settleOrphan(id: string, action: 'mark_error' | 'mark_cancelled', reason?: string): Promise<ThreadOutcome> {
    return this.parts.decisions.settleOrphan(id, action, reason)
  }

  checkRequests(options?: { sweep?: boolean }): Promise<RequestsReport> {
    return this.parts.inbox.check(options)
  }

  waitThreads(ids: string[], options: WaitOptions = {}): Promise<WaitReport> {
    return this.parts.waiting.waitFor(ids, options)
  }

  chain(id: string): ThreadRecord[] {
    this.parts.life.assertOpen()
    assertThreadId(id)
    const chain = this.parts.stores.registry.chain(id)
    if (chain.length === 0) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.parts.dir}.`, { details: { threadId: id } })
    return chain
  }

  budget(id: string): BudgetView {
    this.parts.life.assertOpen()
    assertThreadId(id)
    return budgetOf(this.parts.stores, this.parts.dir, id)
  }

  children(id: string): ChildSummary[] {
    this.parts.life.assertOpen()
    assertThreadId(id)
    return childrenOf(this.parts.stores.registry, this.parts.dir, id)
  }

  on<T extends LifecycleEventType | '*' | ThreadStreamEventType | 'thread.*'>(type: T, listener: (event: any) => void): () => void {
    // The thread event stream's types are all 'thread.…'; no lifecycle event's is.
    if (typeof type === 'string' && type.startsWith('thread.')) return this.parts.events.listen(type as ThreadStreamEventType | 'thread.*', listener)
    return this.parts.bus.on(type as LifecycleEventType | '*', listener)
  }

  events(options?: EventsOptions): AsyncIterableIterator<ThreadStreamEvent> {
    return this.parts.events.iterate(options)
  }

  replies(options?: RepliesOptions): AsyncIterableIterator<ReplyDelta> {
    return this.parts.replies.replies(options)
  }

  onReply(listener: (delta: ReplyDelta) => void): () => void {
    return this.parts.replies.onReply(listener)
  }

  /**
   * Stops the parts in reverse: timers first; then every live thread where it stands, but for the
   * tool calls under way, which get `timeouts.shutdownGraceMs` to finish and have their results
   * recorded; then the stores. Calls made while it closes share its promise.
   */
  close(): Promise<void> {
    this.closing ??= this.closeParts()
    return this.closing
  }

  private async closeParts(): Promise<void> {
    const { life, inbox, leases, taskRecovery, parking, waiting, supervisor, crashLoop, table, commit, stores, shutdown, config, clock, bus } = this.parts
    life.closed = true
    const polled = inbox.close()
    taskRecovery.close()
    parking.close()
    this.parts.deadlines.close()
    waiting.close()
    supervisor.close()
    await polled
    const reason = new SpindleError('RUNTIME_CLOSED', 'The runtime was closed; the thread stays checkpointed and resumes when a runtime opens this directory again.')
    // Nothing new starts from here (effects see life.closed); what runs no tool stops at once.
    crashLoop.close()
    const idle = [...table.ids()].filter((id) => !shutdown.runsTool(id))
    crashLoop.stoppedCleanly(idle)
    for (const id of idle) table.get(id)?.detach(reason)
    const cut = await shutdown.drain(config.timeouts.shutdownGraceMs)
    for (const [id, call] of cut) {
      try {
        // Read by the next process (intentsOf): the model is told of a shutdown, not a crash.
        table.get(id)?.note(TOOL_ABORTED_AT_SHUTDOWN, { at: clock.now(), ...call, graceMs: config.timeouts.shutdownGraceMs, pid: process.pid })
      } catch (error) {
        bus.report(error, id)
      }
    }
    crashLoop.stoppedCleanly([...table.ids()])
    for (const thread of table.threads()) thread.detach(reason)
    this.parts.budgets.close()
    leases.close()
    shutdown.close()
    // Detaching aborted every wait; none of them may outlive the runtime in its graph.
    waiting.endWaits()
    try {
      await commit.close()
    } finally {
      this.parts.events.close()
      stores.close()
      // After the last reply was told durable (or not): iterators end with nothing left out.
      this.parts.replies.close()
    }
  }
}
