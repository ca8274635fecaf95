/**
 * What a transcript journal file holds and how journals are read: the header that names its
 * writer (host, pid, boot, start time), the records, and the file identity records carry. Shared
 * by this store's own journal (transcriptJournal.ts), which writes them, and the journals other
 * stores left (foreignJournals.ts), which are read back. Side effects.
 *
 * A record is `<threadId> <inode>-<birth time ns> <offset> <transcript line>`: the exact bytes
 * the thread's file holds at `offset`, so after a power loss the lines a file lost are written
 * back where they were (`repairFromJournal`), and verified by the hash chain before anything is
 * written. The file identity ties a record to the file it was written for: a transcript replaced
 * since (compacted) is never patched with another file's lines, even when the filesystem gives
 * the new file the old one's inode number.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { nanoid } from 'nanoid'
import { isThreadId } from '../src/base/ids.js'
import type { Writer } from '../src/base/processes.js'
import { currentBoot, markedWriter, writerMark } from '../src/base/processes.js'
import { notRegularReason, openRegular, readRange } from './fdio.js'

export const HEADER_KEY = 'spindle-journal'
export const SUFFIX = '.journal'
/** The birth-time probe's files (`probeBirthTimes`): `.birth-probe-<writer mark>-<random>`. */
export const PROBE_PREFIX = '.birth-probe-'
/** A header line (who wrote the file) fits in this. */
export const HEADER_BYTES = 4096
const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0

/** One transcript line as a journal holds it. */
export interface JournalRecord {
  /** The file it was written for: inode and birth time (an inode number alone is soon reused). */
  file: string
  at: number
  line: Buffer
}

/** What one journal file (a store's epoch) holds, per thread. */
export interface JournalFileIndex {
  file: string
  host: string | null
  pid: number | null
  /** The writer's boot (Linux): a pid from another boot is not the writer, whoever has it now. */
  boot: string | null
  /** The writer's start time: a live pid that started at another time is not the writer. */
  start: string | null
  /** Records per thread, in the order they were written. */
  threads: Map<string, JournalRecord[]>
}

/**
 * Whether this filesystem reports real birth times. Without statx (an old kernel, a seccomp
 * filter) Node reports the change time as the birth time, which moves with every append; then
 * records name the inode alone (`<ino>-0`). Probed once per journal directory: a file is created,
 * and its change time moved past its birth (10 ms later: timestamps can be coarse).
 */
const birthTimesWork = new Map<string, boolean>()
function probeBirthTimes(dir: string): boolean {
  let works = birthTimesWork.get(dir)
  if (works !== undefined) return works
  works = false
  try {
    fs.mkdirSync(dir, { recursive: true })
    // Named for this process: one killed while it waits leaves the file, which the next runtime
    // removes once it can tell this process is gone (see leftovers.ts).
    const probe = path.join(dir, `${PROBE_PREFIX}${writerMark()}-${nanoid(6)}`)
    const fd = fs.openSync(probe, 'wx')
    try {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10)
      fs.futimesSync(fd, 1, 1)
      const stat = fs.fstatSync(fd, { bigint: true })
      works = stat.birthtimeNs !== 0n && stat.birthtimeNs !== stat.ctimeNs
    } finally {
      fs.closeSync(fd)
      fs.unlinkSync(probe)
    }
  } catch {
    // Nothing to probe with: the inode alone it is.
  }
  birthTimesWork.set(dir, works)
  return works
}

/** The identity a writer's records give a transcript file: inode and birth time, or the inode alone. */
export function recordIdentity(fd: number, journalDir: string): string {
  const stat = fs.fstatSync(fd, { bigint: true })
  return probeBirthTimes(journalDir) ? `${stat.ino}-${stat.birthtimeNs}` : `${stat.ino}-0`
}

/** Whether a record was written for the open file `stat` describes (either form of identity). */
export function recordMatcher(fd: number): (r: JournalRecord) => boolean {
  const stat = fs.fstatSync(fd, { bigint: true })
  const full = `${stat.ino}-${stat.birthtimeNs}`
  const inodeOnly = `${stat.ino}-0`
  return (r) => r.file === full || r.file === inodeOnly
}

/**
 * Who wrote a journal: its header says (host, pid, boot, start time); a file without one — a process
 * killed between creating it and writing its header — names its writer in its name (`writerMark`).
 * Unknown (never gone) when neither says.
 */
