/**
 * Requests that reach a thread as files, so that another process (the CLI, a script, a person with
 * an editor) can cancel a thread or answer its approval request without talking to the runtime
 * that runs it:
 *
 *   threads/<id>/cancel.requested                   { nonce, reason?, by? }
 *   threads/<id>/approvals/<rid>.request.json       written by the runtime when a limit is hit
 *   threads/<id>/approvals/<rid>.response.json      { approved, limits?, message?, by? }
 *   threads/<id>/approvals/<rid>.decision.json      written by the runtime once it has acted
 *
 * A file is claimed by renaming it before it is acted on, so two runtimes never act on one request.
 * Every request, honoured or refused, is appended to `<dir>/requests.log.jsonl`.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { LimitsSchema } from '../config/schema.js'
import type { Limits, LimitName, Usage } from '../machines/thread.machine.js'
import { writeFileAtomicSync } from '../persistence/atomicFile.js'
import { FileTooLarge, NotRegularFile, appendRegular, notRegularReason, openRegular, readSmallRegular } from '../persistence/fdio.js'
import type { DataPaths } from '../persistence/paths.js'
import { assertRealDirectories, dataPaths, threadDir } from '../persistence/paths.js'
import { openSqliteRegistry } from '../persistence/sqliteRegistry.js'
import type { ThreadStatus } from '../persistence/types.js'
import { SpindleError, midSentence } from './base/errors.js'
import { assertThreadId } from './base/ids.js'
import { ringBell } from './requestBell.js'

export const CANCEL_FILE = 'cancel.requested'
/** A request from another process to carry on a thread suspended for a reason other than a limit. */
export const RESUME_FILE = 'resume.requested'
export const APPROVALS_DIR = 'approvals'
export const REQUEST_LOG = 'requests.log.jsonl'

export const CancelRequestSchema = z.object({
  /** The thread's nonce, from its registry row (`spindle show <id>`). */
  nonce: z.string().min(1),
  reason: z.string().optional(),
  by: z.string().optional(),
  requestedAt: z.string().optional(),
})
export type CancelRequest = z.infer<typeof CancelRequestSchema>

export const ApprovalResponseSchema = z
  .object({
    approved: z.boolean(),
    /** New limits; when absent an approval takes the proposed one. */
    limits: LimitsSchema.partial().optional(),
    /** Accepted as a synonym of `limits`. */
    new_limits: LimitsSchema.partial().optional(),
    /** Goes into the transcript and the decision file: a paragraph, not a document. */
    message: z.string().max(10_000).optional(),
    by: z.string().max(200).optional(),
  })
  .transform(({ new_limits, limits, ...rest }) => ({ ...rest, ...(limits ?? new_limits ? { limits: limits ?? new_limits } : {}) }))
export type ApprovalResponse = z.infer<typeof ApprovalResponseSchema>

/** What a person (or a policy script) is asked to approve. */
export interface ApprovalRequest {
  id: string
  threadId: string
  directive: string
  kind: 'limit_escalation'
  limit: LimitName
  used: number
  max: number
  proposed: number | null
  cost: Usage
  message: string
  createdAt: string
  timeoutSeconds: number
  /** Where and how to answer. */
  respond: { file: string; approve: ApprovalResponse; deny: ApprovalResponse }
}

export function cancelFile(paths: DataPaths, id: string): string {
  return path.join(threadDir(paths, id), CANCEL_FILE)
}

export function approvalFiles(paths: DataPaths, id: string, requestId: string) {
  if (!/^[A-Za-z0-9_.-]{1,128}$/.test(requestId) || requestId.includes('..')) {
    throw new SpindleError('INVALID_OPTIONS', `"${requestId}" is not an approval request id.`, { details: { requestId } })
  }
  const dir = path.join(threadDir(paths, id), APPROVALS_DIR)
  return {
    dir,
    request: path.join(dir, `${requestId}.request.json`),
    response: path.join(dir, `${requestId}.response.json`),
    taken: path.join(dir, `${requestId}.response.taken.json`),
    rejected: path.join(dir, `${requestId}.response.rejected.json`),
    decision: path.join(dir, `${requestId}.decision.json`),
  }
}

