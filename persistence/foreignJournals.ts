/**
 * The journals other transcript stores left (a process that crashed, or lost power): what they
 * hold that thread files lack is written back into those files (`repairFromJournal`, when a
 * thread is opened, or `ForeignJournals.settle` for a thread no runtime will open), and a journal
 * is deleted once its writer is gone and every thread it names durably holds its lines. Offline
 * commands ask `journalLag` / `refuseIfBehindJournal` first. Apart from this store's own journal
 * (transcriptJournal.ts) because it is recovery: read at open and settle, never on the write path.
 * Side effects.
 */
import fs from 'node:fs'
import path from 'node:path'
import { writerGone } from '../src/base/processes.js'
import { fsyncDir } from './atomicFile.js'
import { fdatasync, notRegularReason, openRegular, readRange } from './fdio.js'
import { parseTranscriptBytes } from './transcriptLines.js'
import { SpindleError } from '../src/base/errors.js'
import type { DataPaths } from './paths.js'
import { STATE_FILE, threadFile, TRANSCRIPT_FILE } from './paths.js'
import { EMPTY_POSITION } from './types.js'
import type { TranscriptPosition } from './types.js'
import type { JournalFileIndex, JournalRecord, SkippedJournal } from './journalFiles.js'
import { HEADER_BYTES, readJournals, recordMatcher, recordsByThread, writerOf } from './journalFiles.js'

const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0

/** The journals other stores left in `dir`: what a power loss may have taken from thread files. */
export class ForeignJournals {
  private files: JournalFileIndex[]
  private byThread: Map<string, JournalRecord[]>

  /** Entries already reported as unreadable: each is reported once. */
  private readonly skipped = new Set<string>()

  constructor(
    private readonly dir: string,
    private readonly own: string,
    private readonly onSkip?: (skipped: SkippedJournal) => void,
  ) {
    this.files = readJournals(dir, own, undefined, this.skip)
    this.byThread = recordsByThread(this.files)
  }

  private readonly skip = (skipped: SkippedJournal): void => {
    if (this.skipped.has(skipped.file)) return
    this.skipped.add(skipped.file)
    this.onSkip?.(skipped)
  }

  records(threadId: string): JournalRecord[] | undefined {
    return this.byThread.get(threadId)
  }

  /**
   * Deletes every journal whose writer is gone once each thread it names holds all its lines,
   * durably: the thread's file is fdatasynced first, since a process that crashed may have left
   * them in the page cache only. The journals are read again first: one whose writer died after
   * this store first read it holds more than it did then. A thread without a state.json was never
   * acknowledged, and a transcript replaced since (another file) owes the journal nothing; a
   * thread whose file lacks lines (its owner has not recovered it yet) keeps the journal.
   */
  async settle(
    transcriptOf: (threadId: string) => string,
    /** Writes a thread's lines back now (a stopped thread no runtime will open); true if it did. */
    writeBack: (threadId: string, records: JournalRecord[]) => boolean = () => false,
  ): Promise<{ removed: string[]; kept: string[] }> {
    // Liveness first, then the read: a writer found dead has written all it ever will.
    const gone = new Set(readJournals(this.dir, this.own, HEADER_BYTES, this.skip).filter((index) => writerGone(writerOf(index))).map((index) => index.file))
    this.files = readJournals(this.dir, this.own, undefined, this.skip)
    this.byThread = recordsByThread(this.files)
    const removed: string[] = []
    const kept: string[] = []
    const settled = async (id: string, records: JournalRecord[]): Promise<boolean> =>
      (await holds(transcriptOf(id), records)) || (writeBack(id, this.byThread.get(id) ?? records) && (await holds(transcriptOf(id), records)))
    for (const index of this.files) {
      const dead = gone.has(index.file)
      const checks = dead ? await Promise.all([...index.threads].map(([id, records]) => settled(id, records))) : []
      if (dead && checks.every(Boolean)) {
        try {
          fs.unlinkSync(index.file)
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
        }
        removed.push(index.file)
      } else {
        kept.push(index.file)
      }
    }
    if (removed.length > 0) {
      await fsyncDir(this.dir)
      const left = new Set(kept)
      this.files = this.files.filter((index) => left.has(index.file))
      this.byThread = recordsByThread(this.files)
    }
    return { removed, kept }
  }
}

