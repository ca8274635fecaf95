/**
 * The request inbox of a data directory: request files in the thread folders (see
 * requestFiles.ts), found through the request bell and claimed by renaming, so the CLI, scripts
 * and people with an editor reach threads run by any process on the directory. A cancel or resume
 * request is claimed into `tmp/` under a name that says who claimed it (leftovers.ts), so one a
 * killed runtime never carried out is found there with one listing and taken over. Nothing here is
 * touched through a link: a folder that is no real directory is reported once, as forged input,
 * and its files are left where they are.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError, describeError, isSpindleError } from '../src/base/errors.js'
import { isThreadId } from '../src/base/ids.js'
import { writerGone } from '../src/base/processes.js'
import { writeFileAtomicSync } from './atomicFile.js'
import { claimName, parseClaimName } from './leftovers.js'
import type { DataPaths } from './paths.js'
import { assertRealDirectories, threadDir } from './paths.js'
import { BellReader } from './requestBell.js'
import {
  APPROVALS_DIR,
  CANCEL_FILE,
  ESCALATION_FILE,
  approvalFiles,
  cancelFile,
  claim,
  listApprovals,
  logRequest,
  readRequestJson,
  resumeFile,
  setAside,
  writeRequestFile,
} from './requestFiles.js'
import type { ClaimedRequest, Durability, InboxRequest, RequestInbox, RequestKind } from './types.js'

/** Where a claimed or stray request lies now, which `honour` and `refuse` act on. */
const LIES_AT = Symbol('liesAt')
type Held = InboxRequest & { [LIES_AT]?: string }

export interface FileRequestInboxOptions {
  paths: DataPaths
  durability: Durability
  /** A problem that stopped no request: a forged folder, an unreadable bell. */
  onProblem(error: unknown, threadId?: string): void
}

/** A document the runtime wrote (an approval request, a decision), or null when there is none. */
function storedDocument(file: string, threadId: string): unknown {
  if (!fs.existsSync(file)) return null
  const read = readRequestJson(file)
  if (read.ok) return read.value
  throw new SpindleError('STATE_CORRUPT', `${read.problem}: the runtime wrote it, so it was damaged since. Restore it from a backup, or move it aside (spindle writes a missing request again).`, {
    details: { path: file, threadId },
  })
}