export function writerOf(index: JournalFileIndex): Writer {
  if (index.host !== null || index.pid !== null) {
    const boot = currentBoot()
    return {
      pid: index.pid,
      start: index.start,
      thisHost: index.host === os.hostname(),
      otherBoot: index.boot !== null && boot !== null ? index.boot !== boot : null,
    }
  }
  return markedWriter(path.basename(index.file)) ?? { pid: null, start: null, thisHost: false, otherBoot: null }
}

/**
 * Parses a journal file. A last record without its newline is a write a crash cut short: it was
 * never vouched for, so it is dropped. A record that does not parse is skipped (its thread's
 * chain check at repair time refuses whatever would depend on it).
 */
export function parseJournal(file: string, bytes: Buffer): JournalFileIndex {
  const index: JournalFileIndex = { file, host: null, pid: null, boot: null, start: null, threads: new Map() }
  let offset = 0
  let first = true
  while (offset < bytes.length) {
    const newline = bytes.indexOf(0x0a, offset)
    if (newline === -1) break
    const record = bytes.subarray(offset, newline + 1)
    offset = newline + 1
    if (first) {
      first = false
      try {
        const header = JSON.parse(record.toString('utf8')) as Record<string, unknown>
        if (header[HEADER_KEY] === 1) {
          index.host = typeof header.host === 'string' ? header.host : null
          index.pid = typeof header.pid === 'number' ? header.pid : null
          index.boot = typeof header.boot === 'string' ? header.boot : null
          index.start = typeof header.start === 'string' ? header.start : null
          continue
        }
      } catch {
        // Not a header: read as a record below.
      }
    }
    const a = record.indexOf(0x20)
    const b = a === -1 ? -1 : record.indexOf(0x20, a + 1)
    const c = b === -1 ? -1 : record.indexOf(0x20, b + 1)
    if (c === -1) continue
    const threadId = record.subarray(0, a).toString('latin1')
    const identity = record.subarray(a + 1, b).toString('latin1')
    const at = Number(record.subarray(b + 1, c).toString('latin1'))
    // A record naming no thread id (a forged or damaged file) could only point outside the data.
    if (!isThreadId(threadId) || !/^\d+-\d+$/.test(identity) || !Number.isSafeInteger(at) || at < 0) continue
    let records = index.threads.get(threadId)
    if (!records) index.threads.set(threadId, (records = []))
    records.push({ file: identity, at, line: Buffer.from(record.subarray(c + 1)) })
  }
  return index
}

/** An entry of the journal directory that could not be read as a journal (a directory, no permission …). */
export interface SkippedJournal {
  file: string
  reason: string
}

/**
 * Every journal in `dir` except the ones whose names start with `own`, read now; with `head`,
 * only its first bytes (enough for the header: who wrote it). An entry that cannot be read is
 * passed to `skip` and left alone: one stray entry must not stop every thread from opening.
 */
export function readJournals(dir: string, own: string, head?: number, skip?: (skipped: SkippedJournal) => void): JournalFileIndex[] {
  let names: string[]
  try {
    names = fs.readdirSync(dir)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return []
    skip?.({ file: dir, reason: `the journal directory cannot be read (${code ?? (error as Error).message})` })
    return []
  }
  const indexes: JournalFileIndex[] = []
  for (const name of names.sort()) {
    if (!name.endsWith(SUFFIX) || name.startsWith(own)) continue
    const file = path.join(dir, name)
    let bytes: Buffer
    try {
      // A regular file only: a FIFO put here would block the open of the whole directory, a link
      // would have its target's lines written into thread files.
      const { fd, size } = openRegular(file, fs.constants.O_RDONLY | NOFOLLOW)
      try {
        bytes = readRange(fd, 0, head === undefined ? size : head)
      } finally {
        fs.closeSync(fd)
      }
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      // Deleted by its owner between readdir and here: it had nothing left to give.
      if (code === 'ENOENT') continue
      const found = notRegularReason(error)
      skip?.({ file, reason: found !== null ? `it is ${found}, not a journal file` : `it cannot be read (${code ?? (error as Error).message})` })
      continue
    }
    indexes.push(parseJournal(file, bytes))
  }
  return indexes
}

export function recordsByThread(indexes: readonly JournalFileIndex[]): Map<string, JournalRecord[]> {
  const all = new Map<string, JournalRecord[]>()
  for (const index of indexes) {
    for (const [threadId, records] of index.threads) {
      const list = all.get(threadId)
      if (list) list.push(...records)
      else all.set(threadId, [...records])
    }
  }
  return all
}
