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
 * This module is a store's own journal (`OwnJournal`), on the write path. What a journal file
 * holds and how journals are read is in journalFiles.ts; what is done with the journals other
 * stores left (lines written back, journals settled) in foreignJournals.ts.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { nanoid } from 'nanoid'
import { fsyncDir, fsyncDirSync } from './atomicFile.js'
import { fdatasync, writeAll } from './fdio.js'
import { currentBoot, processStart, writerMark } from '../src/base/processes.js'
import { HEADER_KEY, SUFFIX } from './journalFiles.js'

/** A new epoch file: never an existing one, every write at its end. */
const APPEND_NEW = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_APPEND

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
  /**
   * Prefix of this store's epoch files; other stores' journals are every other file in `dir`. It
   * names this process (`writerMark`): a process killed between creating an epoch file and writing
   * its header leaves an empty file, which only its name can tell a dead process's.
   */
  readonly id = `${writerMark()}-${nanoid(6)}`
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