export function createFileRequestInbox(options: FileRequestInboxOptions): RequestInbox {
  const { paths } = options
  const root = paths.root
  const fsync = options.durability === 'fsync'
  const bell = new BellReader(root, { onProblem: (problem) => options.onProblem(problem) })
  /** Folders refused by `folderIsReal` and reported: said once, not at every poll. */
  const forgedFolders = new Set<string>()

  /**
   * Whether the request files in `dir` (a thread folder or its approvals/) may be claimed and read:
   * `dir` and every folder above it inside the data directory are real directories. A symlink put
   * there after the thread's files were opened would have the runtime rename and read files
   * wherever it points; so nothing there is touched, and the link is reported as forged input,
   * once. Checked only where a request file was seen: a poll with none costs nothing more.
   */
  function folderIsReal(dir: string, threadId: string | null): boolean {
    try {
      assertRealDirectories(root, dir)
    } catch (error) {
      const at = isSpindleError(error) && typeof error.details.path === 'string' ? error.details.path : dir
      if (!forgedFolders.has(at)) {
        forgedFolders.add(at)
        options.onProblem(
          new SpindleError('DATA_DIR_INVALID', `Did not claim or read the request files in ${dir}: ${describeError(error).message}`, {
            details: { ...(isSpindleError(error) ? error.details : {}), threadId, dir },
          }),
          threadId ?? undefined,
        )
      }
      return false
    }
    if (forgedFolders.size > 0) for (const at of forgedFolders) if (dir === at || dir.startsWith(at + path.sep)) forgedFolders.delete(at)
    return true
  }

  /** Whether `tmp/` may be claimed into: a real directory (made if missing); a link is reported once. */
  function tmpIsReal(threadId: string): boolean {
    try {
      assertRealDirectories(root, paths.tmp, { create: true })
    } catch (error) {
      if (!forgedFolders.has(paths.tmp)) {
        forgedFolders.add(paths.tmp)
        options.onProblem(
          new SpindleError('DATA_DIR_INVALID', `Did not claim the request files of ${threadId} into ${paths.tmp}: ${describeError(error).message}`, {
            details: { ...(isSpindleError(error) ? error.details : {}), threadId, dir: paths.tmp },
          }),
          threadId,
        )
      }
      return false
    }
    forgedFolders.delete(paths.tmp)
    return true
  }

  /** A request claimed into `claimed`, read; `file` is where it was written, as reports name it. */
  function claimedAt(kind: RequestKind, threadId: string, requestId: string | undefined, file: string, claimed: string): ClaimedRequest {
    const read = readRequestJson(claimed)
    const body = read.ok ? read : { ok: false as const, problem: read.problem.replace(claimed, file) }
    const request: ClaimedRequest & { [LIES_AT]: string } = {
      kind,
      threadId,
      ...(requestId !== undefined ? { requestId } : {}),
      ref: file,
      body,
      [LIES_AT]: claimed,
    }
    return request
  }

  /** The file a request of `kind` is written to. */
  function fileOf(threadId: string, kind: RequestKind, requestId?: string): string {
    if (kind === 'cancel') return cancelFile(paths, threadId)
    if (kind === 'resume') return resumeFile(paths, threadId)
    return approvalFiles(paths, threadId, requestId!).response
  }

  /** Writes a request file where the poll looks for it, and rings the bell. */
  function leave(threadId: string, kind: RequestKind, body: unknown, requestId?: string): string {
    const file = fileOf(threadId, kind, requestId)
    // An answer's folder is made as the request's is (not through a link), in a thread folder
    // that is there: for a thread that has none, the write fails, as for a cancel or a resume.
    if (kind === 'approval' && fs.existsSync(threadDir(paths, threadId))) assertRealDirectories(root, path.dirname(file), { create: true })
    writeRequestFile(paths, threadId, file, body)
    return file
  }

  /** Where a refused request is kept: beside it, under a name that says so. */
  function refusedName(request: InboxRequest): string {
    if (request.kind === 'cancel') return path.join(path.dirname(request.ref), 'cancel.refused.json')
    if (request.kind === 'resume') return path.join(path.dirname(request.ref), 'resume.refused.json')
    return path.join(path.dirname(request.ref), `${request.requestId}.response.rejected.json`)
  }

  return {
    hasApproval(threadId, requestId) {
      const files = approvalFiles(paths, threadId, requestId)
      return fs.existsSync(files.request) || fs.existsSync(files.decision)
    },

    putApprovalRequest(threadId, requestId, request) {
      const files = approvalFiles(paths, threadId, requestId)
      if (fs.existsSync(files.request) || fs.existsSync(files.decision)) return
      // Not mkdir -p: it would follow a linked thread folder and make the folder wherever it points.
      assertRealDirectories(root, files.dir, { create: true })
      writeFileAtomicSync(files.request, `${JSON.stringify(request, null, 2)}\n`, { fsync, under: root })
    },

    putDecision(threadId, requestId, decision) {
      const files = approvalFiles(paths, threadId, requestId)
      if (!fs.existsSync(files.dir)) return
      writeFileAtomicSync(files.decision, `${JSON.stringify(decision, null, 2)}\n`, { fsync, under: root })
    },

    undecided(threadId) {
      const listing = listApprovals(paths, threadId)
      return listing.requests.filter((rid) => !listing.decided.has(rid))
    },

    putEscalation(threadId, escalation) {
      const file = path.join(threadDir(paths, threadId), ESCALATION_FILE)
      writeFileAtomicSync(file, `${JSON.stringify(escalation, null, 2)}\n`, { fsync, under: root })
    },

    answerAt(threadId, requestId) {
      return path.relative(root, approvalFiles(paths, threadId, requestId).response)
    },

    askCancel(threadId, request) {
      return leave(threadId, 'cancel', {
        nonce: request.nonce,
        ...(request.reason !== undefined ? { reason: request.reason } : {}),
        ...(request.by !== undefined ? { by: request.by } : {}),
        requestedAt: new Date().toISOString(),
      })
    },

    leaveRequest: leave,

    changed() {
      return bell.read()
    },

    waiting(threadId, kind, requestId) {
      return fs.existsSync(fileOf(threadId, kind, requestId))
    },

    claim(threadId, kind, requestId) {
      const file = fileOf(threadId, kind, requestId)
      if (!folderIsReal(path.dirname(file), threadId)) return null
      let claimed: string
      if (kind === 'approval') {
        claimed = approvalFiles(paths, threadId, requestId!).taken
        if (!claim(file, claimed)) return null
      } else {
        if (!tmpIsReal(threadId)) return null
        claimed = path.join(paths.tmp, claimName(threadId, kind))
        try {
          if (!claim(file, claimed)) return null
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'EXDEV') throw error
          // The thread folder is on another filesystem than tmp/ (mounted apart): claimed beside
          // it, under the same name (doctor finds it there should its runtime be killed).
          claimed = `${file}${path.basename(claimed).slice(path.basename(claimed).indexOf('.claimed-'))}`
          if (!claim(file, claimed)) return null
        }
      }
      return claimedAt(kind, threadId, requestId, file, claimed)
    },

    abandoned() {
      let names: string[]
      try {
        names = fs.readdirSync(paths.tmp).sort()
      } catch {
        return []
      }
      const found: ClaimedRequest[] = []
      for (const name of names) {
        const left = parseClaimName(name)
        if (!left?.writer || !isThreadId(left.threadId) || !writerGone(left.writer)) continue
        const file = fileOf(left.threadId, left.kind)
        // Set aside there if refused: not through a link.
        if (!folderIsReal(path.dirname(file), left.threadId) || !tmpIsReal(left.threadId)) continue
        // Claimed again, for this process: of two runtimes opening the directory, one takes it over.
        const mine = path.join(paths.tmp, claimName(left.threadId, left.kind))
        if (!claim(path.join(paths.tmp, name), mine)) continue
        found.push(claimedAt(left.kind, left.threadId, undefined, file, mine))
      }
      return found
    },

    honour(request) {
      fs.rmSync((request as Held)[LIES_AT] ?? request.ref, { force: true })
    },

    refuse(request) {
      const at = (request as Held)[LIES_AT] ?? request.ref
      // A cancel is set aside as the request it was; the others only if they can be.
      if (request.kind === 'cancel') return setAside(at, refusedName(request))
      try {
        return setAside(at, refusedName(request))
      } catch {
        return null
      }
    },

    strayCancels(passOver) {
      let names: string[]
      try {
        names = fs.readdirSync(paths.threads)
      } catch {
        return []
      }
      const found: InboxRequest[] = []
      for (const name of names) {
        if (passOver(name)) continue
        const file = path.join(paths.threads, name, CANCEL_FILE)
        if (!fs.existsSync(file) || !folderIsReal(path.join(paths.threads, name), null)) continue
        found.push({ kind: 'cancel', threadId: isThreadId(name) ? name : null, ref: file })
      }
      return found
    },

    strayAnswers(threadId, openRequest) {
      const dir = path.join(threadDir(paths, threadId), APPROVALS_DIR)
      let names: string[]
      try {
        names = fs.readdirSync(dir)
      } catch {
        return []
      }
      const found: Array<InboxRequest & { decided: boolean }> = []
      for (const name of names) {
        if (!name.endsWith('.response.json')) continue
        const rid = name.slice(0, -'.response.json'.length)
        if (rid === openRequest) continue
        const decided = fs.existsSync(path.join(dir, `${rid}.decision.json`))
        // An open request this runtime does not know of (another runtime on the directory woke the
        // thread and it suspended again there): the answer is that runtime's to act on.
        if (!decided && fs.existsSync(path.join(dir, `${rid}.request.json`))) continue
        // Checked before the first file is set aside, not per sweep: the listing costs one readdir as before.
        if (found.length === 0 && !folderIsReal(dir, threadId)) return []
        found.push({ kind: 'approval', threadId, requestId: rid, ref: path.join(dir, name), decided })
      }
      return found
    },

    log(line) {
      return logRequest(root, line)
    },

    approvals(threadId) {
      const listing = listApprovals(paths, threadId)
      const ids = [...new Set([...listing.requests, ...listing.decided])].sort()
      if (ids.length === 0 || !folderIsReal(path.join(threadDir(paths, threadId), APPROVALS_DIR), threadId)) return []
      return ids.map((requestId) => {
        const files = approvalFiles(paths, threadId, requestId)
        return { requestId, request: storedDocument(files.request, threadId), decision: storedDocument(files.decision, threadId) }
      })
    },

    unclaimed(threadId) {
      const found: Array<InboxRequest & { body: ClaimedRequest['body'] }> = []
      const waitingAt = (kind: RequestKind, requestId?: string): void => {
        const file = fileOf(threadId, kind, requestId)
        if (!fs.existsSync(file) || !folderIsReal(path.dirname(file), threadId)) return
        found.push({ kind, threadId, ...(requestId !== undefined ? { requestId } : {}), ref: file, body: readRequestJson(file) })
      }
      waitingAt('cancel')
      waitingAt('resume')
      for (const requestId of listApprovals(paths, threadId).waiting) waitingAt('approval', requestId)
      return found
    },
  }
}
