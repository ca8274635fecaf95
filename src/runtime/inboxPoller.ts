/**
 * Requests from outside the process — cancel, resume and approval-response files that the CLI, a
 * script or a person wrote — turned into decisions: found (the bell says where to look, a scan in
 * turn finds files written by hand), claimed so no other runtime acts on them too, checked (the
 * thread's nonce), carried out or refused, and logged. Owns the poll timer.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Clock } from '../base/clock.js'
import { SpindleError, describeError, isSpindleError } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'
import type { Config } from '../../config/schema.js'
import { assertRealDirectories, dataPaths, threadDir } from '../../persistence/paths.js'
import type { Registry } from '../../persistence/types.js'
import { BellReader } from '../requestBell.js'
import type { CancelRequest, RequestLogEntry } from '../requests.js'
import {
  APPROVALS_DIR,
  ApprovalResponseSchema,
  CANCEL_FILE,
  CancelRequestSchema,
  approvalFiles,
  cancelFile,
  cancelRefusal,
  claim,
  logRequest,
  readRequestFile,
  resumeFile,
  setAside,
} from '../requests.js'
import { isActive } from '../threadStatus.js'
import type { RequestsReport } from './api.js'
import type { Approvals } from './approvals.js'
import type { Decisions } from './decisions.js'
import type { Lifecycle, Reporter } from './events.js'
import type { ThreadTable } from './threadTable.js'

type Paths = ReturnType<typeof dataPaths>

export interface InboxPollerDeps {
  dir: string
  memory: boolean
  table: ThreadTable
  registry: Registry
  approvals: Pick<Approvals, 'isWatched' | 'requestOf' | 'ids' | 'entries' | 'watch' | 'size'>
  decisions: Pick<Decisions, 'cancelAs' | 'resume' | 'approve' | 'deny'>
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
  /** Rings of the request bell: which threads' directories have a new request file. */
  private readonly bell: BellReader
  /** Threads still to look in for request files written by hand, in this round of polls. */
  private scanQueue: string[] = []
  /** Folders refused by `requestFolderIsReal` and reported: said once, not at every poll. */
  private readonly forgedFolders = new Set<string>()

  constructor(private readonly deps: InboxPollerDeps) {
    this.bell = new BellReader(deps.dir, { onProblem: (problem) => deps.bus.report(problem) })
  }

  /** Acts on the request files found now; one check at a time. */
  check(options: { sweep?: boolean } = {}): Promise<RequestsReport> {
    if (this.polling) return this.polling.then(() => this.check(options))
    const run = this.pollOnce(options.sweep ?? false).finally(() => {
      this.polling = null
    })
    this.polling = run
    return run
  }

  start(): void {
    if (this.deps.memory) return
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
    const { table, approvals, config } = this.deps
    const report: RequestsReport = { honoured: [], refused: [] }
    if (this.deps.memory || this.deps.life.closed) return report
    const paths = dataPaths(this.deps.dir)
    if (sweep) this.sweep(paths, report)
    const rings = this.bell.read()
    const everywhere = sweep || rings.missed || table.size + approvals.size <= config.requests.scanPerPoll
    const look = everywhere ? null : this.lookIn(rings.ids)
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
      if (fs.existsSync(cancelFile(paths, id))) await this.handleCancelFile(paths, id, report)
    }
    for (const id of suspendedIds) {
      if (this.deps.life.closed) break
      if (!approvals.isWatched(id)) continue
      const requestId = approvals.requestOf(id)
      if (fs.existsSync(cancelFile(paths, id))) {
        await this.handleCancelFile(paths, id, report)
        continue
      }
      if (fs.existsSync(resumeFile(paths, id))) {
        await this.handleResumeFile(paths, id, report)
        continue
      }
      if (requestId && fs.existsSync(approvalFiles(paths, id, requestId).response)) await this.handleResponse(paths, id, requestId, report)
    }
    return report
  }

  /**
   * The threads one poll looks in when it does not look in all: those the bell rang for, and the
   * next `requests.scanPerPoll` in turn, so that a request file written by hand is found too.
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

  /**
   * Whether the request files in `dir` (a thread folder or its approvals/) may be claimed and read:
   * `dir` and every folder above it inside the data directory are real directories. A symlink put
   * there after the thread's files were opened would have this runtime rename and read files
   * wherever it points; so nothing there is touched, and the link is reported as forged input,
   * once. Checked only where a request file was seen: a poll with none costs nothing more.
   */
  private requestFolderIsReal(root: string, dir: string, id: string | null): boolean {
    try {
      assertRealDirectories(root, dir)
    } catch (error) {
      const at = isSpindleError(error) && typeof error.details.path === 'string' ? error.details.path : dir
      if (!this.forgedFolders.has(at)) {
        this.forgedFolders.add(at)
        this.deps.bus.report(
          new SpindleError('DATA_DIR_INVALID', `Did not claim or read the request files in ${dir}: ${describeError(error).message}`, {
            details: { ...(isSpindleError(error) ? error.details : {}), threadId: id, dir },
          }),
          id ?? undefined,
        )
      }
      return false
    }
    if (this.forgedFolders.size > 0) for (const at of this.forgedFolders) if (dir === at || dir.startsWith(at + path.sep)) this.forgedFolders.delete(at)
    return true
  }

  /** Every thread directory: stray cancel files, suspended threads other processes left, missing approval requests. */
  private sweep(paths: Paths, report: RequestsReport): void {
    const { table, registry, approvals } = this.deps
    for (const record of registry.list({ status: 'suspended' })) {
      if (approvals.isWatched(record.id) || table.has(record.id)) continue
      const context = table.storedContext(record.id)
      if (!context) continue
      approvals.watch(record.id, context)
    }
    // Not while the directory is being opened: one readdir per suspended thread would slow every
    // open of many of them, and the first periodic sweep comes soon enough for a stray file.
    if (this.deps.life.opened) for (const [id, requestId] of approvals.entries()) this.refuseStrayResponses(paths, id, requestId, report)
    let names: string[]
    try {
      names = fs.readdirSync(paths.threads)
    } catch {
      return
    }
    for (const name of names) {
      if (table.has(name) || approvals.isWatched(name)) continue
      const file = path.join(paths.threads, name, CANCEL_FILE)
      if (!fs.existsSync(file) || !this.requestFolderIsReal(paths.root, path.join(paths.threads, name), null)) continue
      let record: ReturnType<Registry['get']> = null
      try {
        assertThreadId(name)
        record = registry.get(name)
      } catch {}
      // A running thread not live here belongs to another process: its cancel file is its owner's.
      if (record && isActive(record.status)) continue
      const reason = record ? `the thread is ${record.status}; only a running or suspended thread can be cancelled` : 'no such thread in the registry'
      this.refuseCancel(paths, record ? record.id : null, file, reason, report)
    }
  }

  /**
   * Response files of a suspended thread that answer no open request of it (a request id mistyped
   * by hand, or one already decided): set aside and reported, so the person who wrote one learns
   * it was not taken instead of waiting on it.
   */
  private refuseStrayResponses(paths: Paths, id: string, requestId: string | null, report: RequestsReport): void {
    const dir = path.join(threadDir(paths, id), APPROVALS_DIR)
    let names: string[]
    try {
      names = fs.readdirSync(dir)
    } catch {
      return
    }
    for (const name of names) {
      if (!name.endsWith('.response.json')) continue
      const rid = name.slice(0, -'.response.json'.length)
      if (rid === requestId) continue
      const file = path.join(dir, name)
      const decided = fs.existsSync(path.join(dir, `${rid}.decision.json`))
      // An open request this runtime does not know of (another runtime on the directory woke the
      // thread and it suspended again there): the answer is that runtime's to act on.
      if (!decided && fs.existsSync(path.join(dir, `${rid}.request.json`))) continue
      const open = requestId ? ` Its open request is ${path.join(dir, `${requestId}.request.json`)}.` : ' It has no open approval request.'
      const reason = decided ? `request ${rid} was already decided` : `thread ${id} has no approval request ${rid}`
      // Checked before the first file is moved, not per sweep: the listing costs one readdir as before.
      if (!this.requestFolderIsReal(paths.root, dir, id)) return
      const keptAs = setAside(file, path.join(dir, `${rid}.response.rejected.json`))
      report.refused.push({ threadId: id, kind: 'approval', file, reason })
      this.log(paths.root, { at: this.now(), kind: 'approval', threadId: id, file, outcome: 'refused', reason })
      this.deps.bus.report(new SpindleError('REQUEST_INVALID', `Rejected ${file}${keptAs ? ` (kept as ${keptAs})` : ''}: ${reason}.${open}`, { details: { threadId: id, file } }), id)
    }
  }

  /** `current` is where the request lies now (claimed, or where it was written): `file` names it. */
  private refuseCancel(paths: Paths, id: string | null, file: string, reason: string, report: RequestsReport, current = file): void {
    const keptAs = setAside(current, path.join(path.dirname(file), 'cancel.refused.json'))
    report.refused.push({ threadId: id, kind: 'cancel', file, reason })
    this.log(paths.root, { at: this.now(), kind: 'cancel', threadId: id, file, outcome: 'refused', reason })
    const live = id ? this.deps.table.get(id) : undefined
    live?.note('cancel_refused', { at: this.deps.clock.now(), file, reason })
    const kept = keptAs ? ` (kept as ${keptAs})` : ''
    this.deps.bus.report(new SpindleError('CANCEL_REFUSED', `Refused the cancel request ${file}${kept}: ${reason}.`, { details: { threadId: id, file, keptAs } }), id ?? undefined)
  }

  /**
   * Claims a request file carrying a thread's nonce (cancel, resume) so no other process acts on it
   * too, and reads it. `refusal` says why it must be refused (unreadable, or `check` failed).
   */
  private claimNonceRequest(
    file: string,
    check: (request: CancelRequest) => string | null,
  ): { claimed: string; refusal: string } | { claimed: string; refusal: null; request: CancelRequest } | null {
    const claimed = `${file}.${process.pid}.claimed`
    if (!claim(file, claimed)) return null
    const read = readRequestFile<CancelRequest>(claimed, CancelRequestSchema)
    if (!read.ok) return { claimed, refusal: read.problem.replace(claimed, file) }
    const refusal = check(read.value)
    return refusal === null ? { claimed, refusal, request: read.value } : { claimed, refusal }
  }

  /** A claimed request that was honoured: its file goes, the report and the request log say so. */
  private honour(paths: Paths, kind: 'cancel' | 'resume', id: string, file: string, claimed: string, reason: string, report: RequestsReport): void {
    fs.rmSync(claimed, { force: true })
    report.honoured.push({ threadId: id, kind, file })
    this.log(paths.root, { at: this.now(), kind, threadId: id, file, outcome: 'honoured', reason })
  }

  /** A log line that could not be written leaves the request as it was: the host hears why. */
  private log(root: string, entry: RequestLogEntry): void {
    const skipped = logRequest(root, entry)
    if (skipped) this.deps.bus.report(skipped, entry.threadId ?? undefined)
  }

  private now(): string {
    return new Date(this.deps.clock.now()).toISOString()
  }

  private async handleCancelFile(paths: Paths, id: string, report: RequestsReport): Promise<void> {
    const file = cancelFile(paths, id)
    if (!this.requestFolderIsReal(paths.root, path.dirname(file), id)) return
    const claimed = this.claimNonceRequest(file, (request) => cancelRefusal(this.deps.registry.get(id), request))
    if (!claimed) return
    if (claimed.refusal !== null) {
      this.refuseCancel(paths, id, file, claimed.refusal, report, claimed.claimed)
      return
    }
    const reason = claimed.request.reason ?? 'cancelled by request file'
    this.honour(paths, 'cancel', id, file, claimed.claimed, reason, report)
    try {
      await this.deps.decisions.cancelAs(id, reason, claimed.request.by ?? `file ${path.relative(paths.root, file)}`)
    } catch (error) {
      this.deps.bus.report(error, id)
    }
  }

  /** A resume request from another process: nonce-checked, then `resume`. */
  private async handleResumeFile(paths: Paths, id: string, report: RequestsReport): Promise<void> {
    const file = resumeFile(paths, id)
    if (!this.requestFolderIsReal(paths.root, path.dirname(file), id)) return
    const claimed = this.claimNonceRequest(file, (request) => (this.deps.registry.get(id)?.nonce === request.nonce ? null : "the nonce does not match the thread's nonce"))
    if (!claimed) return
    let refusal = claimed.refusal
    if (claimed.refusal === null) {
      try {
        await this.deps.decisions.resume(id, { by: claimed.request.by ?? `file ${path.relative(paths.root, file)}` })
      } catch (error) {
        refusal = describeError(error).message
      }
    }
    if (refusal !== null) {
      try {
        setAside(claimed.claimed, path.join(path.dirname(file), 'resume.refused.json'))
      } catch {}
      report.refused.push({ threadId: id, kind: 'resume', file, reason: refusal })
      this.log(paths.root, { at: this.now(), kind: 'resume', threadId: id, file, outcome: 'refused', reason: refusal })
      this.deps.bus.report(new SpindleError('REQUEST_INVALID', `Refused the resume request ${file}: ${refusal}.`, { details: { threadId: id, file } }), id)
      return
    }
    this.honour(paths, 'resume', id, file, claimed.claimed, 'resumed', report)
  }

  private async handleResponse(paths: Paths, id: string, requestId: string, report: RequestsReport): Promise<void> {
    const files = approvalFiles(paths, id, requestId)
    if (!this.requestFolderIsReal(paths.root, files.dir, id) || !claim(files.response, files.taken)) return
    const read = readRequestFile(files.taken, ApprovalResponseSchema)
    const reject = (reason: string): void => {
      try {
        setAside(files.taken, files.rejected)
      } catch {}
      report.refused.push({ threadId: id, kind: 'approval', file: files.response, reason })
      this.log(paths.root, { at: this.now(), kind: 'approval', threadId: id, file: files.response, outcome: 'refused', reason })
      this.deps.bus.report(new SpindleError('REQUEST_INVALID', `Rejected ${files.response}: ${reason}. The approval request stays open; write a corrected response.`, { details: { threadId: id, file: files.response } }), id)
    }
    if (!read.ok) return reject(read.problem.replace(files.taken, files.response))
    const response = read.value
    const by = response.by ?? `file ${path.relative(paths.root, files.response)}`
    try {
      if (response.approved) await this.deps.decisions.approve(id, { ...(response.limits ? { limits: response.limits } : {}), by, ...(response.message ? { message: response.message } : {}) })
      else await this.deps.decisions.deny(id, response.message, { by })
    } catch (error) {
      return reject(describeError(error).message)
    }
    fs.rmSync(files.taken, { force: true })
    report.honoured.push({ threadId: id, kind: 'approval', file: files.response })
    this.log(paths.root, { at: this.now(), kind: 'approval', threadId: id, file: files.response, outcome: 'honoured', reason: response.approved ? 'approved' : 'denied' })
  }
}
