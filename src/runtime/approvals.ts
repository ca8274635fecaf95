/**
 * Approvals: the suspended threads this runtime watches for requests, and the approval requests
 * and decisions it writes for them — a request once the suspension it describes is durable, a
 * decision once the thread was woken by one; and the decisions a killed process recorded in a
 * transcript but never wrote next to their requests, written from the transcript.
 */
import type { Clock } from '../base/clock.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { RequestInbox, TranscriptStore } from '../../persistence/types.js'
import type { ApprovalDecision } from '../thread/approvalDecision.js'
import { decisionFromTranscript, openRequestId } from '../thread/approvalDecision.js'
import type { ApprovalRequest, CallRequest } from '../thread/requests.js'
import { openRequestOf } from '../thread/openRequest.js'
import type { Lifecycle, Reporter } from './events.js'

export interface ApprovalsDeps {
  /** Told of each suspended thread watched here (its paused call's deadline), and when it is no longer. */
  deadlines: { track(id: string, context: ThreadContext): void; untrack(id: string): void }
  inbox: RequestInbox
  transcripts: Pick<TranscriptStore, 'read'>
  commit: Pick<GroupCommit, 'whenDurable'>
  clock: Clock
  bus: Reporter
  life: Lifecycle
}

export class Approvals {
  /** Suspended threads this runtime watches for requests: id → pending approval request id. */
  private readonly suspended = new Map<string, string | null>()

  /**
   * Threads woken by a decision whose file is not written yet: what is to run once it is (their
   * lease's release). A process killed before the file is written so leaves its lease behind.
   */
  private readonly owed = new Map<string, Array<() => void>>()

  constructor(private readonly deps: ApprovalsDeps) {}

  /** A decision on thread `id`'s approval request is about to be recorded: `afterOwed` waits for `paid`. */
  owe(id: string): void {
    if (!this.owed.has(id)) this.owed.set(id, [])
  }

  /** The decision `owe` announced is written (or will not be): what waited for it runs now. */
  paid(id: string): void {
    const waiting = this.owed.get(id)
    this.owed.delete(id)
    for (const run of waiting ?? []) run()
  }

  /** Runs `fn` now, or once the decision owed for thread `id` is written. */
  afterOwed(id: string, fn: () => void): void {
    const waiting = this.owed.get(id)
    if (waiting) waiting.push(fn)
    else fn()
  }

  get size(): number {
    return this.suspended.size
  }

  isWatched(id: string): boolean {
    return this.suspended.has(id)
  }

  /** The open approval request of watched thread `id` (null: none, or it is not watched). */
  requestOf(id: string): string | null {
    return this.suspended.get(id) ?? null
  }

  ids(): IterableIterator<string> {
    return this.suspended.keys()
  }

  entries(): IterableIterator<[string, string | null]> {
    return this.suspended.entries()
  }

  unwatch(id: string): void {
    this.suspended.delete(id)
    this.deps.deadlines.untrack(id)
  }

  /**
   * Thread `id` suspended (here, or found suspended on disk): watched for requests from now on,
   * and its approval request written once the suspension is durable.
   */
  suspendedNow(id: string, context: ThreadContext): void {
    const open = openRequestId(context)
    this.suspended.set(id, open)
    this.deps.deadlines.track(id, context)
    if (open !== null) {
      const request = this.buildRequest(id, context)
      // Write-ahead: the request goes out once the suspension it describes is durable.
      this.deps.commit.whenDurable().then(
        // Not once decided meanwhile (woken, cancelled): nobody is to answer it any more.
        () => {
          if (this.suspended.get(id) === open) this.writeRequest(id, request)
        },
        () => {},
      )
    }
  }

  /** A suspended thread on disk, watched here for request files from now on. */
  watch(id: string, context: ThreadContext): void {
    this.suspended.set(id, openRequestId(context))
    this.deps.deadlines.track(id, context)
    this.ensureRequest(id, context)
  }

  private buildRequest(id: string, context: ThreadContext): ApprovalRequest | CallRequest {
    return openRequestOf(id, context, this.deps.inbox.answerAt(id, openRequestId(context)!), this.deps.clock.now())
  }

  /**
   * Writes a suspended thread's missing approval request (a process killed between a suspension
   * and its request file). Looks for the files first: building a request costs more than that,
   * and opening a directory of 10,000 suspended threads does this for each.
   */
  private ensureRequest(id: string, context: ThreadContext): void {
    const requestId = openRequestId(context)
    if (!requestId) return
    if (this.deps.inbox.hasApproval(id, requestId)) return
    this.writeRequest(id, this.buildRequest(id, context))
  }

  private writeRequest(id: string, request: ApprovalRequest | CallRequest): void {
    if (this.deps.life.closed) return
    try {
      this.deps.inbox.putApprovalRequest(id, request.id, request)
    } catch (error) {
      this.deps.bus.report(error, id)
    }
  }

  /**
   * Writes the decisions thread `id`'s transcript records for its approval requests that have none
   * next to them — a process killed between recording a decision and writing its file — except for
   * `open`, the request the thread still waits at. Returns the requests it wrote decisions for.
   * Looks at the thread's files only when a request lacks its decision: once per thread recovery
   * takes on, it costs one listing of a folder that is mostly not there. `known`: the requests
   * without a decision, read ahead with the thread's files (a database's read-ahead).
   */
  settleDecisions(id: string, open: string | null, known?: readonly string[]): string[] {
    let undecided: string[]
    try {
      undecided = (known ?? this.deps.inbox.undecided(id)).filter((rid) => rid !== open)
    } catch (error) {
      this.deps.bus.report(error, id)
      return []
    }
    if (undecided.length === 0) return []
    let entries: ReturnType<TranscriptStore['read']>['entries']
    try {
      entries = this.deps.transcripts.read(id).entries
    } catch (error) {
      this.deps.bus.report(error, id)
      return []
    }
    const written: string[] = []
    for (const rid of undecided) {
      // Not in the transcript: the process died before the decision was recorded (it is still to
      // be made, and the thread waits at it), or the transcript lost it (doctor says so).
      const decision = decisionFromTranscript(entries, rid)
      if (!decision) continue
      this.writeDecision(id, rid, { ...decision, recovered: true })
      written.push(rid)
    }
    return written
  }

  /** Records how a request was decided, next to it. */
  writeDecision(id: string, requestId: string | null, decision: ApprovalDecision): void {
    if (requestId === null) return
    try {
      this.deps.inbox.putDecision(id, requestId, decision)
    } catch (error) {
      this.deps.bus.report(error, id)
    }
  }
}
