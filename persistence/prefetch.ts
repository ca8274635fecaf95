/**
 * Reads the files of many threads ahead of recovery, on a worker thread. Side effects.
 *
 * Recovery is bound by one core: restoring thousands of XState actors, parsing state.json,
 * verifying transcript anchors. The system calls that fetch the bytes (open, fstat, read; about
 * a quarter of the time) need no JavaScript, so a worker makes them on the other core while the
 * main thread works through the threads already fetched. The main thread takes the results in
 * order, waiting (Atomics.wait) only when it catches up with the worker; nothing else runs on the
 * event loop in between, so recovery stays one synchronous pass as before.
 *
 * Only an optimisation: a thread whose files the worker could not read cleanly (any error but a
 * missing file) is read again by the stores themselves, which report the error as they always
 * do; if the worker itself fails or stalls, every thread after that point is read that way too.
 * Transcript file descriptors the worker opened are handed over (one process, one fd table) and
 * closed by `close` when nobody took them.
 */
import fs from 'node:fs'
import { MessageChannel, receiveMessageOnPort, Worker } from 'node:worker_threads'
import type { MessagePort } from 'node:worker_threads'
import { isThreadId } from '../src/base/ids.js'
import { STATE_FILE, TRANSCRIPT_FILE } from './paths.js'

/**
 * What the worker read of a thread's state.json: its bytes, or that it is missing. Only ever from a
 * thread folder it found to be a real directory, and never through a link at the file's name: the
 * stores take it without checking the folder again.
 */
export type PrefetchedState = { bytes: Buffer } | { missing: true }

/**
 * What the worker read of a thread's transcript: the open descriptor (read-write, append), the
 * file's size, and its last bytes (`chunk`, starting at byte `start`); or that it is missing. As
 * PrefetchedState: from a real folder, not through a link.
 */
export type PrefetchedTranscript = { fd: number; size: number; start: number; chunk: Buffer } | { missing: true } | PrefetchedRows

/**
 * A database's read-ahead of a transcript (persistence/postgres/pgReadAhead.ts): its lines from
 * entry `from` (the one a checkpoint points at) onwards, as the store's rows hold them.
 */
export interface PrefetchedRows {
  from: number
  rows: Array<{ seq: number; bytes: number; line: string }>
}

export interface PrefetchedThread {
  /** Undefined: read it the usual way. */
  state?: PrefetchedState
  transcript?: PrefetchedTranscript
  /**
   * Whether the reader's `watchFile` (a request file) was in the thread's directory once its files
   * were read; undefined when not looked for. A hint: a file written after that is not in it.
   */
  watched?: boolean
  /**
   * The thread's approval requests that have no decision (RequestInbox.undecided), when the reader
   * read them too (a database's); undefined when not.
   */
  undecided?: string[]
}

export interface ThreadPrefetch {
  /**
   * The files of `threadId`. Ids must be taken in the order given to `prefetchThreadFiles`; ids
   * skipped over are released. Undefined when the thread was not prefetched (read it yourself).
   */
  take(threadId: string): PrefetchedThread | undefined
  /** Stops the worker and closes every descriptor nobody took. */
  close(): Promise<void>
}

/** Threads per message: large enough to amortise a message, small enough to start early. */
const BATCH = 128
/** Batches the worker may run ahead of the main thread: bounds the memory held in flight. */
const AHEAD = 8
/** A tail of this many bytes holds the anchor line and the tail of almost every transcript. */
const TAIL_BYTES = 8192
/** How long the main thread waits for one batch before it reads the rest itself. */
const STALL_MS = 5000
/** How long `close` waits for the worker to stop before it leaves the rest to the worker's exit. */
const CLOSE_WAIT_MS = 2000

// Shared counters: [batches posted, batches taken, stop requested, worker failed].
const POSTED = 0
const TAKEN = 1
const STOP = 2
const FAILED = 3

// Meta per thread: state length (-1 missing, -2 read it yourself), transcript fd (-1 missing,
// -2 read it yourself), transcript size, tail start, tail length, watched file (1 there, 0 not,
// -1 not looked for). State bytes then tail bytes follow each other in `data`.
const FIELDS = 6

/*
 * The worker's code, evaluated as CommonJS (a string, so it needs no file of its own next to
 * the compiled output or the TypeScript sources the tests run from).
 */
