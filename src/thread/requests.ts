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
import type { ThreadContext, Usage } from '../../machines/threadContext.js'
import type { DataPaths } from '../../persistence/paths.js'
import { assertRealDirectories, assertRegistryKept, dataDirNotFound, dataPaths, threadDir } from '../../persistence/paths.js'
import { APPROVALS_DIR, approvalFiles, cancelFile, readRequestJson, readRequestText, resumeFile, writeRequestFile } from '../../persistence/requestFiles.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { ThreadStatus } from '../../persistence/types.js'
import { SpindleError, midSentence } from '../base/errors.js'
import { assertThreadId, isThreadId } from '../base/ids.js'
import { limitStillExceeded } from './approvalDecision.js'
import { approvalStanding } from './approvalRecords.js'
import type { ApprovalStanding } from './approvalRecords.js'

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
    /** Approve or deny a limit or a tool call; absent in the answer to a question. */
    approved: z.boolean().optional(),
    /** For a tool approval: the input to run the call with instead of the model's. */
    input: z.unknown().optional(),
    /** For a question (`ask_human`, `waitForAnswer`): the answer, any JSON value. */
    answer: z.unknown().optional(),
    /** New limits; when absent an approval takes the proposed one. */
    limits: LimitsSchema.partial().optional(),
    /** Accepted as a synonym of `limits`. */
    new_limits: LimitsSchema.partial().optional(),
    /** Goes into the transcript and the decision file: a paragraph, not a document. */
    message: z.string().max(10_000).optional(),
    by: z.string().max(200).optional(),
  })
  .refine((r) => (r.approved !== undefined) !== ('answer' in r && r.answer !== undefined), {
    message: 'an answer says either "approved": true or false (a limit or a tool approval) or "answer": … (a question), not both',
  })
  .transform(({ new_limits, limits, ...rest }) => ({ ...rest, ...(limits ?? new_limits ? { limits: limits ?? new_limits } : {}) }))
export type ApprovalResponse = z.infer<typeof ApprovalResponseSchema>

/** What a person is asked about a tool call the thread is paused at: to approve it, or to answer it. */
export interface CallRequest {
  id: string
  threadId: string
  directive: string
  kind: 'tool_approval' | 'question'
  tool: string
  callId: string
  /** The call's input, as the model gave it. */
  input: unknown
  /** For a question: what is asked (the `ask_human` question, a tool's `waitForAnswer` request). */
  request?: unknown
  message: string
  createdAt: string
  /** When the request ends by itself (ISO), or null. */
  deadline: string | null
  respond: { file: string; approve?: ApprovalResponse; deny?: ApprovalResponse; answer?: ApprovalResponse }
}

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

/** A request a suspended thread waits at: a limit's approval, a tool call's approval, a question. */
export type OpenRequest = ApprovalRequest | CallRequest

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

/**
 * The approval request thread `id` waits at, as a list (at most one) — none when it waits at none.
 * A request without a decision file is not pending once its thread has moved on: a process killed
 * between recording a decision and writing the file leaves it so (recovery writes the file).
 */
export function pendingApprovals(dir: string, id: string): OpenRequest[] {
  const paths = dataPaths(dir)
  if (!isThreadId(id) || !fs.existsSync(paths.registry)) return []
  const record = withRegistry(dir, (registry) => registry.get(id))
  const request = record ? openApprovalRequest(dir, id, record.status) : null
  return request ? [request] : []
}

/**
 * The approval request thread `id`, whose registry row says `status`, waits at, or null: for a
 * caller that has read the registry already (the inspector, every second).
 */
export function openApprovalRequest(dir: string, id: string, status: ThreadStatus): OpenRequest | null {
  const paths = dataPaths(dir)
  const standing = approvalStanding(paths, id, status)
  return standing.open ? readApprovalRequest(paths, id, standing.requestId) : null
}

function readApprovalRequest(paths: DataPaths, id: string, requestId: string): OpenRequest | null {
  try {
    const request = JSON.parse(readRequestText(approvalFiles(paths, id, requestId).request)) as OpenRequest
    // A file saying another id, or without the fields this reads, is not one the runtime wrote.
    return request?.id === requestId && typeof request.createdAt === 'string' ? request : null
  } catch {
    return null
  }
}

/**
 * The answer written to an open approval request that the runtime has not acted on yet: `waiting`
 * while the response file lies there, `taken` once a runtime has claimed it. Null when unanswered
 * (or when the answer is unreadable: the runtime rejects that one and the request stays open).
 */
