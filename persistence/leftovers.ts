/**
 * What a process killed at an unlucky moment leaves in a data directory, found and judged by who
 * left it. Every such file names its writer (`writerMark`, src/base/processes.ts: pid, start time,
 * host and boot), since a kill can come before anything is written in it:
 *
 *   tmp/<file>.tmp-<mark>-<n>-<random>           an atomic write killed before its rename (atomicFile.ts)
 *   tmp/<thread>.<request file>.claimed-<mark>    a cancel or resume request claimed by a runtime killed before it
 *                                                 carried it out (fileRequestInbox.ts takes it over)
 *   journal/<mark>-<random>.<epoch>.journal      an epoch file without its header: killed between creating it and
 *                                                 writing the header (transcriptJournal.ts; foreignJournals.ts settles it)
 *   journal/.birth-probe-<mark>-<random>         the birth-time probe, killed while it waited (journalFiles.ts)
 *   requests.bell.<mark>.<ms>.old | .not-a-file  a bell set aside, killed before it was removed (requestBell.ts)
 *
 * A file is removed only when its writer is certainly gone (`writerGone`): never a live process's,
 * never one of another host's that may be alive. Files of older versions, whose names give a pid
 * but no host, are only reported (by `spindle doctor`), as is a temp file beside its target (its
 * folder on another filesystem than `tmp/`). Side effects.
 *
 * Not here: the checkpoint store's `state.json.tmp` (a fixed name in the thread's folder), which
 * the next checkpoint of its thread makes anew and renames; a kill before its rename leaves the
 * registry behind the transcript, so recovery writes that checkpoint. Nor files kept on purpose,
 * as evidence: `transcript.jsonl.torn-*`, `.pre-compact-*`, a rejected or claimed approval answer.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { isThreadId } from '../src/base/ids.js'
import type { Writer } from '../src/base/processes.js'
import { markedWriter, writerGone, writerMark } from '../src/base/processes.js'
import { TEMP_INFIX } from './atomicFile.js'
import { HEADER_BYTES, PROBE_PREFIX, readJournals, writerOf } from './journalFiles.js'
import type { DataPaths } from './paths.js'
import { APPROVALS_DIR, CANCEL_FILE, RESUME_FILE } from './requestFiles.js'
import { BELL_FILE } from './requestBell.js'

/** What a leftover is, by where it lies and what it was for. */
export type LeftoverKind = 'temp' | 'claim' | 'journal' | 'probe' | 'bell'

export interface Leftover {
  file: string
  kind: LeftoverKind
  /** What it is, in words, for `spindle doctor`. */
  what: string
  /** The thread it was for, where it says (a claimed request, a temp file in a thread folder). */
  threadId: string | null
  /** Its writer's pid, where its name gives one. */
  pid: number | null
  /**
   * Its writer: gone for good (a runtime opening the directory deals with the file), alive (a
   * write under way), or unknown (another host's, or named by an older version without a host).
   */
  writer: 'gone' | 'alive' | 'unknown'
}

/** A request a runtime claimed, as its file in `tmp/` says: which thread, which request, who claimed it. */
export interface ClaimName {
  threadId: string
  kind: 'cancel' | 'resume'
  writer: Writer | null
}

const CLAIM_INFIX = '.claimed-'
const CLAIM = /^([A-Za-z0-9_-]{1,128})\.(cancel\.requested|resume\.requested)\.claimed-(.+)$/

/** The name in `tmp/` of a request of `threadId` claimed by this process: unique per claim. */
export function claimName(threadId: string, kind: 'cancel' | 'resume'): string {
  return `${threadId}.${kind === 'cancel' ? CANCEL_FILE : RESUME_FILE}${CLAIM_INFIX}${writerMark()}-${randomBytes(3).toString('hex')}`
}

