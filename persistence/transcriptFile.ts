/**
 * One transcript file, below the store that keeps many open: opening it without following a link,
 * the damage it reports (TRANSCRIPT_CORRUPT naming the file), reading back the line that ends at an
 * offset and checking it against state.json's anchor, keeping bytes aside before they are cut off
 * (a torn line, a stale writer's lines), and settling bytes another writer appended. Apart from
 * jsonlTranscript.ts, which holds the store's bookkeeping (open files, what each sync covers, the
 * journal). Side effects.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError } from '../src/base/errors.js'
import { fsyncDirSync } from './atomicFile.js'
import { linkTarget, NotRegularFile, notRegularReason, openRegular, readRange, writeAll } from './fdio.js'
import { leadingSeq } from './transcriptLines.js'
import type { TranscriptPosition } from './types.js'

/** Bytes another writer appended to a transcript this store holds open. */
export interface ForeignTail {
  threadId: string
  file: string
  /** Where they started: the end of the last line this store wrote or read. */
  offset: number
  bytes: number
  savedTo: string
}

export const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0
/**
 * Read and write, every write at the end; without O_CREAT, so a missing file is an error we can
 * see; never through a symlink at the file's name (every later append goes to the descriptor).
 */
export const OPEN_EXISTING = fs.constants.O_RDWR | fs.constants.O_APPEND | NOFOLLOW

/**
 * A transcript the store holds open (from `open` to `close`): where this store's appends go, and
 * what its syncs know of the file. Its descriptor comes and goes (see `handle`).
 */
export interface OpenFile {
  threadId: string
  file: string
  position: TranscriptPosition
  /**
   * The descriptor the store holds on the file now, or null: the store's pool gave it up (the
   * least recently used go first), and the next append opens the file again.
   */
  handle: Handle | null
  /**
   * The file's device and inode, read when its first descriptor is given up: a descriptor opened
   * again must reach this very file (null until then).
   */
  inode: { dev: number; ino: number } | null
  closed: boolean
  /** The first fdatasync failure, of any of its descriptors; sticky, see the store's `sync`. */
  syncError: Error | null
  /** A failed append whose partial line could not be cut off: the end of the file is unknown. */
  appendError: unknown
  /** The file's identity (journal records name it: see recordIdentity), read at the first journaled append. */
  identity: string | null
  /**
   * Opened from an existing file (recovery, a takeover), not created here: a process that ran the
   * thread before may still write a line into it (see the store's `append`).
   */
  inherited: boolean
}

/**
 * One descriptor on a transcript. It outlives its thread's use of it while an fdatasync needs it: a
 * descriptor is closed only once every line written through it is durable or handed to a sync,
 * never under a queued fdatasync (whose descriptor number could by then name another file).
 */
export interface Handle {
  fd: number
  /** The thread file it was opened on; a failed fdatasync is the file's, not the descriptor's. */
  owner: OpenFile
  /** fdatasyncs in flight (or queued) on `fd`: it stays open until they finish. */
  syncing: number
  /** No longer its thread's descriptor (closed, or given up by the pool): closed once nothing needs it. */
  retired: boolean
  /** The fdatasync started when the pool gave it up (a retired descriptor takes no more lines). */
  flushing?: Promise<void>
}

/** TRANSCRIPT_CORRUPT for `file`, with `message` saying what is wrong and what to do. */
export function corrupt(file: string, threadId: string, message: string, details: Record<string, unknown> = {}): SpindleError {
  return new SpindleError('TRANSCRIPT_CORRUPT', `The transcript ${file} ${message}`, { details: { path: file, threadId, ...details } })
}

/** A transcript path that holds a directory (or another non-file): nothing can be read or appended. */
function notAFile(file: string, what = 'a directory'): SpindleError {
  return corrupt(file, path.basename(path.dirname(file)), `is ${what}, not a file: move it aside (nothing was changed). The thread cannot go on without its transcript.`)
}

/**
 * Opens a transcript (see openRegular; `flags` carry O_NOFOLLOW), naming a file that is not one,
 * or a symlink at its name, as the thread's damage.
 */
export function openTranscript(file: string, flags: number): number {
  return openTranscriptFile(file, flags).fd
}