const WORKER = `
const fs = require('node:fs')
const { workerData } = require('node:worker_threads')
const { dir, stateFile, transcriptFile, watchFile, shared, port, batch, ahead, tailBytes, fields, hold } = workerData
const held = hold ? new Int32Array(hold) : null
const counters = new Int32Array(shared)
// Booted early; the ids come once the caller holds their leases (or never: then it is told to go).
port.once('message', (message) => {
  if (message.ids) run(message.ids)
  port.close()
})
const NOFOLLOW = fs.constants.O_NOFOLLOW || 0
const OPEN = fs.constants.O_RDWR | fs.constants.O_APPEND | fs.constants.O_NONBLOCK | NOFOLLOW
const READ = fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | NOFOLLOW
function readAt(fd, buffer, offset, length, position) {
  let done = 0
  while (done < length) {
    const n = fs.readSync(fd, buffer, offset + done, length - done, position + done)
    if (n === 0) break
    done += n
  }
  return done
}
function run(ids) {
try {
  for (let first = 0; first < ids.length; first += batch) {
    while (Atomics.load(counters, ${POSTED}) - Atomics.load(counters, ${TAKEN}) >= ahead) {
      if (Atomics.load(counters, ${STOP})) break
      Atomics.wait(counters, ${TAKEN}, Atomics.load(counters, ${TAKEN}), 100)
    }
    if (Atomics.load(counters, ${STOP})) break
    const slice = ids.slice(first, first + batch)
    const meta = new Float64Array(slice.length * fields)
    const parts = []
    let total = 0
    slice.forEach((id, i) => {
      // Tests only: a read that does not come back, as on a hung network filesystem.
      while (held && Atomics.load(held, 0) === 0) Atomics.wait(held, 0, 0, 100)
      const m = i * fields
      const base = dir + '/' + id + '/'
      // A thread folder that is a symlink (or no directory) is not read through: left to the
      // stores, which refuse it naming the link. One lstat, on this core.
      let folder
      try {
        folder = fs.lstatSync(dir + '/' + id, { throwIfNoEntry: false })
      } catch {
        folder = null
      }
      if (folder === null || (folder !== undefined && !folder.isDirectory())) {
        meta[m] = -2
        meta[m + 1] = -2
        meta[m + 5] = -1
        return
      }
      let fd = -1
      try {
        fd = fs.openSync(base + stateFile, READ)
        const stat = fs.fstatSync(fd)
        // Anything but a regular file (a FIFO would block the read) is left to the store to refuse.
        if (!stat.isFile()) throw new Error('not a regular file')
        const size = stat.size
        const bytes = Buffer.allocUnsafe(size)
        const n = readAt(fd, bytes, 0, size, 0)
        parts.push(bytes.subarray(0, n))
        total += n
        meta[m] = n
      } catch (error) {
        meta[m] = error && error.code === 'ENOENT' ? -1 : -2
      } finally {
        if (fd >= 0) fs.closeSync(fd)
      }
      let tfd = -1
      try {
        tfd = fs.openSync(base + transcriptFile, OPEN)
        const tstat = fs.fstatSync(tfd)
        if (!tstat.isFile()) throw new Error('not a regular file')
        const size = tstat.size
        const start = Math.max(0, size - tailBytes)
        const chunk = Buffer.allocUnsafe(size - start)
        const n = readAt(tfd, chunk, 0, size - start, start)
        parts.push(chunk.subarray(0, n))
        total += n
        meta[m + 1] = tfd
        meta[m + 2] = size
        meta[m + 3] = start
        meta[m + 4] = n
      } catch (error) {
        if (tfd >= 0) fs.closeSync(tfd)
        meta[m + 1] = error && error.code === 'ENOENT' ? -1 : -2
      }
      meta[m + 5] = watchFile ? (fs.existsSync(base + watchFile) ? 1 : 0) : -1
    })
    // A fresh buffer of its own (small Buffers share a pool, which must not be transferred).
    const out = new Uint8Array(total)
    let at = 0
    for (const part of parts) {
      out.set(part, at)
      at += part.length
    }
    port.postMessage({ first, meta, data: out }, [meta.buffer, out.buffer])
    Atomics.add(counters, ${POSTED}, 1)
    Atomics.notify(counters, ${POSTED})
  }
} catch {
  Atomics.store(counters, ${FAILED}, 1)
  Atomics.notify(counters, ${POSTED})
}
}
`

interface Batch {
  first: number
  meta: Float64Array
  data: Uint8Array
  /** Next thread of this batch to hand out, and where its bytes start in `data`. */
  next: number
  offset: number
}

/** A worker booted ahead of time (starting a thread takes tens of milliseconds), not reading yet. */
export interface ThreadFileReader {
  /** Starts reading the files of `ids`, in that order (ids that are not thread ids are not read). */
  read(ids: readonly string[]): ThreadPrefetch
  /** Lets the worker go without reading anything; settles once its thread has exited. */
  cancel(): Promise<void>
}

/**
 * Boots the worker that reads thread files under `threadsDir`; `read` starts it on a list of ids.
 * `watchFile`: a file name whose presence in each thread's directory is reported too (`watched`).
 * `hold` (tests): the worker blocks before each thread's reads while its first element is 0.
 */