/** Whether the folder of `file` is a real directory, or missing (then so is the file); not a link. */
function inRealFolder(file: string): boolean {
  const stat = fs.lstatSync(path.dirname(file), { throwIfNoEntry: false })
  return stat === undefined || stat.isDirectory()
}

/** Whether `file` durably holds every one of `records` (see `ForeignJournals.settle`). */
async function holds(file: string, records: JournalRecord[]): Promise<boolean> {
  // Nothing is written back through a linked thread folder (or a link at the file's name): the
  // journal keeps the lines, and the thread is named when it is opened or read.
  if (!inRealFolder(file)) return false
  let fd: number
  try {
    // Read-write, not appending: the bytes are written again where they are (see below).
    fd = openRegular(file, fs.constants.O_RDWR | NOFOLLOW).fd
  } catch (error) {
    if (notRegularReason(error) === 'a symbolic link') return false
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    return !fs.existsSync(path.join(path.dirname(file), STATE_FILE))
  }
  try {
    if (!holdsAll(fd, records)) return false
    // The same bytes written again, so the fdatasync below flushes them whatever their pages'
    // state: a writer that saw an fdatasync fail may have left them clean in memory and missing
    // on disk.
    const mine = recordMatcher(fd)
    for (const r of records) if (mine(r)) fs.writeSync(fd, r.line, 0, r.line.length, r.at)
    await fdatasync(fd)
    return true
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * Whether the open file holds, where each says, every record written for it (true when none
 * were). Every one, not the last: a power loss can lose a block in the middle and keep the end.
 */
function holdsAll(fd: number, records: readonly JournalRecord[]): boolean {
  const mine = recordMatcher(fd)
  const size = Number(fs.fstatSync(fd).size)
  for (const r of records) {
    if (!mine(r)) continue
    if (r.at + r.line.length > size || !readRange(fd, r.at, r.at + r.line.length).equals(r.line)) return false
  }
  return true
}

/**
 * Threads whose transcript lacks lines a journal holds (for `spindle doctor`): what a runtime
 * opening the directory would write back. Reads only.
 */
export function journalLag(
  journalDir: string,
  transcriptOf: (threadId: string) => string,
  only?: string,
  skip?: (skipped: SkippedJournal) => void,
): Array<{ threadId: string; journal: string }> {
  const lag: Array<{ threadId: string; journal: string }> = []
  for (const { file, threads } of readJournals(journalDir, '\0', undefined, skip)) {
    for (const [threadId, records] of threads) {
      if (only !== undefined && threadId !== only) continue
      let fd: number
      try {
        // As `holds`: nothing read through a link (doctor names a linked folder on its own).
        if (!inRealFolder(transcriptOf(threadId))) continue
        fd = openRegular(transcriptOf(threadId), fs.constants.O_RDONLY | NOFOLLOW).fd
      } catch {
        continue
      }
      try {
        if (!holdsAll(fd, records)) lag.push({ threadId, journal: file })
      } finally {
        fs.closeSync(fd)
      }
    }
  }
  return lag
}

/**
 * Throws TRANSCRIPT_BEHIND_JOURNAL when a journal holds lines the thread's transcript lacks: an
 * offline command that rewrites the thread's files (`then`) would otherwise act on a transcript a
 * runtime is about to lengthen.
 */
export function refuseIfBehindJournal(paths: DataPaths, threadId: string, then: string): void {
  const [behind] = journalLag(paths.journal, (id) => threadFile(paths, id, TRANSCRIPT_FILE), threadId)
  if (!behind) return
  throw new SpindleError(
    'TRANSCRIPT_BEHIND_JOURNAL',
    `The transcript of ${threadId} lacks lines that ${behind.journal} holds (a power loss before the file's own fdatasync): ` +
      `open a runtime on ${paths.root} first, which writes them back (a suspended thread's when it is approved or resumed), then ${then}.`,
    { details: { threadId, journal: behind.journal } },
  )
}

export interface JournalRepair {
  /** Where the journal's lines were written back from. */
  from: number
  /** The file's length after the repair. */
  to: number
  /** The bytes the file held from `from` on, kept aside (null when the file simply ended there). */
  savedTo: string | null
}

/**
 * Writes back, into the open transcript `fd`, the journal lines it lost. Finds the first record
 * whose bytes the file does not hold where the record says; checks that the records from there on
 * are contiguous, hash-chained to the line before them in the file; keeps the file's bytes from
 * there on aside, writes the records and cuts the file after them. Returns null when the file
 * already holds every record, or when the records cannot be chained to it or disagree with each
 * other (then the file is left as it is, and opening it reports what is wrong, as without a
 * journal).
 */
export function repairFromJournal(
  fd: number,
  file: string,
  records: readonly JournalRecord[],
  options: { fsync: boolean; saveAside: (offset: number, length: number) => string },
): JournalRepair | null {
  const mine = recordMatcher(fd)
  const size = Number(fs.fstatSync(fd).size)
  // Epochs and stores may repeat a line: one record per offset, in file order. Two that differ at
  // one offset cannot both be this file's history: nothing is written on their word.
  const byAt = new Map<number, JournalRecord>()
  for (const r of records) {
    if (!mine(r)) continue
    const seen = byAt.get(r.at)
    if (seen && !seen.line.equals(r.line)) return null
    byAt.set(r.at, r)
  }
  if (byAt.size === 0) return null
  const ordered = [...byAt.values()].sort((a, b) => a.at - b.at)
  let i = 0
  for (; i < ordered.length; i++) {
    const r = ordered[i]!
    if (r.at + r.line.length > size || !readRange(fd, r.at, r.at + r.line.length).equals(r.line)) break
  }
  if (i === ordered.length) return null
  const run: JournalRecord[] = [ordered[i]!]
  for (let k = i + 1; k < ordered.length && ordered[k]!.at === run.at(-1)!.at + run.at(-1)!.line.length; k++) run.push(ordered[k]!)
  const from = run[0]!.at
  if (from > size) return null
  const predecessor = lineBefore(fd, from, i > 0 && ordered[i - 1]!.at + ordered[i - 1]!.line.length === from ? ordered[i - 1]! : null)
  if (!predecessor) return null
  const bytes = Buffer.concat(run.map((r) => r.line))
  let parsed
  try {
    parsed = parseTranscriptBytes(bytes, { ...predecessor, bytes: from }, file)
  } catch {
    return null
  }
  // Only whole, verified lines are written back.
  const usable = parsed.position.bytes - from
  if (usable === 0) return null
  const savedTo = size > from ? options.saveAside(from, size - from) : null
  // Cut first, then write at the end: the store's descriptors are O_APPEND, where Linux's pwrite
  // ignores the offset.
  fs.ftruncateSync(fd, from)
  let written = 0
  while (written < usable) written += fs.writeSync(fd, bytes, written, usable - written)
  if (options.fsync) fs.fdatasyncSync(fd)
  return { from, to: from + usable, savedTo }
}

/**
 * The position of the entry that ends at `end`: from the journal record that ends there, or read
 * back from the file in growing windows (a line can be megabytes long: a large tool result).
 */
function lineBefore(fd: number, end: number, record: JournalRecord | null): Omit<TranscriptPosition, 'bytes'> | null {
  if (end === 0) return { seq: EMPTY_POSITION.seq, hash: EMPTY_POSITION.hash }
  let text: string | null = record ? record.line.toString('utf8') : null
  for (let window = 64 * 1024; text === null; window *= 4) {
    const start = Math.max(0, end - window)
    const chunk = readRange(fd, start, end)
    if (chunk.length !== end - start || chunk[chunk.length - 1] !== 0x0a) return null
    const newline = chunk.length >= 2 ? chunk.lastIndexOf(0x0a, chunk.length - 2) : -1
    if (newline !== -1) text = chunk.subarray(newline + 1).toString('utf8')
    else if (start === 0) text = chunk.toString('utf8')
  }
  try {
    const entry = JSON.parse(text) as { seq?: unknown; hash?: unknown }
    return typeof entry.seq === 'number' && typeof entry.hash === 'string' ? { seq: entry.seq, hash: entry.hash } : null
  } catch {
    return null
  }
}