export function approvalAnswer(dir: string, id: string, requestId: string): { approved: boolean | null; by: string | null; state: 'waiting' | 'taken' } | null {
  const files = approvalFiles(dataPaths(dir), id, requestId)
  for (const [file, state] of [[files.response, 'waiting'], [files.taken, 'taken']] as const) {
    if (!fs.existsSync(file)) continue
    // Read as the runtime reads it: an answer it would reject does not show as given.
    const read = readRequestFile(file, ApprovalResponseSchema)
    // approved null: the answer to a question.
    return read.ok ? { approved: read.value.approved ?? null, by: read.value.by ?? null, state } : null
  }
  return null
}

/**
 * Answers thread `id`'s pending approval request by writing its response file; the runtime that
 * watches the thread acts on it. Checked first as the runtime will check it, against the thread's
 * stored state, so that an answer it would refuse is refused here: a thread not suspended at a
 * request (THREAD_NOT_SUSPENDED), none to answer (NO_PENDING_APPROVAL), no new limit where nothing
 * is proposed (APPROVAL_NEEDS_LIMITS), limits it has used already (LIMIT_STILL_EXCEEDED). An answer
 * already waiting for the runtime is not written over (APPROVAL_ALREADY_ANSWERED) unless `replace`.
 * Returns the file written.
 */
/** How long a decision waits for the request file of a suspension already committed. */
const REQUEST_FILE_GRACE_MS = 2000
const pause = new Int32Array(new SharedArrayBuffer(4))

export function respondToApproval(
  dir: string,
  id: string,
  response: { approved?: boolean; limits?: Partial<Limits>; input?: unknown; answer?: unknown; message?: string; by?: string },
  options: { replace?: boolean } = {},
): string {
  assertThreadId(id)
  const paths = dataPaths(dir)
  if (!fs.existsSync(threadDir(paths, id))) {
    throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${paths.root}.`, { details: { threadId: id } })
  }
  // Before the requests are read: a linked approvals folder would otherwise show another folder's
  // requests, or none, and the refusal would not name the link.
  assertRealDirectories(paths.root, path.join(threadDir(paths, id), APPROVALS_DIR))
  const record = withRegistry(dir, (registry) => registry.get(id))
  if (!record) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${paths.root}.`, { details: { threadId: id } })
  let standing = approvalStanding(paths, id, record.status)
  // A host told `thread.approval_pending` by the event stream may decide before the runtime has
  // written the request file (it follows the suspension's commit): wait for it a moment.
  for (let waited = 0; !standing.open && standing.fileDue && waited < REQUEST_FILE_GRACE_MS; waited += 25) {
    Atomics.wait(pause, 0, 0, 25)
    standing = approvalStanding(paths, id, record.status)
  }
  if (!standing.open) throw notAnswerable(id, paths.root, record.status, standing)
  const requestId = standing.requestId
  checkAnswer(id, ` --dir ${paths.root}`, standing, response)
  const files = approvalFiles(paths, id, requestId)
  if (!options.replace) assertNoAnswerWaiting(id, requestId, files)
  writeRequestFile(paths, id, files.response, response)
  return files.response
}

/** Why thread `id` (in `where`, whose registry row says `status`) cannot be answered now, as its standing says. */
export function notAnswerable(id: string, where: string, status: ThreadStatus, standing: Extract<ApprovalStanding, { open: false }>): SpindleError {
  const what = standing.code === 'THREAD_NOT_SUSPENDED' ? 'is not suspended at an approval request' : standing.code === 'NO_PENDING_APPROVAL' ? 'has no pending approval request' : 'cannot be answered'
  return new SpindleError(standing.code, `Thread ${id} ${what} in ${where}: it ${standing.why}. Nothing was written.`, {
    details: { threadId: id, status },
  })
}

/**
 * Checks an answer to the request thread `id` waits at as the runtime will check it, so that an
 * answer it would set aside is refused before it is written, not reported as given. `at` is how
 * commands in the messages name where the thread is (` --dir <dir>`).
 */
export function checkAnswer(id: string, at: string, standing: Extract<ApprovalStanding, { open: true }>, response: unknown): void {
  const checked = ApprovalResponseSchema.safeParse(response)
  if (!checked.success) {
    const issue = checked.error.issues[0]!
    throw new SpindleError('INVALID_OPTIONS', `Not a valid answer to ${standing.requestId}: ${issue.path.join('.') || '(top level)'} ${midSentence(issue.message)}.`, {
      details: { threadId: id, field: issue.path.join('.') },
    })
  }
  assertFits(id, at, standing.context, checked.data)
  if (checked.data.approved && standing.context.suspendReason === 'limit') assertApprovable(id, standing.context, checked.data.limits)
}

/**
 * An answer of the kind the request asks for: approve or deny a limit or a tool call (limits only
 * for a limit, input only for a tool call), an answer for a question. The edited input of a tool
 * call is checked by the runtime, which has the tool's schema: one it rejects leaves the request open.
 */
