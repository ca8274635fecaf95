/**
 * Requests from outside the process — cancel, resume and approval answers that the CLI, a script
 * or a person left in the inbox — turned into decisions: found (the inbox says which threads
 * changed; a scan in turn finds requests written by hand), claimed so no other runtime acts on them
 * too, checked (the thread's nonce, the answer's shape), carried out or refused, and logged. Owns
 * the poll timer.
 */
import type { Clock } from '../base/clock.js'
import { SpindleError, describeError } from '../base/errors.js'
import type { Config } from '../../config/schema.js'
import type { ClaimedRequest, InboxRequest, Registry, RequestInbox, RequestLogLine } from '../../persistence/types.js'
import type { CancelRequest } from '../thread/requests.js'
import { ApprovalResponseSchema, CancelRequestSchema, cancelRefusal, checkRequest } from '../thread/requests.js'
import { isActive } from '../thread/threadStatus.js'
import type { RequestsReport } from './api.js'
import type { Approvals } from './approvals.js'
import type { CallDecisions } from './callDecisions.js'
import type { Decisions } from './decisions.js'
import type { Lifecycle, Reporter } from './events.js'
import type { ThreadTable } from './threadTable.js'

export interface InboxPollerDeps {
  dir: string
  inbox: RequestInbox
  table: ThreadTable
  registry: Registry
  approvals: Pick<Approvals, 'isWatched' | 'requestOf' | 'ids' | 'entries' | 'watch' | 'size' | 'settleDecisions'>
  decisions: Pick<Decisions, 'cancelAs' | 'resume'>
  /** Approve, deny and answer: at a tool call, or (approve, deny) at a limit. */
  calls: Pick<CallDecisions, 'approve' | 'deny' | 'answer'>
  /** Threads just recovered whose folders the read-ahead worker saw without a cancel file. */
  takeNoCancelFile(): Set<string>
  clock: Clock
  config: Config
  bus: Reporter
  life: Lifecycle
}

export class InboxPoller {
  private poller: NodeJS.Timeout | null = null
  private polls = 0
  private polling: Promise<RequestsReport> | null = null
  /** Threads still to look in for requests written by hand, in this round of polls. */
  private scanQueue: string[] = []

  constructor(private readonly deps: InboxPollerDeps) {}

  /** Acts on the requests found now; one check at a time. */
  check(options: { sweep?: boolean } = {}): Promise<RequestsReport> {
    if (this.polling) return this.polling.then(() => this.check(options))
    const run = this.pollOnce(options.sweep ?? false).finally(() => {
      this.polling = null
    })
    this.polling = run
    return run
  }

  /** Polls every `requests.pollMs`, sweeping every `requests.sweepEvery` polls. */
  start(): void {
    const { config } = this.deps
    this.poller = setInterval(() => {
      this.polls++
      if (this.polling) return
      this.check({ sweep: this.polls % config.requests.sweepEvery === 0 }).catch((error: unknown) => this.deps.bus.report(error))
    }, config.requests.pollMs)
    this.poller.unref()
  }

  /** Stops polling; resolves once a check under way has ended. */
  async close(): Promise<void> {
    if (this.poller) clearInterval(this.poller)
    this.poller = null
    await this.polling?.catch(() => {})
  }