/** What a name in `tmp/` says of a claimed request, or null when it names none. */
export function parseClaimName(name: string): ClaimName | null {
  const found = CLAIM.exec(name)
  // A name no thread can have is none of spindle's: left alone, and unreported.
  if (!found || !isThreadId(found[1])) return null
  return { threadId: found[1]!, kind: found[2] === CANCEL_FILE ? 'cancel' : 'resume', writer: markedWriter(found[3]!) }
}

function judge(writer: Writer | null): Leftover['writer'] {
  if (!writer) return 'unknown'
  if (writerGone(writer)) return 'gone'
  return writer.thisHost ? 'alive' : 'unknown'
}

/** The pid a name gives after `prefix`: from a writer's mark, or the number an older version put there. */
function pidIn(rest: string): number | null {
  const found = /^(\d+)[-.]/.exec(rest)
  return found ? Number(found[1]) : null
}

function list(dir: string): string[] {
  try {
    return fs.readdirSync(dir).sort()
  } catch {
    return []
  }
}

/** Temp files of atomic writes and claimed requests in `tmp/`. */
function tmpLeftovers(paths: DataPaths): Leftover[] {
  const found: Leftover[] = []
  for (const name of list(paths.tmp)) {
    const file = path.join(paths.tmp, name)
    const claim = parseClaimName(name)
    if (claim) {
      found.push({
        file,
        kind: 'claim',
        what: `a ${claim.kind} request for ${claim.threadId} that a runtime claimed and had not carried out when it stopped`,
        threadId: claim.threadId,
        pid: claim.writer?.pid ?? null,
        writer: judge(claim.writer),
      })
      continue
    }
    const at = name.lastIndexOf(TEMP_INFIX)
    if (at === -1) continue
    const writer = markedWriter(name.slice(at + TEMP_INFIX.length))
    found.push({
      file,
      kind: 'temp',
      what: `the temp file of a write of ${name.slice(0, at)}, whose process stopped before renaming it into place`,
      threadId: null,
      pid: writer?.pid ?? null,
      writer: judge(writer),
    })
  }
  return found
}

/** Journal epochs without a header in `journal/`: one read of each journal's head. */
function emptyJournals(paths: DataPaths): Leftover[] {
  const found: Leftover[] = []
  for (const index of readJournals(paths.journal, '\0', HEADER_BYTES)) {
    // A header, or a record: a journal that vouches for something (foreignJournals.ts).
    if (index.host !== null || index.pid !== null || index.threads.size > 0) continue
    const writer = writerOf(index)
    found.push({
      file: index.file,
      kind: 'journal',
      what: 'a transcript journal file without a header, which holds nothing: its process was killed between creating it and writing the header',
      threadId: null,
      pid: writer.pid ?? pidIn(path.basename(index.file)),
      writer: writer.pid === null ? 'unknown' : judge(writer),
    })
  }
  return found
}

/** Birth-time probes in `journal/`. */
function probes(paths: DataPaths): Leftover[] {
  const found: Leftover[] = []
  for (const name of list(paths.journal)) {
    if (!name.startsWith(PROBE_PREFIX)) continue
    const writer = markedWriter(name.slice(PROBE_PREFIX.length))
    found.push({
      file: path.join(paths.journal, name),
      kind: 'probe',
      what: "the transcript journal's probe of file birth times, whose process was killed while it probed",
      threadId: null,
      pid: writer?.pid ?? pidIn(name.slice(PROBE_PREFIX.length)),
      writer: judge(writer),
    })
  }
  return found
}

/** Request bells set aside (rotated, or a non-file moved away) and not removed. */
function bellLeftovers(paths: DataPaths): Leftover[] {
  const found: Leftover[] = []
  const prefix = `${BELL_FILE}.`
  for (const name of list(paths.root)) {
    if (!name.startsWith(prefix) || !(name.endsWith('.old') || name.endsWith('.not-a-file'))) continue
    const rest = name.slice(prefix.length)
    const writer = markedWriter(rest)
    found.push({
      file: path.join(paths.root, name),
      kind: 'bell',
      what: 'a request bell set aside, whose process stopped before removing it (every request in it is found without it)',
      threadId: null,
      pid: writer?.pid ?? pidIn(rest),
      writer: judge(writer),
    })
  }
  return found
}