/** Renames `from` to `to`; false when someone else claimed it first (or it is gone). */
export function claim(from: string, to: string): boolean {
  try {
    fs.renameSync(from, to)
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw error
  }
}

/**
 * Renames `from` to `to`, or, when `to` is taken (an earlier refused request), to `to` with `-2`,
 * `-3` … before its extension: evidence of one forged request never replaces another's. Returns
 * where it went, or null when it could not be moved (it then stays where it was).
 */
export function setAside(from: string, to: string): string | null {
  const ext = path.extname(to)
  const stem = to.slice(0, to.length - ext.length)
  for (let n = 1; n < 1000; n++) {
    const target = n === 1 ? to : `${stem}-${n}${ext}`
    if (fs.existsSync(target)) continue
    try {
      fs.renameSync(from, target)
      return target
    } catch {
      return null
    }
  }
  return null
}

export type ReadResult<T> = { ok: true; value: T } | { ok: false; problem: string }

/** A request file is a few hundred bytes of JSON; an approval's message is at most 10,000 characters. */
const MAX_REQUEST_BYTES = 1 << 20

/**
 * The text of a request file that anyone able to write the thread's directory may have put there:
 * only a regular file, never through a symlink (which could point the reading process at a file
 * outside the data directory) and never a FIFO or device (a blocking read would stop the process
 * that reads it — a runtime's whole poll — for good). Throws with the reason otherwise.
 */
export function readRequestText(file: string): string {
  try {
    return readSmallRegular(file, MAX_REQUEST_BYTES, fs.constants.O_NOFOLLOW ?? 0)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw new Error(`${file} is a symbolic link, not a file`)
    if (error instanceof NotRegularFile) throw new Error(`${file} is not a regular file`)
    if (error instanceof FileTooLarge) throw new Error(error.size === null ? error.message : `${file} is ${error.size} bytes, more than a request file's ${MAX_REQUEST_BYTES}`)
    throw error
  }
}

/** Reads and validates a request file; a problem names the field that is wrong. */
export function readRequestFile<T>(file: string, schema: z.ZodType<T>): ReadResult<T> {
  let text: string
  try {
    text = readRequestText(file)
  } catch (error) {
    return { ok: false, problem: `${file} cannot be read (${(error as Error).message})` }
  }
  let raw: unknown
  try {
    raw = JSON.parse(text)
  } catch (error) {
    return { ok: false, problem: `${file} is not valid JSON (${(error as Error).message})` }
  }
  const parsed = schema.safeParse(raw)
  if (parsed.success) return { ok: true, value: parsed.data }
  const issue = parsed.error.issues[0]!
  return { ok: false, problem: `${file}: ${issue.path.join('.') || '(top level)'} ${midSentence(issue.message)}` }
}

export interface RequestLogEntry {
  at: string
  kind: 'cancel' | 'approval' | 'resume'
  threadId: string | null
  file: string
  outcome: 'honoured' | 'refused'
  reason: string
}

/**
 * Appends to the data directory's request log. Never throws: the log must not stop a cancel. A log
 * that is no regular file (a symlink out of the data directory, a FIFO that would block the
 * runtime) is not written; the returned problem says where and why, for the caller to report.
 */
export function logRequest(root: string, entry: RequestLogEntry): SpindleError | null {
  const file = path.join(root, REQUEST_LOG)
  try {
    appendRegular(file, `${JSON.stringify(entry)}\n`)
  } catch (error) {
    const found = notRegularReason(error)
    if (found === null) return null
    return new SpindleError(
      'DATA_DIR_INVALID',
      `Did not log the ${entry.outcome} ${entry.kind} request ${entry.file} to ${file}: it is ${found}, not a regular file, and spindle does not write through one. ` +
        `The request itself was ${entry.outcome}. Move ${file} aside (spindle starts a new log) and find out who put it there.`,
      { details: { path: file, found, threadId: entry.threadId } },
    )
  }
  return null
}