  private async pollOnce(sweep: boolean): Promise<RequestsReport> {
    const { inbox, table, approvals, config } = this.deps
    const report: RequestsReport = { honoured: [], refused: [] }
    if (this.deps.life.closed) return report
    if (sweep) {
      this.sweep(report)
      await this.takeOverAbandoned(report)
    }
    const rings = inbox.changed()
    // An inbox whose changes name every request left (a database's: nothing is written by hand)
    // is looked in only where they say, however few threads there are.
    const everywhere = !inbox.complete && (sweep || rings.missed || table.size + approvals.size <= config.requests.scanPerPoll)
    const look = everywhere ? null : inbox.complete ? rings.ids : this.lookIn(rings.ids)
    const liveIds = look ? [...look].filter((id) => table.has(id)) : [...table.ids()]
    const suspendedIds = look ? [...look].filter((id) => approvals.isWatched(id)) : [...approvals.ids()]
    // Threads recovery just took on: the read-ahead worker already looked for their cancel files
    // (on the other core). A request written through spindle since then rang the bell; one written
    // by hand is found by the scan in turn, as at any other poll.
    const lookedAt = this.deps.takeNoCancelFile()
    for (const id of liveIds) {
      const thread = table.get(id)
      if (!thread || thread.stopped) continue
      if (lookedAt.has(id) && !rings.ids.has(id)) continue
      if (inbox.waiting(id, 'cancel')) await this.handleCancel(id, report)
    }
    for (const id of suspendedIds) {
      if (this.deps.life.closed) break
      if (!approvals.isWatched(id)) continue
      const requestId = approvals.requestOf(id)
      if (inbox.waiting(id, 'cancel')) {
        await this.handleCancel(id, report)
        continue
      }
      if (inbox.waiting(id, 'resume')) {
        await this.handleResume(id, report)
        continue
      }
      if (requestId && inbox.waiting(id, 'approval', requestId)) await this.handleAnswer(id, requestId, report)
    }
    return report
  }

  /**
   * The threads one poll looks in when it does not look in all: those the inbox says changed, and
   * the next `requests.scanPerPoll` in turn, so that a request written by hand is found too.
   */
  private lookIn(rung: Set<string>): Set<string> {
    const look = new Set(rung)
    let refilled = false
    for (let n = this.deps.config.requests.scanPerPoll; n > 0; n--) {
      if (this.scanQueue.length === 0) {
        if (refilled) break
        this.scanQueue = [...this.deps.table.ids(), ...this.deps.approvals.ids()]
        refilled = true
      }
      const id = this.scanQueue.pop()
      if (id !== undefined) look.add(id)
    }
    return look
  }

  /** Suspended threads other processes left, answers to no open request, cancels of no thread that runs here or elsewhere. */
  private sweep(report: RequestsReport): void {
    const { inbox, table, registry, approvals } = this.deps
    for (const record of registry.list({ status: 'suspended' })) {
      if (approvals.isWatched(record.id) || table.has(record.id)) continue
      const context = table.storedContext(record.id)
      if (!context) continue
      approvals.watch(record.id, context)
    }
    // Not while the directory is being opened: one listing per suspended thread would slow every
    // open of many of them, and the first periodic sweep comes soon enough for a stray answer.
    if (this.deps.life.opened) {
      for (const [id, requestId] of [...approvals.entries()]) {
        // First: an answer to a request whose decision was only in the transcript is stray once it is written.
        approvals.settleDecisions(id, requestId)
        for (const stray of inbox.strayAnswers(id, requestId)) this.refuseStrayAnswer(stray, requestId, report)
      }
    }
    for (const stray of inbox.strayCancels((id) => table.has(id) || approvals.isWatched(id))) {
      let record: ReturnType<Registry['get']> = null
      try {
        if (stray.threadId !== null) record = registry.get(stray.threadId)
      } catch {}
      // A running thread not live here belongs to another process: its cancel request is its owner's.
      if (record && isActive(record.status)) continue
      const reason = record ? `the thread is ${record.status}; only a running or suspended thread can be cancelled` : 'no such thread in the registry'
      this.refuseCancel({ ...stray, threadId: record ? record.id : null }, reason, report)
    }
  }

  /**
   * An answer of a suspended thread that answers no open request of it (a request id mistyped by
   * hand, or one already decided): set aside and reported, so the person who wrote it learns it was
   * not taken instead of waiting on it.
   */
  private refuseStrayAnswer(stray: InboxRequest & { decided: boolean }, openRequest: string | null, report: RequestsReport): void {
    const id = stray.threadId!
    const reason = stray.decided ? `request ${stray.requestId} was already decided` : `thread ${id} has no approval request ${stray.requestId}`
    const keptAs = this.deps.inbox.refuse(stray)
    report.refused.push({ threadId: id, kind: 'approval', file: stray.ref, reason })
    this.log({ at: this.now(), kind: 'approval', threadId: id, file: stray.ref, outcome: 'refused', reason, keptAs })
    const open = openRequest ? ` Its open request is ${this.requestPlace(stray.ref, openRequest)}.` : ' It has no open approval request.'
    this.deps.bus.report(new SpindleError('REQUEST_INVALID', `Rejected ${stray.ref}${keptAs ? ` (kept as ${keptAs})` : ''}: ${reason}.${open}`, { details: { threadId: id, file: stray.ref } }), id)
  }

