/**
 * The request files of a data directory, as bytes on disk: where each lives, claiming one by
 * renaming it (so two runtimes never act on one request), setting a refused one aside, reading one
 * safely, and the request log. What a request says is checked above this (src/requests.ts):
 *
 *   threads/<id>/cancel.requested                   { nonce, reason?, by? }
 *   threads/<id>/resume.requested                   { nonce, by? }
 *   threads/<id>/approvals/<rid>.request.json       written by the runtime when a limit is hit
 *   threads/<id>/approvals/<rid>.response.json      { approved, limits?, message?, by? }
 *   threads/<id>/approvals/<rid>.response.taken.json     a response a runtime claimed and acts on
 *   threads/<id>/approvals/<rid>.response.rejected.json  a response it rejected (-2, -3 … after the first)
 *   threads/<id>/approvals/<rid>.decision.json      written by the runtime once it has acted
 *   threads/<id>/escalation.request.json            written when recovery escalation gives up
 *   requests.log.jsonl                              every request, honoured or refused
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError } from '../src/base/errors.js'
import { writeFileAtomicSync } from './atomicFile.js'
import { FileTooLarge, NotRegularFile, appendRegular, notRegularReason, openRegular, readSmallRegular } from './fdio.js'
import type { DataPaths } from './paths.js'
import { threadDir } from './paths.js'
import { ringBell } from './requestBell.js'

export const CANCEL_FILE = 'cancel.requested'
/** A request from another process to carry on a thread suspended for a reason other than a limit. */
export const RESUME_FILE = 'resume.requested'
export const APPROVALS_DIR = 'approvals'
export const REQUEST_LOG = 'requests.log.jsonl'
export const ESCALATION_FILE = 'escalation.request.json'


export function cancelFile(paths: DataPaths, id: string): string {
  return path.join(threadDir(paths, id), CANCEL_FILE)
}


/** Throws INVALID_OPTIONS for what cannot be an approval request id: ids become file names here, and keys in every backend. */
export function assertRequestId(requestId: string): void {
  if (!/^[A-Za-z0-9_.-]{1,128}$/.test(requestId) || requestId.includes('..')) {
    throw new SpindleError('INVALID_OPTIONS', `"${requestId}" is not an approval request id.`, { details: { requestId } })
  }
}

export function approvalFiles(paths: DataPaths, id: string, requestId: string) {
  assertRequestId(requestId)
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


/** The files of a thread's approvals folder, by what they are; each list in name order. */
export interface ApprovalListing {
  /** Ids of the requests written (`<rid>.request.json`). */
  requests: string[]
  /** Ids of the requests decided (`<rid>.decision.json`). */
  decided: Set<string>
  /** Ids answered by a response waiting to be claimed (`<rid>.response.json`). */
  waiting: string[]
  /** Ids answered by a response a runtime claimed (`<rid>.response.taken.json`). */
  taken: string[]
  /** Responses set aside as rejected: the request they answered, and the file's name. */
  rejected: Array<{ requestId: string; name: string }>
}

const REJECTED = /^(.+)\.response\.rejected(?:-(\d+))?\.json$/

/**
 * What a thread's approvals folder holds, from one listing of it (empty when there is none). Names
 * that are no request id (a file someone put there) are left out.
 */
export function listApprovals(paths: DataPaths, id: string): ApprovalListing {
  const listing: ApprovalListing = { requests: [], decided: new Set(), waiting: [], taken: [], rejected: [] }
  const dir = path.join(threadDir(paths, id), APPROVALS_DIR)
  // Most threads never had an approval request: a failed readdir builds an error with its stack,
  // which for 10,000 threads rehydrated at once costs a third of a second; a stat does not.
  if (!fs.existsSync(dir)) return listing
  let names: string[]
  try {
    names = fs.readdirSync(dir).sort()
  } catch {
    return listing
  }
  const isId = (rid: string): boolean => /^[A-Za-z0-9_.-]{1,128}$/.test(rid) && !rid.includes('..')
  const rejected: Array<{ requestId: string; name: string; n: number }> = []
  for (const name of names) {
    const found = REJECTED.exec(name)
    if (found) {
      if (isId(found[1]!)) rejected.push({ requestId: found[1]!, name, n: Number(found[2] ?? 1) })
      continue
    }
    for (const [suffix, list] of [
      ['.request.json', listing.requests],
      ['.response.json', listing.waiting],
      ['.response.taken.json', listing.taken],
    ] as const) {
      if (name.endsWith(suffix) && isId(name.slice(0, -suffix.length))) list.push(name.slice(0, -suffix.length))
    }
    if (name.endsWith('.decision.json') && isId(name.slice(0, -'.decision.json'.length))) listing.decided.add(name.slice(0, -'.decision.json'.length))
  }
  // `-10` sorts before `-2` by name: set aside in the order of their numbers.
  listing.rejected = rejected.sort((a, b) => a.requestId.localeCompare(b.requestId) || a.n - b.n).map(({ requestId, name }) => ({ requestId, name }))
  return listing
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


export interface RequestLogEntry {
  at: string
  kind: 'cancel' | 'approval' | 'resume'
  threadId: string | null
  file: string
  outcome: 'honoured' | 'refused'
  reason: string
  /** Where a refused request was set aside (null: it could not be moved); absent in logs of older versions. */
  keptAs?: string | null
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


export function resumeFile(paths: DataPaths, id: string): string {
  return path.join(threadDir(paths, id), RESUME_FILE)
}

/** What reading a request file gave: its JSON, or why it cannot be read. */
export type RequestBody = { ok: true; value: unknown } | { ok: false; problem: string }

/** Reads a request file's JSON; a problem says what is wrong with it, naming the file. */
export function readRequestJson(file: string): RequestBody {
  let text: string
  try {
    text = readRequestText(file)
  } catch (error) {
    return { ok: false, problem: `${file} cannot be read (${(error as Error).message})` }
  }
  try {
    return { ok: true, value: JSON.parse(text) as unknown }
  } catch (error) {
    return { ok: false, problem: `${file} is not valid JSON (${(error as Error).message})` }
  }
}

/**
 * Writes a request file where the runtime that watches the thread looks for it, durably (it is a
 * person's decision), then rings the bell so it is found at the next poll.
 */
export function writeRequestFile(paths: DataPaths, threadId: string, file: string, request: unknown): void {
  writeFileAtomicSync(file, `${JSON.stringify(request, null, 2)}\n`, { fsync: true, under: paths.root })
  ringBell(paths.root, threadId)
}