export function readRequestLog(root: string): RequestLogEntry[] {
  const file = path.join(root, REQUEST_LOG)
  if (!fs.existsSync(file)) return []
  let opened: { fd: number }
  try {
    // As the writer: a FIFO in its place would block the reader too, a symlink would read another file.
    opened = openRegular(file, fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0))
  } catch (error) {
    if (notRegularReason(error) !== null) return []
    throw error
  }
  let text: string
  try {
    text = fs.readFileSync(opened.fd, 'utf8')
  } finally {
    fs.closeSync(opened.fd)
  }
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as RequestLogEntry]
      } catch {
        return []
      }
    })
}

/** Why a cancel request for a thread in `status` with `nonce` must be refused, or null to honour it. */
export function cancelRefusal(
  record: { status: ThreadStatus; nonce: string } | null,
  request: CancelRequest,
): string | null {
  if (!record) return 'no such thread in the registry'
  if (record.status !== 'running' && record.status !== 'created' && record.status !== 'suspended') {
    return `the thread is ${record.status}; only a running or suspended thread can be cancelled`
  }
  if (request.nonce !== record.nonce) return "the nonce does not match the thread's nonce"
  return null
}

function withRegistry<T>(dir: string, fn: (registry: ReturnType<typeof openSqliteRegistry>, paths: DataPaths) => T): T {
  const paths = dataPaths(dir)
  if (!fs.existsSync(paths.registry)) {
    throw new SpindleError('THREAD_NOT_FOUND', `${paths.root} has no registry.db: it is not a spindle data directory.`, {
      details: { dir: paths.root },
    })
  }
  const registry = openSqliteRegistry({ path: paths.registry, durability: 'fsync' })
  try {
    return fn(registry, paths)
  } finally {
    registry.close()
  }
}

/**
 * Asks whichever runtime runs thread `id` to cancel it, by writing its cancel file with the
 * thread's nonce. Refuses at once an unknown thread or one that is not running or suspended.
 * Returns the file written.
 */
export function requestCancel(dir: string, id: string, options: { reason?: string; by?: string } = {}): string {
  assertThreadId(id)
  return withRegistry(dir, (registry, paths) => {
    const record = registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${paths.root}.`, { details: { threadId: id } })
    }
    const refusal = cancelRefusal(record, { nonce: record.nonce })
    if (refusal) {
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} cannot be cancelled: ${refusal}.`, {
        details: { threadId: id, status: record.status },
      })
    }
    const file = cancelFile(paths, id)
    const request: CancelRequest = {
      nonce: record.nonce,
      ...(options.reason !== undefined ? { reason: options.reason } : {}),
      ...(options.by !== undefined ? { by: options.by } : {}),
      requestedAt: new Date().toISOString(),
    }
    writeFileAtomicSync(file, `${JSON.stringify(request, null, 2)}\n`, { fsync: true, under: paths.root })
    ringBell(paths.root, id)
    return file
  })
}

/** Approval requests of a thread that no decision has answered yet, oldest first. */
export function pendingApprovals(dir: string, id: string): ApprovalRequest[] {
  const paths = dataPaths(dir)
  const approvals = path.join(threadDir(paths, id), APPROVALS_DIR)
  if (!fs.existsSync(approvals)) return []
  const out: ApprovalRequest[] = []
  for (const name of fs.readdirSync(approvals).sort()) {
    if (!name.endsWith('.request.json')) continue
    const requestId = name.slice(0, -'.request.json'.length)
    try {
      // A name that is no request id (`x y.request.json`) throws here: skipped like an unreadable file.
      if (fs.existsSync(approvalFiles(paths, id, requestId).decision)) continue
      const request = JSON.parse(readRequestText(path.join(approvals, name))) as ApprovalRequest
      // The file's name is the request's id: a file saying otherwise, or without the fields this
      // reads, is not one the runtime wrote, and must not break the listing of the real ones.
      if (request?.id === requestId && typeof request.createdAt === 'string') out.push(request)
    } catch {}
  }
  return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt))
}

