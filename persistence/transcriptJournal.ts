/**
 * The transcript journal: one append-only file per transcript store that makes many threads'
 * transcript lines survive power loss with one fdatasync, instead of one per thread file. Side
 * effects.
 *
 * Why: a turn needs its lines durable twice (the tool intent before the tool runs, its result
 * before the next model call). fdatasyncs of a hundred files queue behind each other in the
 * filesystem's journal; one fdatasync of one file that holds the same bytes does not. The thread
 * files still get every line at once (a process crash loses nothing); they are fdatasynced in
 * the background checkpoint round, after which the journal epochs written before it are deleted.
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
import { pidAlive } from '../src/base/processes.js'
import { fsyncDir, fsyncDirSync } from './atomicFile.js'
import { fdatasync, notRegularReason, openRegular, readRange, writeAll } from './fdio.js'
import { parseTranscriptBytes } from './transcriptLines.js'
import { SpindleError } from '../src/base/errors.js'
import type { DataPaths } from './paths.js'
import { STATE_FILE, threadFile, TRANSCRIPT_FILE } from './paths.js'
import { EMPTY_POSITION } from './types.js'
import type { TranscriptPosition } from './types.js'

const HEADER_KEY = 'spindle-journal'
const SUFFIX = '.journal'
/** A header line (who wrote the file) fits in this. */
const HEADER_BYTES = 4096
const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0
/** A new epoch file: never an existing one, every write at its end. */
const APPEND_NEW = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_APPEND

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
    const probe = path.join(dir, `.birth-probe-${process.pid}-${nanoid(6)}`)
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
function recordMatcher(fd: number): (r: JournalRecord) => boolean {
  const stat = fs.fstatSync(fd, { bigint: true })
  const full = `${stat.ino}-${stat.birthtimeNs}`
  const inodeOnly = `${stat.ino}-0`
  return (r) => r.file === full || r.file === inodeOnly
}

/** The start time of process `pid` (clock ticks since boot), or null where /proc cannot say. */
function processStart(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null
  } catch {
    return null
  }
}