/** `openTranscript`, with the file's size, device and inode as the open found them. */
function openTranscriptFile(file: string, flags: number): { fd: number; size: number; dev: number; ino: number } {
  try {
    return openRegular(file, flags)
  } catch (error) {
    if (error instanceof NotRegularFile) throw notAFile(file, error.kind)
    if (notRegularReason(error) === 'a symbolic link') {
      const target = linkTarget(file)
      throw corrupt(
        file,
        path.basename(path.dirname(file)),
        `is a symbolic link (to ${target}), not a file: spindle reads and appends to no transcript through a link, so nothing was read or written through it. ` +
          'Move the link aside and put the transcript it stands for in its place (if it is this thread\'s), find out who made it, and open the directory again.',
        { target },
      )
    }
    throw error
  }
}

/**
 * Opens again a transcript whose descriptor the store's pool gave up, to append where the store's
 * last line ended. Nothing is read or verified again (the store knows its position): the file must
 * be the one it was (same device and inode) and must end there. Bytes past that end go through
 * settleForeignTail, as before every line of an inherited file; a file that was removed, replaced,
 * or is shorter is damage (TRANSCRIPT_CORRUPT), and nothing is written to it. Errors of the open
 * itself (EMFILE) are thrown as they come.
 */
export function reopenTranscript(open: OpenFile, fsync: boolean, onForeignTail?: (found: ForeignTail) => void): number {
  let opened: { fd: number; size: number; dev: number; ino: number }
  try {
    opened = openTranscriptFile(open.file, OPEN_EXISTING)
  } catch (error) {
    if (!isNoEntry(error)) throw error
    throw corrupt(
      open.file,
      open.threadId,
      `was removed while its thread ran (this process had written ${open.position.seq} entries, ${open.position.bytes} bytes, to it): nothing more is written. ` +
        'Restore the file from a backup; without it the thread cannot be rebuilt.',
      { seq: open.position.seq, bytes: open.position.bytes },
    )
  }
  try {
    if (open.inode && (opened.dev !== open.inode.dev || opened.ino !== open.inode.ino)) {
      throw corrupt(
        open.file,
        open.threadId,
        'is no longer the file this process wrote to (another file is at its name, or its folder was swapped for another): nothing was written to it. ' +
          'Find out who replaced it; put the thread\'s own transcript back, or inspect what is there with readThreadFiles() from the spindle API.',
        { seq: open.position.seq, bytes: open.position.bytes },
      )
    }
    if (opened.size !== open.position.bytes) settleForeignTail(open, opened.fd, fsync, onForeignTail, opened.size)
    return opened.fd
  } catch (error) {
    fs.closeSync(opened.fd)
    throw error
  }
}

export function notOpen(threadId: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `The transcript of ${threadId} is not open: open it before appending to it.`, {
    details: { threadId },
  })
}

export function isNoEntry(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'ENOENT'
}

/**
 * The line that ends at `from.bytes`, which must be the entry `from` names. Reads backwards in
 * growing windows, so a long last line costs a few reads, not the whole file.
 */
function lineEndingAt(fd: number, end: number, read?: { start: number; chunk: Buffer }): Buffer | null {
  for (let window = 4096; ; window *= 4) {
    const start = Math.max(0, end - window)
    // Bytes already read from `read.start` on (the tail that `open` reads anyway) serve the first window.
    const chunk = read && read.start <= start ? read.chunk.subarray(start - read.start, end - read.start) : readRange(fd, start, end)
    if (chunk.length !== end - start || chunk[chunk.length - 1] !== 0x0a) return null
    // (lastIndexOf counts a negative offset from the end, so a one-byte chunk needs the guard.)
    const newline = chunk.length >= 2 ? chunk.lastIndexOf(0x0a, chunk.length - 2) : -1
    if (newline !== -1) return chunk.subarray(newline + 1, chunk.length - 1)
    if (start === 0) return chunk.subarray(0, chunk.length - 1)
  }
}

/** The entry (its seq and hash, as parsed) on the line that ends at `end`, or null when no intact line ends there. */
export function entryEndingAt(fd: number, end: number, read?: { start: number; chunk: Buffer }): { seq?: unknown; hash?: unknown } | null {
  const line = lineEndingAt(fd, end, read)
  try {
    return line ? (JSON.parse(line.toString('utf8')) as { seq?: unknown; hash?: unknown } | null) : null
  } catch {
    return null
  }
}

