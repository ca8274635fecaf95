/**
 * Requests that reach a thread as files, so that another process (the CLI, a script, a person with
 * an editor) can cancel a thread, resume it or answer its approval request without talking to the
 * runtime that runs it: what a request must say, and the calls that write one with the thread's
 * nonce and ring the bell. Where the files live and how they are claimed: persistence/requestFiles.ts.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { LimitsSchema } from '../../config/schema.js'
import type { Limits, LimitName } from '../../machines/threadPolicy.js'
import type { Usage } from '../../machines/threadContext.js'
import type { DataPaths } from '../../persistence/paths.js'
import { assertRealDirectories, assertRegistryKept, dataDirNotFound, dataPaths, threadDir } from '../../persistence/paths.js'
import { APPROVALS_DIR, approvalFiles, cancelFile, readRequestJson, readRequestText, resumeFile, writeRequestFile } from '../../persistence/requestFiles.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { ThreadStatus } from '../../persistence/types.js'
import { SpindleError, midSentence } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'

export {
  APPROVALS_DIR,
  CANCEL_FILE,
  ESCALATION_FILE,
  REQUEST_LOG,
  RESUME_FILE,
  approvalFiles,
  cancelFile,
  claim,
  logRequest,
  readRequestLog,
  readRequestText,
  resumeFile,
  setAside,
} from '../../persistence/requestFiles.js'
export type { RequestLogEntry } from '../../persistence/requestFiles.js'

export const CancelRequestSchema = z.object({
  /** The thread's nonce, from its registry row (a secret: the CLI never prints it). */
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

export type ReadResult<T> = { ok: true; value: T } | { ok: false; problem: string }

/** Reads and validates a request file; a problem names the field that is wrong. */
export function readRequestFile<T>(file: string, schema: z.ZodType<T>): ReadResult<T> {
  const read = readRequestJson(file)
  return read.ok ? checkRequest(file, read.value, schema) : read
}

/** Checks what a request file said against `schema`; a problem names the file and the field. */
export function checkRequest<T>(file: string, raw: unknown, schema: z.ZodType<T>): ReadResult<T> {
  const parsed = schema.safeParse(raw)
  if (parsed.success) return { ok: true, value: parsed.data }
  const issue = parsed.error.issues[0]!
  return { ok: false, problem: `${file}: ${issue.path.join('.') || '(top level)'} ${midSentence(issue.message)}` }
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
    // Threads without their registry: say the registry was lost, not that the directory is wrong.
    assertRegistryKept(paths)
    throw dataDirNotFound(paths)
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
    writeRequestFile(paths, id, file, request)
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
  writeRequestFile(paths, id, file, response)
  return file
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
    writeRequestFile(paths, id, file, request)
    return file
  })
}