let bootId: string | null | undefined
function currentBoot(): string | null {
  if (bootId === undefined) {
    try {
      bootId = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null
    } catch {
      bootId = null
    }
  }
  return bootId
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
function readJournals(dir: string, own: string, head?: number, skip?: (skipped: SkippedJournal) => void): JournalFileIndex[] {
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

function recordsByThread(indexes: readonly JournalFileIndex[]): Map<string, JournalRecord[]> {
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

/**
 * Whether the writer of a journal is gone for good: a boot of the kernel before this one (whatever
 * the host was called then), or on this host a dead pid or a live pid that is another process
 * (reused, or this one as PID 1 of a restarted container).
 *
 * Another boot is judged even under another host name: a data directory lives on one host, since
 * SQLite's WAL (registry.db, leases.db) does not work across hosts, so a writer that booted another
 * kernel is this machine before a restart, or a machine the directory was moved from. A journal of
 * this boot under another host name (a sibling container sharing the volume) stays: its pid cannot
 * be looked up from here.
 */
function writerGone(index: JournalFileIndex): boolean {
  const boot = currentBoot()
  if (index.boot !== null && boot !== null && index.boot !== boot) return true
  if (index.host !== os.hostname() || index.pid === null) return false
  if (index.pid !== process.pid && !pidAlive(index.pid)) return true
  const start = processStart(index.pid)
  return index.start !== null && start !== null && start !== index.start
}

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
    const gone = new Set(readJournals(this.dir, this.own, HEADER_BYTES, this.skip).filter(writerGone).map((index) => index.file))
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

/**
 * This store's own journal: records are buffered in memory until `sync`, which writes them with
 * one write and fdatasyncs the file. `rotate` starts a new epoch file; the epochs before it are
 * deleted by the function it returns, once the caller has made the thread files durable.
 *
 * Its file work goes through the libuv threadpool like every other; the stores that share the
 * pool bound their own fan-out (see poolShare.ts), so a journal sync never queues behind a
 * checkpoint round's hundreds of file operations (measured before: 25 ms of waiting for a 0.7 ms
 * fdatasync, and every effect waits for it).
 */
export class OwnJournal {
  /** Prefix of this store's epoch files; other stores' journals are every other file in `dir`. */
  readonly id = `${process.pid}-${nanoid(10)}`
  private epoch = 0
  private current: Epoch | null = null
  private pending: string[] = []
  /** Epoch files closed for records and not yet deleted. */
  private retired: string[] = []
  /** The last sync: the next one is vouched for only after it. */
  private last: Promise<void> = Promise.resolve()
  private broken: Error | null = null

  constructor(readonly dir: string) {}

  add(threadId: string, file: string, at: number, line: string): void {
    this.pending.push(`${threadId} ${file} ${at} ${line}`)
  }

  /** Makes every record added so far durable (after every earlier sync). */
  sync(): Promise<void> {
    const records = this.pending
    this.pending = []
    if (this.broken) return Promise.reject(this.broken)
    const earlier = this.last
    if (records.length === 0) return earlier
    let epoch: Epoch
    try {
      epoch = this.current ?? (this.current = this.openEpoch())
    } catch (error) {
      return Promise.reject(this.fail(path.join(this.dir, `${this.id}.*`), error))
    }
    // Written here, synchronously (tens of kilobytes into the page cache): one write after
    // another, and no trip through the threadpool before the fdatasync.
    try {
      writeAll(epoch.fd, Buffer.from(records.join(''), 'utf8'))
    } catch (error) {
      return Promise.reject(this.fail(epoch.file, error))
    }
    epoch.inFlight++
    // The earlier sync runs alongside (its fdatasync started first); it may hold records of the
    // callers this one serves, so its failure is this one's too.
    const work = (async () => {
      try {
        await Promise.all([fdatasync(epoch.fd), epoch.named, earlier])
      } catch (error) {
        throw this.fail(epoch.file, error)
      } finally {
        epoch.inFlight--
        closeIfDone(epoch)
      }
    })()
    work.catch(() => {})
    this.last = work
    return work
  }

  /**
   * Starts a new epoch for records added from now on and returns what deletes the epochs before
   * it: call it once every thread file they cover is durable.
   */
  rotate(): () => void {
    // Records of lines appended before the rotation go to the epoch it retires (the files sync
    // that follows covers those lines), so a record in a live epoch always names a line that may
    // not be in a durable file yet. Later syncs wait for this one.
    if (this.pending.length > 0) void this.sync().catch(() => {})
    if (this.current !== null) {
      this.current.retired = true
      closeIfDone(this.current)
      this.retired.push(this.current.file)
      this.current = null
    }
    // A round that failed never deleted its epochs: the next one that succeeds does.
    const done = [...this.retired]
    return () => {
      for (const file of done) {
        try {
          fs.unlinkSync(file)
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
        }
      }
      this.retired = this.retired.filter((file) => !done.includes(file))
    }
  }

  /** Closes the journal; with `remove`, deletes its files (every thread file is durable). */
  close(remove: boolean): void {
    const finish = this.rotate()
    if (remove) {
      finish()
      if (fs.existsSync(this.dir)) fsyncDirSync(this.dir)
    }
  }

  /** Sticky: after a failed write or fdatasync the file's end is unknown (see jsonlTranscript.ts). */
  private fail(file: string, error: unknown): Error {
    this.broken ??= Object.assign(new Error(`The transcript journal ${file} failed: ${(error as Error).message}`), {
      code: (error as NodeJS.ErrnoException).code,
      cause: error,
    })
    return this.broken
  }

  private openEpoch(): Epoch {
    // The journal directory's own name must be durable too, before anything in it vouches: once
    // per store (a process that made it may have died before fsyncing its parent).
    fs.mkdirSync(this.dir, { recursive: true })
    const created = this.epoch === 0
    const file = path.join(this.dir, `${this.id}.${String(++this.epoch).padStart(6, '0')}${SUFFIX}`)
    const fd = fs.openSync(file, APPEND_NEW)
    try {
      const header = JSON.stringify({
        [HEADER_KEY]: 1,
        host: os.hostname(),
        pid: process.pid,
        boot: currentBoot(),
        start: processStart(process.pid),
        createdAt: new Date().toISOString(),
      }) + '\n'
      fs.writeSync(fd, header)
    } catch (error) {
      fs.closeSync(fd)
      throw error
    }
    // The new name must be durable before the file's first fdatasync vouches for anything.
    const named = Promise.all([fsyncDir(this.dir), created ? fsyncDir(path.dirname(this.dir)) : null]).then(() => {})
    named.catch(() => {})
    return { file, fd, named, inFlight: 0, retired: false }
  }
}

interface Epoch {
  file: string
  fd: number
  named: Promise<void>
  /** Syncs started on it and not finished: it is closed after the last. */
  inFlight: number
  retired: boolean
}

function closeIfDone(epoch: Epoch): void {
  if (epoch.retired && epoch.inFlight === 0 && epoch.fd >= 0) {
    fs.closeSync(epoch.fd)
    epoch.fd = -1
  }
}


