/**
 * The request bell: `<dir>/requests.bell`, one thread id per line, appended by whoever writes a
 * request file through spindle (`requestCancel`, `requestResume`, `respondToApproval`, the CLI).
 *
 * It lets a runtime with tens of thousands of threads find new requests with one `stat` per poll
 * instead of one per thread directory. The bell is only a hint: the request file is the request.
 * A lost or garbled ring costs latency, never a request, because the runtime still looks in every
 * thread's directory in turn (`requests.scanPerPoll` of them per poll) for files written by hand.
 */
import fs from 'node:fs'
import path from 'node:path'
import { appendRegular, notRegularReason, openRegular } from './fdio.js'
import { SpindleError } from '../src/base/errors.js'
import { writerMark } from '../src/base/processes.js'

export const BELL_FILE = 'requests.bell'

/** What one read of the bell takes into memory at most. */
const MAX_READ_BYTES = 4 << 20

/** Past this size the runtime that reads the bell sets it aside and starts a new one. */
const ROTATE_BYTES = 1 << 20

// A ring names a thread; anything else on a line (a forged or torn write) is skipped.
const THREAD_ID = /^[A-Za-z0-9_-]{1,128}$/

/**
 * Rings the bell for thread `id` after its request file is in place. Never throws: the file stands
 * alone. A bell that is no regular file (a symlink out of the data directory, a FIFO that would
 * block this process) is not rung: a process warning says so, since library callers have no
 * other channel and the CLI prints warnings on stderr.
 */
export function ringBell(root: string, id: string): void {
  const file = path.join(root, BELL_FILE)
  try {
    appendRegular(file, `${id}\n`)
  } catch (error) {
    const found = notRegularReason(error)
    if (found === null) return
    process.emitWarning(
      `Did not ring ${file} for thread ${id}: it is ${found}, not a regular file, and spindle does not write through one. ` +
        'The request file is written and will still be found, only later. The runtime reading the directory sets it aside; if it stays, move it aside yourself.',
      { type: 'SpindleWarning', code: 'DATA_DIR_INVALID', detail: `path: ${file}` },
    )
  }
}

export interface Rings {
  /** Threads whose directories hold a new request. */
  ids: Set<string>
  /** The bell was replaced, cut short or set aside: rings may have been missed, look everywhere. */
  missed: boolean
}

/** Reads what was rung since the last read. One `stat` when nothing was. */
export class BellReader {
  private readonly file: string
  private readonly rotateBytes: number
  private started = false
  /** The bell file we read: inode and birth time (ext4 gives a new file the inode of a deleted one at once). */
  private ino: string | null = null
  private offset = 0

  private readonly onProblem: (problem: SpindleError) => void

  /** @param options.onProblem told when a bell that is no regular file was set aside. */
  constructor(root: string, options: { rotateBytes?: number; onProblem?: (problem: SpindleError) => void } = {}) {
    this.file = path.join(root, BELL_FILE)
    this.rotateBytes = options.rotateBytes ?? ROTATE_BYTES
    this.onProblem = options.onProblem ?? (() => {})
  }

  read(): Rings {
    const rings: Rings = { ids: new Set(), missed: false }
    let stat: fs.BigIntStats
    try {
      // lstat: a symlink is seen as one, not as the file it points at.
      stat = fs.lstatSync(this.file, { bigint: true })
    } catch {
      // Never rung, or set aside by another runtime: what was rung since our last read is lost to us.
      if (!this.started || this.ino !== null) rings.missed = true
      this.started = true
      this.ino = null
      this.offset = 0
      return rings
    }
    if (!stat.isFile()) {
      this.setAsideForeign(stat)
      rings.missed = true
      this.started = true
      this.ino = null
      this.offset = 0
      return rings
    }
    const identity = `${stat.ino}-${stat.birthtimeNs}`
    const size = Number(stat.size)
    if (!this.started) {
      // What was rung before this runtime opened is old news; it looks everywhere once instead.
      this.started = true
      this.ino = identity
      this.offset = size
      rings.missed = true
    } else if (this.ino === null) {
      // A bell started since our last read (after we set the old one aside, or the first ever).
      this.ino = identity
      this.offset = 0
    } else if (this.ino !== identity || size < this.offset) {
      // Another runtime set the bell aside: rings between our last read and that may be lost to us.
      rings.missed = true
      this.ino = identity
      this.offset = 0
    }
    if (size > this.offset) this.offset = this.take(this.file, this.offset, size, rings)
    if (this.offset >= this.rotateBytes) this.rotate(rings)
    return rings
  }

  /** Reads whole lines from `from` up to `to`; returns where the next read starts. */
  private take(file: string, from: number, to: number, rings: Rings): number {
    // More than a poll's worth of honest rings (each is a thread id): not read into memory. The
    // poll looks everywhere instead, which finds every request, and the bell is set aside.
    if (to - from > MAX_READ_BYTES) {
      rings.missed = true
      return to
    }
    let text: Buffer
    try {
      // Swapped for a symlink or a FIFO since the lstat: refused, not followed or waited on.
      const { fd } = openRegular(file, fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0))
      try {
        text = Buffer.alloc(to - from)
        let got = 0
        while (got < text.length) {
          const n = fs.readSync(fd, text, got, text.length - got, from + got)
          if (n === 0) break
          got += n
        }
        text = text.subarray(0, got)
      } finally {
        fs.closeSync(fd)
      }
    } catch {
      rings.missed = true
      return from
    }
    const end = text.lastIndexOf(0x0a)
    // A line still being written is read whole next time.
    if (end === -1) return from
    for (const line of text.subarray(0, end).toString('utf8').split('\n')) {
      if (THREAD_ID.test(line)) rings.ids.add(line)
    }
    return from + end + 1
  }

  /**
   * A symlink, FIFO or directory where the bell belongs is never read: it is renamed away (rename
   * and unlink act on the entry, never on what a link points at) so that writers can start a new
   * bell, and the host is told. Rings before it are lost to us: the caller looks everywhere.
   */
  private setAsideForeign(stat: fs.BigIntStats): void {
    const found = stat.isSymbolicLink() ? 'a symbolic link' : stat.isDirectory() ? 'a directory' : 'a FIFO, socket or device'
    // Named for this process: killed before it is removed, the next runtime removes it (leftovers.ts).
    const aside = `${this.file}.${writerMark()}.${Date.now()}.not-a-file`
    try {
      fs.renameSync(this.file, aside)
    } catch {
      return
    }
    let kept = ''
    try {
      fs.unlinkSync(aside)
    } catch {
      kept = ` (kept as ${aside}: it could not be removed)`
    }
    this.onProblem(
      new SpindleError(
        'DATA_DIR_INVALID',
        `${this.file} was ${found}, not a regular file: it was set aside unread${kept} and a new bell starts. Find out who put it there.`,
        { details: { path: this.file, found } },
      ),
    )
  }

  /**
   * Sets the bell aside so it does not grow without end. A writer that opened it just before may
   * still append to the old file: the caller looks in every directory once, which finds its request.
   */
  private rotate(rings: Rings): void {
    const aside = `${this.file}.${writerMark()}.${Date.now()}.old`
    try {
      fs.renameSync(this.file, aside)
    } catch {
      return
    }
    const size = (() => {
      try {
        return fs.statSync(aside).size
      } catch {
        return this.offset
      }
    })()
    if (size > this.offset) this.take(aside, this.offset, size, rings)
    fs.rmSync(aside, { force: true })
    rings.missed = true
    this.ino = null
    this.offset = 0
  }
}
