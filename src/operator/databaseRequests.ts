/**
 * `spindle cancel | approve | deny | answer | resume` on a PostgreSQL database. As on a directory,
 * the command decides nothing itself: it leaves a request in the database's inbox
 * (`RequestInbox.leaveRequest`, which also NOTIFYs every runtime on the database) for the worker
 * that runs or watches the thread, which has the thread's model and tools and acts on it. What is
 * left is checked first as that worker will check it — the thread's nonce, the request the thread
 * waits at, the kind of answer it asks for, limits it has not used already (src/thread/requests.ts)
 * — so that what it would refuse is refused here, with the same words, and nothing is left.
 */
import type { ThreadStatus } from '../../persistence/types.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { SpindleError, describeError } from '../base/errors.js'
import type { SpindleErrorCode } from '../base/errors.js'
import type { Stores } from '../runtime/openStores.js'
import { openRequestId } from '../thread/approvalDecision.js'
import type { ApprovalStanding } from '../thread/approvalRecords.js'
import { openRequestOf } from '../thread/openRequest.js'
import type { CancelRequest, OpenRequest } from '../thread/requests.js'
import { cancelRefusal, checkAnswer, notAnswerable } from '../thread/requests.js'
import type { DatabasePlace } from './databaseStores.js'
import { recordIn, withDatabase } from './databaseStores.js'
import type { Approval, RequestWritten } from './operatorActions.js'
import { approvalResponse } from './operatorActions.js'

/** What happens next, for a person, and how to see it. */
const next = (id: string, place: DatabasePlace): string =>
  'The worker running this thread acts on it as soon as the database tells it (within its poll interval, 1 s by default, at the latest); ' +
  `if none runs it now, the next runtime that opens the database does. \`spindle show ${id}${place.argument}\` shows the outcome.`

/** How long an answer waits for the request of a suspension already committed to be stored. */
const REQUEST_GRACE_MS = 2000
const pause = new Int32Array(new SharedArrayBuffer(4))

/**
 * Where thread `id`, whose registry row says `status`, stands towards approval, as
 * `approvalStanding` says it of a directory: suspended at a request the runtime has stored and
 * nobody has decided, by its checkpoint and a transcript that has not moved past it. Never throws
 * for damage (the standing's code says what is wrong).
 */
export function standingIn(stores: Stores, id: string, status: ThreadStatus): ApprovalStanding {
  if (status !== 'suspended') return { open: false, code: 'THREAD_NOT_SUSPENDED', why: `is ${status}, not suspended` }
  let envelope
  try {
    envelope = stores.checkpoints.load(id)
  } catch (error) {
    const { code, message } = describeError(error)
    return { open: false, code: code as SpindleErrorCode, why: `has a checkpoint that cannot be read (${message})` }
  }
  if (!envelope || envelope.status !== 'suspended') {
    return {
      open: false,
      code: 'THREAD_NOT_SUSPENDED',
      why: `is ${envelope ? envelope.status : 'without a checkpoint'} by its checkpoint, though the registry still says suspended: a runtime woke it and has not brought the registry in line`,
    }
  }
  const bytes = stores.folders.transcriptBytes(id)
  // As recovery tells a suspended thread that moved on: its transcript holds more than the checkpoint covers.
  if (bytes !== null && bytes > envelope.transcript.bytes) {
    return {
      open: false,
      code: 'THREAD_NOT_SUSPENDED',
      why: 'is no longer suspended: its transcript records a decision after its suspension (a runtime woke it; if that process died, the next runtime to open the database carries the thread on)',
    }
  }
  const context = (envelope.snapshot as { context: ThreadContext }).context
  const requestId = openRequestId(context)
  if (requestId === null) {
    return { open: false, code: 'NO_PENDING_APPROVAL', why: `is suspended ${context.suspendReason === 'limit' ? 'at a limit without an approval request' : `for ${context.suspendReason ?? 'an unknown reason'}, not at an approval request`}` }
  }
  if (!stores.inbox.hasApproval(id, requestId)) {
    return { open: false, code: 'NO_PENDING_APPROVAL', why: `waits at request ${requestId}, which is not stored yet (the runtime that suspended it stores it in a moment; if that runtime stopped first, the next runtime to open the database does)`, fileDue: true }
  }
  if (!stores.inbox.undecided(id).includes(requestId)) return { open: false, code: 'NO_PENDING_APPROVAL', why: `waits at request ${requestId}, which is decided already` }
  return { open: true, requestId, context }
}