function assertFits(id: string, at: string, context: ThreadContext, response: ApprovalResponse): void {
  const reason = context.suspendReason
  const call = context.pendingCall
  // Answering what the thread does not wait at is a state the thread is not in, as rt.approve says.
  const notThere = (what: string): never => {
    throw new SpindleError('NO_PENDING_APPROVAL', `Thread ${id} ${what}. Nothing was written.`, { details: { threadId: id, suspendReason: reason } })
  }
  const wrong = (what: string): never => {
    throw new SpindleError('INVALID_OPTIONS', `Thread ${id} ${what}. Nothing was written.`, { details: { threadId: id, suspendReason: reason } })
  }
  if (reason === 'waiting') {
    if (response.approved !== undefined) notThere(`waits for an answer to its ${call?.tool ?? ''} call, not for an approval: answer it (spindle answer ${id} <answer>${at})`)
    return
  }
  if (response.approved === undefined) notThere(`waits at ${reason === 'tool_approval' ? `a tool approval (${call?.tool ?? ''})` : 'a limit'}, not for an answer: approve or deny it (spindle approve ${id}${at}, or spindle deny ${id}${at})`)
  if (reason === 'tool_approval' && response.limits !== undefined) wrong(`waits at a tool approval (${call?.tool ?? ''}): limits apply only at a limit`)
  if (reason === 'limit' && response.input !== undefined) wrong('waits at a limit: edited input applies only to a tool approval')
}

/** What `rt.approve` refuses of an approval with `limits` (none: the proposal), refused here too. */
function assertApprovable(id: string, context: ThreadContext, limits: Partial<Limits> | undefined): void {
  const hit = context.limitHit!
  if (limits === undefined && hit.proposed === null) {
    throw new SpindleError(
      'APPROVAL_NEEDS_LIMITS',
      `Thread ${id} hit its ${hit.limit} limit and its escalation policy proposes no new one: approve with explicit limits, e.g. { limits: { ${hit.limit}: ${hit.max * 2} } }.`,
      { details: { threadId: id, limit: hit.limit } },
    )
  }
  const still = limitStillExceeded(id, context, limits ?? { [hit.limit]: hit.proposed })
  if (still) throw still
}

/** APPROVAL_ALREADY_ANSWERED when an answer to the request waits for the runtime, or one claimed it. */
function assertNoAnswerWaiting(id: string, requestId: string, files: ReturnType<typeof approvalFiles>): void {
  for (const [file, state] of [
    [files.response, 'waits for the runtime running the directory to act on it'],
    [files.taken, 'was claimed by a runtime, which is acting on it (if no runtime runs the directory any more, it died before it could)'],
  ] as const) {
    if (!fs.existsSync(file)) continue
    const read = readRequestFile(file, ApprovalResponseSchema)
    const what = read.ok
      ? `${read.value.approved === undefined ? 'an answer' : read.value.approved ? 'an approval' : 'a denial'}${read.value.limits ? ` (${Object.entries(read.value.limits).map(([k, v]) => `${k} ${v}`).join(', ')})` : ''} by ${read.value.by ?? 'someone who did not say (no "by")'}`
      : `an answer the runtime will reject (${read.problem})`
    throw new SpindleError(
      'APPROVAL_ALREADY_ANSWERED',
      `Approval request ${requestId} of thread ${id} is answered already: ${file} holds ${what}, and ${state}. Nothing was written; ` +
        'to write yours over it, answer again with --replace (respondToApproval: { replace: true }).',
      { details: { threadId: id, requestId, file, by: read.ok ? (read.value.by ?? null) : null } },
    )
  }
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
    const waiting = pendingApprovals(dir, id)[0]
    if (waiting?.kind === 'limit_escalation') {
      throw new SpindleError('APPROVAL_NEEDS_LIMITS', `Thread ${id} is waiting at a limit: approve it (spindle approve ${id} --turns N …) or deny it.`, {
        details: { threadId: id },
      })
    }
    // As rt.resume refuses it: only a decision on the call moves such a thread on.
    if (waiting) {
      const how = waiting.kind === 'question' ? `answer it (spindle answer ${id} <answer>)` : `approve it (spindle approve ${id}) or deny it (spindle deny ${id} --reason …)`
      throw new SpindleError('NO_PENDING_APPROVAL', `Thread ${id} waits at its ${waiting.tool} call${waiting.kind === 'question' ? ' for an answer' : ' for an approval'}, which a resume does not decide: ${how}.`, {
        details: { threadId: id, requestId: waiting.id },
      })
    }
    const file = resumeFile(paths, id)
    const request: CancelRequest = { nonce: record.nonce, ...(options.by !== undefined ? { by: options.by } : {}), requestedAt: new Date().toISOString() }
    writeRequestFile(paths, id, file, request)
    return file
  })
}