  /** Where open request `requestId` lies, beside an answer at `answerRef`. */
  private requestPlace(answerRef: string, requestId: string): string {
    const slash = Math.max(answerRef.lastIndexOf('/'), answerRef.lastIndexOf('\\'))
    return `${answerRef.slice(0, slash + 1)}${requestId}.request.json`
  }

  private refuseCancel(request: InboxRequest, reason: string, report: RequestsReport): void {
    const id = request.threadId
    const keptAs = this.deps.inbox.refuse(request)
    report.refused.push({ threadId: id, kind: 'cancel', file: request.ref, reason })
    this.log({ at: this.now(), kind: 'cancel', threadId: id, file: request.ref, outcome: 'refused', reason })
    const live = id ? this.deps.table.get(id) : undefined
    live?.note('cancel_refused', { at: this.deps.clock.now(), file: request.ref, reason })
    const kept = keptAs ? ` (kept as ${keptAs})` : ''
    this.deps.bus.report(new SpindleError('CANCEL_REFUSED', `Refused the cancel request ${request.ref}${kept}: ${reason}.`, { details: { threadId: id, file: request.ref, keptAs } }), id ?? undefined)
  }

  /** A claimed request that was honoured: it leaves the inbox, the report and the request log say so. */
  private honour(request: ClaimedRequest, reason: string, report: RequestsReport): void {
    this.deps.inbox.honour(request)
    report.honoured.push({ threadId: request.threadId!, kind: request.kind, file: request.ref })
    this.log({ at: this.now(), kind: request.kind, threadId: request.threadId, file: request.ref, outcome: 'honoured', reason })
  }

  /** A log line that could not be written leaves the request as it was: the host hears why. */
  private log(line: RequestLogLine): void {
    const skipped = this.deps.inbox.log(line)
    if (skipped) this.deps.bus.report(skipped, line.threadId ?? undefined)
  }

  private now(): string {
    return new Date(this.deps.clock.now()).toISOString()
  }

  /** What a claimed cancel or resume request says, or why it must be refused. */
  private nonceRequest(claimed: ClaimedRequest, check: (request: CancelRequest) => string | null): { request: CancelRequest; refusal: null } | { refusal: string } {
    if (!claimed.body.ok) return { refusal: claimed.body.problem }
    const read = checkRequest(claimed.ref, claimed.body.value, CancelRequestSchema)
    if (!read.ok) return { refusal: read.problem }
    const refusal = check(read.value)
    return refusal === null ? { request: read.value, refusal } : { refusal }
  }

  /** Who to name as the source of a request that does not say: where it was written, inside the data directory. */
  private byFile(ref: string): string {
    return `file ${ref.startsWith(this.deps.dir) ? ref.slice(this.deps.dir.length).replace(/^[/\\]/, '') : ref}`
  }

  /**
   * Requests a runtime claimed and did not carry out before it was killed, acted on as if this one
   * had claimed them. A cancel left claimed was never carried out (it leaves the inbox before the
   * thread is cancelled). A resume may have been, just before the kill: a thread no longer
   * suspended needs none (recovery has replayed what was recorded before this runs).
   */
  private async takeOverAbandoned(report: RequestsReport): Promise<void> {
    for (const claimed of this.deps.inbox.abandoned()) {
      const id = claimed.threadId!
      if (claimed.kind === 'cancel') {
        await this.actOnCancel(id, claimed, report)
        continue
      }
      const status = this.deps.registry.get(id)?.status ?? null
      if (status === 'suspended' && !this.deps.table.has(id)) await this.actOnResume(id, claimed, report)
      else {
        const now = this.deps.table.has(id) ? 'runs again' : `is ${status ?? 'gone from the registry'}`
        this.honour(claimed, `not carried out again: the thread ${now}, resumed by the runtime that claimed the request before it stopped`, report)
      }
    }
  }