/**
 * The answer written to an open approval request that the runtime has not acted on yet: `waiting`
 * while the response file lies there, `taken` once a runtime has claimed it. Null when unanswered
 * (or when the answer is unreadable: the runtime rejects that one and the request stays open).
 */
export function approvalAnswer(dir: string, id: string, requestId: string): { approved: boolean; by: string | null; state: 'waiting' | 'taken' } | null {
  const files = approvalFiles(dataPaths(dir), id, requestId)
  for (const [file, state] of [[files.response, 'waiting'], [files.taken, 'taken']] as const) {
    if (!fs.existsSync(file)) continue
    // Read as the runtime reads it: an answer it would reject does not show as given.
    const read = readRequestFile(file, ApprovalResponseSchema)
    return read.ok ? { approved: read.value.approved, by: read.value.by ?? null, state } : null
  }
  return null
}

/**
 * Answers thread `id`'s pending approval request by writing its response file; the runtime that
 * watches the thread acts on it. Returns the file written.
 */
export function respondToApproval(
  dir: string,
  id: string,
  response: { approved: boolean; limits?: Partial<Limits>; message?: string; by?: string },
): string {
  assertThreadId(id)
  const paths = dataPaths(dir)
  if (!fs.existsSync(threadDir(paths, id))) {
    throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${paths.root}.`, { details: { threadId: id } })
  }
  // Before the requests are read: a linked approvals folder would otherwise show another folder's
  // requests, or none, and the refusal would not name the link.
  assertRealDirectories(paths.root, path.join(threadDir(paths, id), APPROVALS_DIR))
  const pending = pendingApprovals(dir, id)
  const request = pending[pending.length - 1]
  if (!request) {
    throw new SpindleError('NO_PENDING_APPROVAL', `Thread ${id} has no pending approval request in ${paths.root}.`, {
      details: { threadId: id },
    })
  }
  // Checked as the runtime will check it: an answer it would set aside must not be reported as given.
  const checked = ApprovalResponseSchema.safeParse(response)
  if (!checked.success) {
    const issue = checked.error.issues[0]!
    throw new SpindleError('INVALID_OPTIONS', `Not a valid answer to ${request.id}: ${issue.path.join('.') || '(top level)'} ${midSentence(issue.message)}.`, {
      details: { threadId: id, field: issue.path.join('.') },
    })
  }
  const file = approvalFiles(paths, id, request.id).response
  writeFileAtomicSync(file, `${JSON.stringify(response, null, 2)}\n`, { fsync: true, under: paths.root })
  ringBell(paths.root, id)
  return file
}

export function resumeFile(paths: DataPaths, id: string): string {
  return path.join(threadDir(paths, id), RESUME_FILE)
}

/**
 * Asks the runtime that watches suspended thread `id` to resume it (`rt.resume`), by writing its
 * resume file with the thread's nonce. A thread at a limit needs an approval instead.
 */
export function requestResume(dir: string, id: string, options: { by?: string } = {}): string {
  assertThreadId(id)
  return withRegistry(dir, (registry, paths) => {
    const record = registry.get(id)
    if (!record) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${paths.root}.`, { details: { threadId: id } })
    if (record.status !== 'suspended') {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} is ${record.status}, not suspended: there is nothing to resume.`, {
        details: { threadId: id, status: record.status },
      })
    }
    if (pendingApprovals(dir, id).length > 0) {
      throw new SpindleError('APPROVAL_NEEDS_LIMITS', `Thread ${id} is waiting at a limit: approve it (spindle approve ${id} --turns N …) or deny it.`, {
        details: { threadId: id },
      })
    }
    const file = resumeFile(paths, id)
    const request: CancelRequest = { nonce: record.nonce, ...(options.by !== undefined ? { by: options.by } : {}), requestedAt: new Date().toISOString() }
    writeFileAtomicSync(file, `${JSON.stringify(request, null, 2)}\n`, { fsync: true, under: paths.root })
    ringBell(paths.root, id)
    return file
  })
}