/** The approval request thread `id` waits at, or null: as the runtime stored it. */
export function openRequestIn(stores: Stores, id: string, status: ThreadStatus): OpenRequest | null {
  const standing = standingIn(stores, id, status)
  return standing.open ? openRequestOf(id, standing.context, stores.inbox.answerAt(id, standing.requestId), Date.now()) : null
}

/** Leaves a cancel request with the thread's nonce; refuses an unknown thread or one that is not running or suspended. */
export function cancelInDatabase(place: DatabasePlace, id: string, reason: string | undefined, by: string): RequestWritten {
  return withDatabase(place.database, (stores) => cancelIn(stores, place, id, reason, by))
}

/** Leaves a resume request for a thread suspended after errors, for its budget or in a crash loop. */
export function resumeInDatabase(place: DatabasePlace, id: string, by: string): RequestWritten {
  return withDatabase(place.database, (stores) => resumeIn(stores, place, id, by))
}

/** Approves what the thread waits at: a limit escalation (the proposed limit, or those given) or a tool call. */
export function approveInDatabase(place: DatabasePlace, id: string, approval: Approval, by: string, options: { replace?: boolean } = {}): RequestWritten {
  return withDatabase(place.database, (stores) => approveIn(stores, place, id, approval, by, options))
}

/** Denies it: at a limit the thread ends cancelled; at a tool call the model gets the denial as the call's result. */
export function denyInDatabase(place: DatabasePlace, id: string, reason: string | undefined, by: string, options: { replace?: boolean } = {}): RequestWritten {
  return withDatabase(place.database, (stores) => denyIn(stores, place, id, reason, by, options))
}

/** Answers the question the thread waits at (`ask_human`, `waitForAnswer`): the answer becomes the call's result. */
export function answerQuestionInDatabase(place: DatabasePlace, id: string, answer: unknown, by: string, options: { replace?: boolean } = {}): RequestWritten {
  // Before the database is opened: an answer without a value is refused whether or not it answers.
  assertAnswered(id, answer)
  return withDatabase(place.database, (stores) => answerQuestionIn(stores, place, id, answer, by, options))
}

// The same, on stores the caller keeps open (the inspector's, for as long as it serves).

/** `cancelInDatabase` on open stores. */
export function cancelIn(stores: Stores, place: DatabasePlace, id: string, reason: string | undefined, by: string): RequestWritten {
  const record = recordIn(stores, id)
  const refusal = cancelRefusal(record, { nonce: record.nonce })
  if (refusal) {
    throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} cannot be cancelled: ${refusal}.`, { details: { threadId: id, status: record.status } })
  }
  const ref = stores.inbox.askCancel(id, { nonce: record.nonce, ...(reason !== undefined ? { reason } : {}), by })!
  return { threadId: id, action: 'cancel', file: ref, next: next(id, place) }
}

/** `resumeInDatabase` on open stores. */
export function resumeIn(stores: Stores, place: DatabasePlace, id: string, by: string): RequestWritten {
  const record = recordIn(stores, id)
  if (record.status !== 'suspended') {
    throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} is ${record.status}, not suspended: there is nothing to resume.`, { details: { threadId: id, status: record.status } })
  }
  const waiting = openRequestIn(stores, id, record.status)
  if (waiting?.kind === 'limit_escalation') {
    throw new SpindleError('APPROVAL_NEEDS_LIMITS', `Thread ${id} is waiting at a limit: approve it (spindle approve ${id} --turns N …) or deny it.`, { details: { threadId: id } })
  }
  // As rt.resume refuses it: only a decision on the call moves such a thread on.
  if (waiting) {
    const how = waiting.kind === 'question' ? `answer it (spindle answer ${id} <answer>)` : `approve it (spindle approve ${id}) or deny it (spindle deny ${id} --reason …)`
    throw new SpindleError('NO_PENDING_APPROVAL', `Thread ${id} waits at its ${waiting.tool} call${waiting.kind === 'question' ? ' for an answer' : ' for an approval'}, which a resume does not decide: ${how}.`, {
      details: { threadId: id, requestId: waiting.id },
    })
  }
  const request: CancelRequest = { nonce: record.nonce, by, requestedAt: new Date().toISOString() }
  return { threadId: id, action: 'resume', file: stores.inbox.leaveRequest(id, 'resume', request), next: next(id, place) }
}