  private async handleCancel(id: string, report: RequestsReport): Promise<void> {
    const claimed = this.deps.inbox.claim(id, 'cancel')
    if (!claimed) return
    await this.actOnCancel(id, claimed, report)
  }

  private async actOnCancel(id: string, claimed: ClaimedRequest, report: RequestsReport): Promise<void> {
    const read = this.nonceRequest(claimed, (request) => cancelRefusal(this.deps.registry.get(id), request))
    if (read.refusal !== null) {
      this.refuseCancel(claimed, read.refusal, report)
      return
    }
    const reason = read.request.reason ?? 'cancelled by request file'
    this.honour(claimed, reason, report)
    try {
      await this.deps.decisions.cancelAs(id, reason, read.request.by ?? this.byFile(claimed.ref))
    } catch (error) {
      this.deps.bus.report(error, id)
    }
  }

  /** A resume request from another process: nonce-checked, then `resume`. */
  private async handleResume(id: string, report: RequestsReport): Promise<void> {
    const claimed = this.deps.inbox.claim(id, 'resume')
    if (!claimed) return
    await this.actOnResume(id, claimed, report)
  }

  private async actOnResume(id: string, claimed: ClaimedRequest, report: RequestsReport): Promise<void> {
    const read = this.nonceRequest(claimed, (request) => (this.deps.registry.get(id)?.nonce === request.nonce ? null : "the nonce does not match the thread's nonce"))
    let refusal = read.refusal
    if (read.refusal === null) {
      try {
        await this.deps.decisions.resume(id, { by: read.request.by ?? this.byFile(claimed.ref) })
      } catch (error) {
        refusal = describeError(error).message
      }
    }
    if (refusal !== null) {
      this.deps.inbox.refuse(claimed)
      report.refused.push({ threadId: id, kind: 'resume', file: claimed.ref, reason: refusal })
      this.log({ at: this.now(), kind: 'resume', threadId: id, file: claimed.ref, outcome: 'refused', reason: refusal })
      this.deps.bus.report(new SpindleError('REQUEST_INVALID', `Refused the resume request ${claimed.ref}: ${refusal}.`, { details: { threadId: id, file: claimed.ref } }), id)
      return
    }
    this.honour(claimed, 'resumed', report)
  }

  private async handleAnswer(id: string, requestId: string, report: RequestsReport): Promise<void> {
    const claimed = this.deps.inbox.claim(id, 'approval', requestId)
    if (!claimed) return
    const reject = (reason: string): void => {
      // Where it is kept goes into the log line: `spindle show`, doctor and the inspector pair the two.
      const keptAs = this.deps.inbox.refuse(claimed)
      report.refused.push({ threadId: id, kind: 'approval', file: claimed.ref, reason })
      this.log({ at: this.now(), kind: 'approval', threadId: id, file: claimed.ref, outcome: 'refused', reason, keptAs })
      this.deps.bus.report(new SpindleError('REQUEST_INVALID', `Rejected ${claimed.ref}${keptAs ? ` (kept as ${keptAs})` : ''}: ${reason}. The approval request stays open; write a corrected response.`, { details: { threadId: id, file: claimed.ref, keptAs } }), id)
    }
    if (!claimed.body.ok) return reject(claimed.body.problem)
    const read = checkRequest(claimed.ref, claimed.body.value, ApprovalResponseSchema)
    if (!read.ok) return reject(read.problem)
    const response = read.value
    const by = response.by ?? this.byFile(claimed.ref)
    // The request the file answers: a decision for another one (the thread moved on) is refused.
    const options = { by, requestId }
    try {
      if (response.approved === undefined) await this.deps.calls.answer(id, response.answer, options)
      else if (response.approved) {
        await this.deps.calls.approve(id, {
          ...options,
          ...(response.limits ? { limits: response.limits } : {}),
          ...(response.input !== undefined ? { input: response.input } : {}),
          ...(response.message ? { message: response.message } : {}),
        })
      } else await this.deps.calls.deny(id, response.message, options)
    } catch (error) {
      return reject(describeError(error).message)
    }
    this.honour(claimed, response.approved === undefined ? 'answered' : response.approved ? 'approved' : 'denied', report)
  }
}
