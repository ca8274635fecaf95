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

export const BELL_FILE = 'requests.bell'

/** Past this size the runtime that reads the bell sets it aside and starts a new one. */
const ROTATE_BYTES = 1 << 20

// A ring names a thread; anything else on a line (a forged or torn write) is skipped.
const THREAD_ID = /^[A-Za-z0-9_-]{1,128}$/

/** Rings the bell for thread `id` after its request file is in place. Never throws: the file stands alone. */
export function ringBell(root: string, id: string): void {
  try {
    fs.appendFileSync(path.join(root, BELL_FILE), `${id}\n`)
  } catch {}
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

  constructor(root: string, options: { rotateBytes?: number } = {}) {
    this.file = path.join(root, BELL_FILE)
    this.rotateBytes = options.rotateBytes ?? ROTATE_BYTES
  }

  read(): Rings {
    const rings: Rings = { ids: new Set(), missed: false }
    let stat: fs.BigIntStats
    try {
      stat = fs.statSync(this.file, { bigint: true })
    } catch {
      // Never rung, or set aside by another runtime: what was rung since our last read is lost to us.
      if (!this.started || this.ino !== null) rings.missed = true
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
    let text: Buffer
    try {
      const fd = fs.openSync(file, 'r')
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
   * Sets the bell aside so it does not grow without end. A writer that opened it just before may
   * still append to the old file: the caller looks in every directory once, which finds its request.
   */
  private rotate(rings: Rings): void {
    const aside = `${this.file}.${process.pid}.${Date.now()}.old`
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