export function bootThreadFileReader(threadsDir: string, options: { watchFile?: string; hold?: SharedArrayBuffer } = {}): ThreadFileReader {
  const shared = new SharedArrayBuffer(4 * Int32Array.BYTES_PER_ELEMENT)
  const counters = new Int32Array(shared)
  const { port1, port2 } = new MessageChannel()
  const worker = new Worker(WORKER, {
    eval: true,
    workerData: { dir: threadsDir, stateFile: STATE_FILE, transcriptFile: TRANSCRIPT_FILE, watchFile: options.watchFile, shared, port: port2, batch: BATCH, ahead: AHEAD, tailBytes: TAIL_BYTES, fields: FIELDS, hold: options.hold },
    transferList: [port2 as MessagePort],
    // By default a worker closes the descriptors it opened when it exits: these are handed over
    // and must outlive it.
    trackUnmanagedFds: false,
    // The worker only makes system calls into a few buffers at a time: a small young generation
    // is enough. (No old-generation cap: the id list grows with the directory.)
    resourceLimits: { maxYoungGenerationSizeMb: 8 },
  })
  // Its errors surface as FAILED (or a stall); an 'error' event must not become an uncaught one.
  worker.on('error', () => {})
  // Held (not unref'd) while it runs: recovery awaits it, and an event loop with nothing else to
  // do must not take the process down under that await. Let go once `close` gives up on it.
  const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()))
  return {
    read: (given) => {
      // The worker joins ids into paths: only thread ids, which cannot leave the directory.
      const ids = given.filter((id) => isThreadId(id))
      port1.postMessage({ ids })
      return reading(ids, { counters, port1, worker, exited })
    },
    cancel: () => {
      port1.postMessage({ cancel: true })
      port1.close()
      return exited
    },
  }
}

/** Starts reading the files of `ids` under `threadsDir` (see `bootThreadFileReader`). */
export function prefetchThreadFiles(threadsDir: string, ids: readonly string[], options: { watchFile?: string; hold?: SharedArrayBuffer } = {}): ThreadPrefetch {
  return bootThreadFileReader(threadsDir, options).read(ids)
}

function reading(
  ids: readonly string[],
  { counters, port1, worker, exited }: { counters: Int32Array; port1: MessagePort; worker: Worker; exited: Promise<void> },
): ThreadPrefetch {
  const order = new Map(ids.map((id, i) => [id, i]))
  let received = 0
  let batch: Batch | null = null
  /** Index into `ids` of the next thread to hand out. */
  let cursor = 0
  let givenUp = false

  function receive(): Batch | null {
    const message = receiveMessageOnPort(port1)
    if (!message) return null
    received++
    Atomics.store(counters, TAKEN, received)
    Atomics.notify(counters, TAKEN)
    const { first, meta, data } = message.message as { first: number; meta: Float64Array; data: Uint8Array }
    return { first, meta, data, next: 0, offset: 0 }
  }

  /** The batch holding `cursor`, waiting for the worker if it has not posted it yet. */
  function current(): Batch | null {
    if (batch && batch.next < batch.meta.length / FIELDS) return batch
    batch = null
    while (!givenUp) {
      const next = receive()
      if (next) return (batch = next)
      if (Atomics.load(counters, FAILED) || received * BATCH >= ids.length) break
      if (Atomics.wait(counters, POSTED, received, STALL_MS) === 'timed-out' && Atomics.load(counters, POSTED) <= received) break
    }
    givenUp = true
    return null
  }

  /** The next thread of `from`; its descriptor is closed unless `keep`. */
  function handOut(from: Batch, keep: boolean): PrefetchedThread {
    const m = from.next * FIELDS
    const stateLength = from.meta[m]!
    const fd = from.meta[m + 1]!
    const out: PrefetchedThread = {}
    if (stateLength === -1) out.state = { missing: true }
    else if (stateLength >= 0) {
      out.state = { bytes: Buffer.from(from.data.buffer, from.data.byteOffset + from.offset, stateLength) }
      from.offset += stateLength
    }
    const watched = from.meta[m + 5]!
    if (watched >= 0) out.watched = watched === 1
    if (fd === -1) out.transcript = { missing: true }
    else if (fd >= 0) {
      const tailLength = from.meta[m + 4]!
      const chunk = Buffer.from(from.data.buffer, from.data.byteOffset + from.offset, tailLength)
      from.offset += tailLength
      if (keep) out.transcript = { fd, size: from.meta[m + 2]!, start: from.meta[m + 3]!, chunk }
      else fs.closeSync(fd)
    }
    from.next++
    return out
  }

  function advance(keep: boolean): PrefetchedThread | undefined {
    const from = current()
    cursor++
    if (!from) return undefined
    const out = handOut(from, keep)
    return keep ? out : undefined
  }

  return {
    take(threadId) {
      const at = order.get(threadId)
      if (at === undefined || at < cursor) return undefined
      while (cursor < at) advance(false)
      return advance(true)
    },
    async close() {
      givenUp = true
      Atomics.store(counters, STOP, 1)
      Atomics.notify(counters, TAKEN)
      // Whatever the worker posted and nobody took still holds open descriptors.
      const release = (): void => {
        for (let from = batch ?? receive(); from; from = receive()) {
          while (from.next < from.meta.length / FIELDS) handOut(from, false)
        }
        batch = null
      }
      let timer: NodeJS.Timeout | undefined
      const stuck = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), CLOSE_WAIT_MS)
      })
      // A worker stuck in a read (a hung network filesystem) must not hold recovery, or the
      // process, up: what it posts after this wait is released when it does exit.
      if (await Promise.race([exited.then(() => false), stuck])) {
        worker.unref()
        release()
        void exited.then(() => {
          release()
          port1.close()
        })
        return
      }
      clearTimeout(timer)
      release()
      port1.close()
    },
  }
}
