/**
 * What a data directory's files say about one thread's approvals, read without a runtime: whether
 * the thread waits at an approval request now, and the answers a runtime rejected. A request
 * counts as open only while its thread is suspended at it — the registry says suspended, and its
 * state.json, which its transcript has not moved past, names the request — not merely because
 * it has no decision file: a process killed between recording a decision and writing the file
 * leaves a request without one after its thread has moved on.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { ThreadContext } from '../../machines/threadContext.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import type { DataPaths } from '../../persistence/paths.js'
import { TRANSCRIPT_FILE, threadFile } from '../../persistence/paths.js'
import type { RequestLogEntry } from '../../persistence/requestFiles.js'
import { APPROVALS_DIR, approvalFiles, listApprovals, readRequestJson, readRequestLog } from '../../persistence/requestFiles.js'
import type { ThreadStatus } from '../../persistence/types.js'
import { threadDir } from '../../persistence/paths.js'
import type { SpindleErrorCode } from '../base/errors.js'
import { describeError } from '../base/errors.js'
import { openRequestId } from './approvalDecision.js'

/** Where a thread stands towards approval: waiting at request `requestId`, or why it is not. */
export type ApprovalStanding =
  | { open: true; requestId: string; context: ThreadContext }
  | {
      open: false
      /** THREAD_NOT_SUSPENDED: it is not suspended (any more); NO_PENDING_APPROVAL: suspended, but at no request; else its state.json's damage. */
      code: SpindleErrorCode
      /** Why, to follow "Thread <id> …": "is completed, not suspended". */
      /** The thread waits at a request whose file its runtime has not written yet: it will, in a moment. */
      fileDue?: true
      why: string
    }

/**
 * Where thread `id`, whose registry row says `status`, stands: whether it is suspended at an
 * approval request whose request file is written and not decided. Reads its state.json and the
 * size of its transcript; never throws for damage (the standing's code says what is wrong).
 */
export function approvalStanding(paths: DataPaths, id: string, status: ThreadStatus): ApprovalStanding {
  if (status !== 'suspended') return { open: false, code: 'THREAD_NOT_SUSPENDED', why: `is ${status}, not suspended` }
  let envelope
  try {
    envelope = createFileCheckpointStore({ paths, durability: 'process' }).load(id)
  } catch (error) {
    const { code, message } = describeError(error)
    return { open: false, code: code as SpindleErrorCode, why: `has a state.json that cannot be read (${message})` }
  }
  if (!envelope || envelope.status !== 'suspended') {
    return {
      open: false,
      code: 'THREAD_NOT_SUSPENDED',
      why: `is ${envelope ? envelope.status : 'without a state.json'} by its files, though the registry still says suspended: a runtime woke it and has not brought the registry in line`,
    }
  }
  let bytes: number | null = null
  try {
    bytes = fs.statSync(threadFile(paths, id, TRANSCRIPT_FILE)).size
  } catch {}
  // As recovery tells a suspended thread that moved on: its transcript holds more than state.json covers.
  if (bytes !== null && bytes > envelope.transcript.bytes) {
    return {
      open: false,
      code: 'THREAD_NOT_SUSPENDED',
      why: 'is no longer suspended: its transcript records a decision after its suspension (a runtime woke it; if that process died, the next runtime to open the directory carries the thread on)',
    }
  }
  const context = (envelope.snapshot as { context: ThreadContext }).context
  const requestId = openRequestId(context)
  if (requestId === null) {
    return { open: false, code: 'NO_PENDING_APPROVAL', why: `is suspended ${context.suspendReason === 'limit' ? 'at a limit without an approval request' : `for ${context.suspendReason ?? 'an unknown reason'}, not at an approval request`}` }
  }
  let files: ReturnType<typeof approvalFiles>
  try {
    files = approvalFiles(paths, id, requestId)
  } catch {
    return { open: false, code: 'NO_PENDING_APPROVAL', why: `waits at "${requestId}", which is no approval request id` }
  }
  if (fs.existsSync(files.decision)) return { open: false, code: 'NO_PENDING_APPROVAL', why: `waits at request ${requestId}, which is decided already` }
  if (!fs.existsSync(files.request)) {
    return { open: false, code: 'NO_PENDING_APPROVAL', why: `waits at request ${requestId}, whose request file is not written yet (the runtime on the directory writes it)`, fileDue: true }
  }
  return { open: true, requestId, context }
}

/** An approval answer a runtime set aside as rejected. */
export interface RejectedAnswer {
  requestId: string
  /** Where the answer is kept. */
  file: string
  /** What it said, as far as it can be read: `approved` null when it said nothing readable. */
  answer: { approved: boolean | null; limits: Record<string, unknown> | null; by: string | null; message: string | null } | null
  /** Why it cannot be read, when it cannot. */
  problem: string | null
  /** Why the runtime rejected it, from requests.log.jsonl (null: the log does not say). */
  reason: string | null
  /** When it was rejected (null: the log does not say). */
  at: string | null
}

/**
 * The answers to thread `id`'s approval requests that a runtime rejected, in the order they were
 * set aside, each with the reason requests.log.jsonl gives. A log line names where it kept the
 * answer; lines of older versions do not, and are paired with the files in order.
 * @param log the directory's request log, when the caller has read it already.
 */
export function rejectedAnswers(paths: DataPaths, id: string, log?: readonly RequestLogEntry[]): RejectedAnswer[] {
  const rejected = listApprovals(paths, id).rejected
  if (rejected.length === 0) return []
  const lines = (log ?? readRequestLog(paths.root)).filter((l) => l.kind === 'approval' && l.outcome === 'refused' && l.threadId === id)
  const byKept = new Map(lines.filter((l) => typeof l.keptAs === 'string').map((l) => [path.basename(l.keptAs!), l]))
  const unpaired = new Map<string, RequestLogEntry[]>()
  for (const line of lines) {
    if (line.keptAs !== undefined) continue
    const name = path.basename(line.file)
    unpaired.set(name, [...(unpaired.get(name) ?? []), line])
  }
  const dir = path.join(threadDir(paths, id), APPROVALS_DIR)
  return rejected.map(({ requestId, name }) => {
    const file = path.join(dir, name)
    const line = byKept.get(name) ?? unpaired.get(`${requestId}.response.json`)?.shift() ?? null
    const read = readRequestJson(file)
    const body = read.ok && read.value !== null && typeof read.value === 'object' ? (read.value as Record<string, unknown>) : null
    const limits = body?.limits ?? body?.new_limits
    return {
      requestId,
      file,
      answer: body
        ? {
            approved: typeof body.approved === 'boolean' ? body.approved : null,
            limits: limits !== null && typeof limits === 'object' ? (limits as Record<string, unknown>) : null,
            by: typeof body.by === 'string' ? body.by : null,
            message: typeof body.message === 'string' ? body.message : null,
          }
        : null,
      problem: read.ok ? (body ? null : `${file} holds no JSON object`) : read.problem,
      reason: line?.reason ?? null,
      at: line?.at ?? null,
    }
  })
}

/** A rejected answer in a few words: "approve (turns 1) by ada", "an unreadable answer". */
export function describeAnswer(answer: RejectedAnswer['answer']): string {
  if (!answer) return 'an unreadable answer'
  if (answer.approved === null) return 'an answer that says neither approve nor deny'
  const limits = answer.limits ? ` (${Object.entries(answer.limits).map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(', ')})` : ''
  return `${answer.approved ? 'approve' : 'deny'}${limits}${answer.by ? ` by ${answer.by}` : ''}`
}