/** What stopped processes left in `tmp/`, `journal/` and the root of the data directory. Reads only. */
export function findLeftovers(paths: DataPaths): Leftover[] {
  return [...tmpLeftovers(paths), ...emptyJournals(paths), ...probes(paths), ...bellLeftovers(paths)]
}

/** A claim in a thread folder: `<request>.<pid>.claimed` (older versions), `<request>.claimed-<mark>` (tmp/ on another filesystem). */
const OLD_CLAIM = /^(cancel\.requested|resume\.requested)\.(\d+)\.claimed$/
const CLAIM_BESIDE = /^(cancel\.requested|resume\.requested)\.claimed-(.+)$/

/**
 * What a thread's folder (and its approvals/) holds that a stopped process left: temp files of
 * atomic writes made beside their file (by older versions, or with `tmp/` on another filesystem)
 * and requests claimed there by older versions. For `spindle doctor`; reads only.
 */
export function threadFolderLeftovers(folder: string, threadId: string): Leftover[] {
  const found: Leftover[] = []
  for (const dir of [folder, path.join(folder, APPROVALS_DIR)]) {
    for (const name of list(dir)) {
      const file = path.join(dir, name)
      const old = OLD_CLAIM.exec(name)
      if (old) {
        found.push({
          file,
          kind: 'claim',
          what: `a ${old[1] === CANCEL_FILE ? 'cancel' : 'resume'} request for ${threadId} that a runtime of an older version claimed and had not carried out when it stopped`,
          threadId,
          pid: Number(old[2]),
          writer: 'unknown',
        })
        continue
      }
      const beside = CLAIM_BESIDE.exec(name)
      if (beside) {
        const writer = markedWriter(beside[2]!)
        const judged = judge(writer)
        if (judged === 'alive') continue
        found.push({
          file,
          kind: 'claim',
          what: `a ${beside[1] === CANCEL_FILE ? 'cancel' : 'resume'} request for ${threadId} that a runtime claimed and had not carried out when it stopped`,
          threadId,
          pid: writer?.pid ?? null,
          writer: judged,
        })
        continue
      }
      const at = name.lastIndexOf(TEMP_INFIX)
      if (at <= 0) continue
      const rest = name.slice(at + TEMP_INFIX.length)
      const writer = markedWriter(rest)
      const judged = judge(writer)
      if (judged === 'alive') continue
      found.push({
        file,
        kind: 'temp',
        what: `the temp file of a write of ${name.slice(0, at)}, whose process stopped before renaming it into place`,
        threadId,
        pid: writer?.pid ?? pidIn(rest),
        writer: judged,
      })
    }
  }
  return found
}

/**
 * Removes the leftovers of writers certainly gone that nothing else deals with: temp files,
 * probes and set-aside bells (claimed requests are taken over by the request inbox, journals
 * settled by the transcript store). Returns the files removed; one that cannot be removed stays
 * (`spindle doctor` names it).
 */
export function removeLeftovers(paths: DataPaths): string[] {
  const removed: string[] = []
  // Not the journals: reading their heads is the transcript store's job, once, when it opens.
  for (const leftover of [...tmpLeftovers(paths), ...probes(paths), ...bellLeftovers(paths)]) {
    if (leftover.writer !== 'gone' || leftover.kind === 'claim') continue
    try {
      // unlink acts on the entry, never on what a link there points at; a directory (something
      // planted at a bell's place, moved aside) is left for a person.
      fs.unlinkSync(leftover.file)
      removed.push(leftover.file)
    } catch {
      // Gone already (another runtime opening the directory), or not removable: doctor names it.
    }
  }
  return removed
}