/** `approveInDatabase` on open stores. */
export function approveIn(stores: Stores, place: DatabasePlace, id: string, approval: Approval, by: string, options: { replace?: boolean } = {}): RequestWritten {
  return answerIn(stores, place, id, 'approve', (request) => approvalResponse(id, request, approval, by), options)
}

/** `denyInDatabase` on open stores. */
export function denyIn(stores: Stores, place: DatabasePlace, id: string, reason: string | undefined, by: string, options: { replace?: boolean } = {}): RequestWritten {
  return answerIn(stores, place, id, 'deny', () => ({ approved: false, ...(reason ? { message: reason } : {}), by }), options)
}

/** `answerQuestionInDatabase` on open stores. */
export function answerQuestionIn(stores: Stores, place: DatabasePlace, id: string, answer: unknown, by: string, options: { replace?: boolean } = {}): RequestWritten {
  assertAnswered(id, answer)
  return answerIn(stores, place, id, 'answer', () => ({ answer, by }), options)
}

function assertAnswered(id: string, answer: unknown): void {
  if (answer === undefined) throw new SpindleError('INVALID_OPTIONS', `An answer to thread ${id} needs a value (any JSON value). Nothing was written.`, { details: { threadId: id, field: 'answer' } })
}

/**
 * Leaves the answer `respond` makes to the request thread `id` waits at, checked as the runtime
 * will check it; not over an answer already waiting for a worker unless `replace`.
 */
function answerIn(
  stores: Stores,
  place: DatabasePlace,
  id: string,
  action: 'approve' | 'deny' | 'answer',
  respond: (request: OpenRequest) => unknown,
  options: { replace?: boolean },
): RequestWritten {
  const record = recordIn(stores, id)
  let standing = standingIn(stores, id, record.status)
  // A host told `thread.approval_pending` by the event stream may decide before the worker has
  // stored the request (it follows the suspension's commit): wait for it a moment.
  for (let waited = 0; !standing.open && standing.fileDue && waited < REQUEST_GRACE_MS; waited += 25) {
    Atomics.wait(pause, 0, 0, 25)
    standing = standingIn(stores, id, record.status)
  }
  if (!standing.open) throw notAnswerable(id, stores.root, record.status, standing)
  const response = respond(openRequestOf(id, standing.context, null, Date.now()))
  checkAnswer(id, place.argument, standing, response)
  const { requestId } = standing
  if (!options.replace && stores.inbox.waiting(id, 'approval', requestId)) {
    throw new SpindleError(
      'APPROVAL_ALREADY_ANSWERED',
      `Approval request ${requestId} of thread ${id} is answered already: an answer waits in ${stores.inbox.answerAt(id, requestId)} for the worker running the thread to act on it. ` +
        'Nothing was written; to leave yours in its place, answer again with --replace.',
      { details: { threadId: id, requestId, file: stores.inbox.answerAt(id, requestId) } },
    )
  }
  return { threadId: id, action, file: stores.inbox.leaveRequest(id, 'approval', response, requestId), next: next(id, place) }
}