/** Throws TRANSCRIPT_CORRUPT unless the line that ends at `from.bytes` is the entry `from` names. */
export function checkAnchor(fd: number, file: string, threadId: string, from: TranscriptPosition, read?: { start: number; chunk: Buffer }): void {
  // Appends chain to from.hash; if the file does not hold that entry where state.json says it
  // ends, the next append would write a chain nobody can verify. Stop here instead.
  // Not JSON there: reported below as "no intact entry".
  const entry = entryEndingAt(fd, from.bytes, read)
  if (entry?.seq !== from.seq || entry?.hash !== from.hash) {
    throw corrupt(
      file,
      threadId,
      `does not match state.json, which says entry ${from.seq} ends at byte ${from.bytes}; the file holds ` +
        `${entry ? `entry ${String(entry.seq)} with a different hash` : 'no intact entry'} there. ` +
        `Restore the file from a backup, or inspect it with readThreadFiles() from the spindle API.`,
      { seq: from.seq, bytes: from.bytes },
    )
  }
}

/** Keeps `length` bytes of `file` from `offset` on aside, in `<file>.torn-<offset>` (durably with `fsync`); returns its path. */
export function saveTorn(fd: number, file: string, offset: number, length: number, fsync: boolean): string {
  const bytes = readRange(fd, offset, offset + length)
  for (let n = 0; ; n++) {
    // A second tear at the same offset (a crash during the first append after recovery) must
    // not overwrite the first one's bytes.
    const savedTo = n === 0 ? `${file}.torn-${offset}` : `${file}.torn-${offset}.${n}`
    let side: number
    try {
      side = fs.openSync(savedTo, 'wx')
    } catch (error) {
      if ((error as { code?: unknown }).code === 'EEXIST') continue
      throw error
    }
    try {
      writeAll(side, bytes)
      if (fsync) fs.fsyncSync(side)
    } finally {
      fs.closeSync(side)
    }
    if (fsync) fsyncDirSync(path.dirname(file))
    return savedTo
  }
}

/**
 * A process that lost a thread (its lease ran out while it was stopped or starved) checks its
 * lease before each line, but can be stopped between that check and the write: the line it was
 * writing then lands after it wakes, past lines the new owner wrote. So before each line, bytes
 * past the end this store knows are read for their seqs. Lines that repeat seqs this store
 * already has come from a writer behind it, which lost the thread: they are moved aside, as a
 * torn line is, and cut off, so the chain goes on unbroken. Lines that go on past its seq come
 * from a writer ahead of it: this store is the one that lost the thread, and writes nothing
 * (LEASE_LOST). Anything else is left as it is (TRANSCRIPT_CORRUPT).
 */
export function settleForeignTail(open: OpenFile, fd: number, fsync: boolean, onForeignTail?: (found: ForeignTail) => void, size = fs.fstatSync(fd).size): void {
  if (size === open.position.bytes) return
  if (size < open.position.bytes) {
    throw corrupt(
      open.file,
      open.threadId,
      `is shorter than what this process wrote to it (${size} bytes, ${open.position.bytes} expected): something else cut it. ` +
        'Inspect it with readThreadFiles() from the spindle API, or restore it from a backup.',
      { bytes: open.position.bytes, size },
    )
  }
  const tail = readRange(fd, open.position.bytes, size)
  const seqs = tail
    .toString('utf8')
    .split('\n')
    .filter((line) => line.length > 0)
    .map(leadingSeq)
  if (seqs.some((seq) => seq !== null && seq > open.position.seq)) {
    throw new SpindleError(
      'LEASE_LOST',
      `Another process has written ${open.file} past this process's last line (seq ${open.position.seq}): the thread was taken over, so this process stops writing it.`,
      { details: { threadId: open.threadId, file: open.file, seq: open.position.seq } },
    )
  }
  if (seqs.length === 0 || seqs.includes(null)) {
    throw corrupt(
      open.file,
      open.threadId,
      `has ${tail.length} bytes this process did not write after its last line (seq ${open.position.seq}), and they are not transcript lines. ` +
        'Inspect them with readThreadFiles() from the spindle API; move them out of the file to let the thread go on.',
      { seq: open.position.seq, bytes: open.position.bytes, size },
    )
  }
  const savedTo = saveTorn(fd, open.file, open.position.bytes, tail.length, fsync)
  fs.ftruncateSync(fd, open.position.bytes)
  onForeignTail?.({ threadId: open.threadId, file: open.file, offset: open.position.bytes, bytes: tail.length, savedTo })
}
