/**
 * transcript.jsonl per thread: append-only, one hash-chained entry per line. Side effects.
 *
 * Caveats: one writer per data directory (nothing locks the files); a transcript is read into
 * memory whole when opened without a position, so very long transcripts should be opened from
 * their checkpoint's position.
 *
 * This module is the store's bookkeeping: the threads it has open, what each sync covers, the
 * journal. The work on one file (opening it, checking its anchor, setting bytes aside, bytes
 * another writer appended) is in transcriptFile.ts; the descriptors it holds on the files, bounded,
 * and what each one's lines wait for, in transcriptDescriptors.ts and descriptorPool.ts.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { PrefetchedTranscript } from './prefetch.js'
import type { DataPaths } from './paths.js'
import { assertThreadDir, forgetThreadDir, TRANSCRIPT_FILE, threadFile } from './paths.js'
import { fsyncDir, fsyncDirSync } from './atomicFile.js'
import { encodeEntry, parseTranscriptBytes } from './transcriptLines.js'
import { ForeignJournals, repairFromJournal } from './foreignJournals.js'
import { OwnJournal } from './transcriptJournal.js'
import { recordIdentity } from './journalFiles.js'
import type { SkippedJournal } from './journalFiles.js'
import { eachLimited, poolShare } from './poolShare.js'
import { fdatasync, readRange, writeAll } from './fdio.js'
import { defaultMaxOpenTranscripts } from './descriptorPool.js'
import { TranscriptDescriptors } from './transcriptDescriptors.js'
import type { ForeignTail, Handle, OpenFile } from './transcriptFile.js'
import {
  checkAnchor,
  corrupt,
  isNoEntry,
  NOFOLLOW,
  notOpen,
  OPEN_EXISTING,
  openTranscript,
  reopenTranscript,
  saveTorn,
  settleForeignTail,
} from './transcriptFile.js'
import type { Durability, TranscriptEntry, TranscriptOpenResult, TranscriptPosition, TranscriptStore } from './types.js'
import { EMPTY_POSITION } from './types.js'

export interface JsonlTranscriptOptions {
  /** Where the data directory keeps its threads; every file is `<paths.threads>/<id>/transcript.jsonl`. */
  paths: DataPaths
  /** 'fsync': `sync()` makes appends survive power loss. 'process': they survive a process crash only. */
  durability: Durability
  /**
   * With 'fsync': make appends durable through one journal file (`<root>/journal/`) and fdatasync
   * the thread files in `sync({ files: true })` only (default true). False: every `sync()`
   * fdatasyncs each thread file appended to.
   */
  journal?: boolean
  /**
   * Told of an entry of the journal directory that cannot be read as a journal (a directory, no
   * permission): it is skipped and left as it is, and threads open without its lines.
   */
  onJournalSkipped?: (skipped: SkippedJournal) => void
  /**
   * Told when bytes this store did not write were found past the end of a transcript it had
   * opened (see `append`): they were moved aside to `savedTo` and cut off before its next line.
   */
  onForeignTail?: (found: ForeignTail) => void
  /**
   * Most descriptors the store keeps open on the transcripts of open threads (default: a quarter of
   * the process's descriptor limit, from 16 to 4096; see defaultMaxOpenTranscripts). A thread whose
   * file is not among them (the least recently written are closed first) has it opened again at
   * its next append. Files closed with lines not yet fdatasynced stay open until they are, at most
   * as many again (see descriptorPool.ts).
   */
  maxOpen?: number
}

/**
 * Opens, appends to and syncs `transcript.jsonl` files, keeping at most `maxOpen` descriptors open
 * however many threads are open (see descriptorPool.ts): a thread's file is opened again when it is
 * appended to after its descriptor was given up, at the position the store knows (nothing is read).
 *
 * `append` hands each line to the OS with one `writeSync` (it survives a process crash when it
 * returns). With durability 'fsync', `sync()` makes every line appended so far survive power loss
 * through the transcript journal (one write, one fdatasync; persistence/transcriptJournal.ts), and
 * `sync({ files: true })` fdatasyncs every thread file appended to since the last such sync, a
 * bounded number at a time on the libuv threadpool, then deletes the journal epochs they cover.
 * `open` first writes back, from the journals other processes left, lines a power loss took from
 * the file; then verifies the hash chain from the checkpoint's position on, moves a torn last line
 * aside to `transcript.jsonl.torn-<offset>` and cuts it off.
 *
 * @param options.paths the data directory (see `dataPaths`); thread ids are checked by `threadDir`
 * @param options.durability 'fsync' (survives power loss once `sync` resolves) or 'process'
 * @example
 * const store = createJsonlTranscriptStore({ paths: dataPaths('.spindle'), durability: 'fsync' })
 * store.open('research-3f9k2m1x0q7a')
 * store.append('research-3f9k2m1x0q7a', 'START', { at: Date.now() })
 * await store.sync()
 * @see TranscriptStore for the contract, and `createMemoryTranscriptStore` for the reference backend.
 */
export function createJsonlTranscriptStore(options: JsonlTranscriptOptions): TranscriptStore {
  const { paths, durability } = options
  const files = new Map<string, OpenFile>()
  let newDirs = new Set<string>()
  // Open threads whose file failed an fdatasync (sticky until the thread is closed).
  const failed = new Set<OpenFile>()
  const inFlight = new Set<Promise<unknown>>()
  const dirsInFlight = new Set<Promise<unknown>>()
  /** A thread file's fdatasync failed: no journal epoch may be deleted by this store any more. */
  let pinned: Error | null = null
  let journal = durability === 'fsync' && options.journal !== false ? new OwnJournal(paths.journal) : null
  // What other stores' journals hold: read once, at the first open (whatever this store's own
  // durability, a directory an 'fsync' runtime left after a power loss needs them).
  let foreignJournals: ForeignJournals | null = null
  const foreign = (): ForeignJournals => (foreignJournals ??= new ForeignJournals(paths.journal, journal?.id ?? '\0', options.onJournalSkipped))

  const fileOf = (threadId: string): string => threadFile(paths, threadId, TRANSCRIPT_FILE)

  const descriptors = new TranscriptDescriptors(options.maxOpen ?? defaultMaxOpenTranscripts(), {
    sync: (handle) => syncFile(handle),
    syncFailed: (open, error) => void fileSyncFailed(open, error),
  })

  function openOrNull(file: string): number | null {
    try {
      return descriptors.opening(() => openTranscript(file, OPEN_EXISTING))
    } catch (error) {
      if (isNoEntry(error)) return null
      throw error
    }
  }

  /**
   * Creates the transcript of a new thread, and its folder when missing: never through a link at
   * either (see assertThreadDir and OPEN_EXISTING), and never waiting on a FIFO.
   */
  function create(threadId: string, file: string): number {
    const dir = path.dirname(file)
    // `known`: open() checked the folder a moment ago when it exists; a missing one is made here.
    const { made } = assertThreadDir(paths, threadId, { create: true, known: true })
    const fd = descriptors.opening(() => openTranscript(file, OPEN_EXISTING | fs.constants.O_CREAT))
    if (durability === 'fsync') {
      // A new file's name is durable once its directory is fsynced; a new directory's name once
      // its parent is. sync() does both, once per batch.
      newDirs.add(dir)
      for (const d of made) newDirs.add(path.dirname(d))
    }
    return fd
  }

  function register(threadId: string, file: string, fd: number, position: TranscriptPosition, inherited = true): void {
    const open: OpenFile = { threadId, file, position, handle: null, inode: null, closed: false, syncError: null, appendError: null, identity: null, inherited }
    files.set(threadId, open)
    // A descriptor the prefetch opened counts from here: room is made now (a no-op after `opening`).
    descriptors.adoptOpened(open, fd)
  }

  /** A file's fdatasync failed (through any of its descriptors): sticky, see below. */
  function fileSyncFailed(open: OpenFile, error: unknown): Error {
    // Sticky: after a failed fsync the kernel may have dropped the dirty pages and a retry can
    // succeed without them, so no later sync may vouch for this file (the PostgreSQL "fsyncgate").
    const cause = error as NodeJS.ErrnoException
    open.syncError ??= Object.assign(new Error(`fdatasync of ${open.file} failed: ${cause.message}`, { cause }), {
      code: cause.code,
      path: open.file,
    })
    // An open file stays failed until it is closed (every files sync reports it); a closed one
    // is reported by this round only. Either way `pinned` keeps the journal's copy of its lines.
    if (!open.closed) failed.add(open)
    // And the journal keeps every epoch from here on: it may hold the only durable copy of lines
    // this file dropped, whatever later syncs of other files (or of this one, closed) report.
    if (journal) pinned ??= open.syncError
    return open.syncError
  }

  /** fdatasyncs one descriptor; the caller has counted it in `handle.syncing` (see the files sync). */
  async function syncFile(handle: Handle): Promise<void> {
    const open = handle.owner
    try {
      // Never retried: a retry can succeed without the pages the failed one dropped.
      if (open.syncError) throw open.syncError
      // A retired descriptor takes no more lines: the fdatasync started when the pool gave it up
      // covers them all. A second one could report success where that one failed (the error is
      // reported once per open file).
      const started = handle.flushing
      if (started) await started
      else await fdatasync(handle.fd)
    } catch (error) {
      if (error === open.syncError) throw error
      throw fileSyncFailed(open, error)
    } finally {
      descriptors.syncEnded(handle)
    }
  }

  /** fsyncs directories, a bounded number at a time; rejects with the first failure once all were tried. */
  async function syncDirs(dirs: readonly string[]): Promise<void> {
    const errors: unknown[] = []
    await eachLimited(dirs, poolShare(), (dir) => syncDir(dir).catch((error: unknown) => void errors.push(error)))
    if (errors.length > 0) throw errors[0]
  }

  async function syncDir(dir: string): Promise<void> {
    try {
      await fsyncDir(dir)
    } catch (error) {
      newDirs.add(dir)
      throw error
    }
  }

  function close(threadId: string): void {
    const open = files.get(threadId)
    if (!open) return
    files.delete(threadId)
    forgetThreadDir(paths, threadId)
    failed.delete(open)
    open.closed = true
    // A descriptor the pool gave up earlier with unsynced appends waits for a files sync as it did.
    const released = descriptors.release(open)
    if (!released) return
    const { handle, dirty: wasDirty } = released
    if (wasDirty && journal) {
      // The journal holds its appends: the next files sync fdatasyncs the file, then closes it.
      descriptors.closeAfterSync(handle)
      return
    }
    try {
      // A thread closed between an append and the next sync is made durable here instead.
      if (wasDirty) {
        fs.fdatasyncSync(handle.fd)
        if (newDirs.has(path.dirname(open.file))) for (const dir of newDirs) fsyncDirSync(dir)
      }
    } finally {
      // An fdatasync still running on the threadpool closes the fd when it finishes.
      if (handle.syncing === 0) descriptors.close(handle)
    }
  }

  return {
    open(threadId: string, from?: TranscriptPosition, read?: PrefetchedTranscript): TranscriptOpenResult {
      const already = files.get(threadId)
      if (already) {
        if (read && 'fd' in read) fs.closeSync(read.fd)
        return { position: { ...already.position }, tail: [], torn: null }
      }
      const file = fileOf(threadId)
      const start = from ?? EMPTY_POSITION
      // The folder is checked once here, when the thread's file is opened (a prefetched descriptor
      // comes from a folder the reading worker checked the same way): appends go to the descriptor,
      // or to the same file opened again (reopenTranscript checks it is the same).
      // Rows are a database's read-ahead: never given to a file store, read as if there were none.
      if (read && 'rows' in read) read = undefined
      const fd = read ? ('fd' in read ? read.fd : null) : assertThreadDir(paths, threadId, { writes: true }).missing ? null : openOrNull(file)
      if (fd === null) {
        if (start.seq > 0) {
          throw corrupt(
            file,
            threadId,
            `is missing, but state.json says it holds ${start.seq} entries. ` +
              `Restore the file from a backup; without it the thread cannot be rebuilt.`,
            { seq: start.seq },
          )
        }
        register(threadId, file, create(threadId, file), { ...EMPTY_POSITION }, false)
        return { position: { ...EMPTY_POSITION }, tail: [], torn: null }
      }
      try {
        const records = foreign().records(threadId)
        const restored = records
          ? repairFromJournal(fd, file, records, { fsync: durability === 'fsync', saveAside: (offset, length) => saveTorn(fd, file, offset, length, durability === 'fsync') })
          : null
        // A restored file is not what the prefetch read.
        if (restored) read = undefined
        const size = read && 'fd' in read ? read.size : fs.fstatSync(fd).size
        if (size < start.bytes) {
          throw corrupt(
            file,
            threadId,
            `is truncated: state.json says ${start.bytes} bytes, file has ${size}. ` +
              `Restore the file from a backup, or inspect what is left with readThreadFiles() from the spindle API.`,
            { bytes: start.bytes, size },
          )
        }
        // One read for the anchor's line (it ends at start.bytes, usually within 4 KiB) and the tail after it.
        const readFrom = start.seq > 0 ? Math.max(0, start.bytes - 4096) : start.bytes
        // A prefetched tail that covers the range serves it (nothing appends before open returns).
        const prefetched = read && 'fd' in read && read.start <= readFrom && read.start + read.chunk.length === size ? read : null
        const bytes = prefetched ? prefetched.chunk.subarray(readFrom - prefetched.start) : readRange(fd, readFrom, size)
        if (start.seq > 0) checkAnchor(fd, file, threadId, start, { start: readFrom, chunk: bytes })
        const parsed = parseTranscriptBytes(bytes.subarray(start.bytes - readFrom), start, file)
        let torn: TranscriptOpenResult['torn'] = null
        if (parsed.torn) {
          // Move the fragment aside before cutting it, so the next append starts a clean line and
          // nothing is lost if the fragment turns out to matter.
          const savedTo = saveTorn(fd, file, parsed.torn.offset, parsed.torn.bytes, durability === 'fsync')
          fs.ftruncateSync(fd, parsed.position.bytes)
          if (durability === 'fsync') fs.fdatasyncSync(fd)
          torn = { bytes: parsed.torn.bytes, savedTo }
        }
        register(threadId, file, fd, parsed.position)
        return {
          position: { ...parsed.position },
          tail: parsed.entries,
          torn,
          ...(restored ? { restored } : {}),
          ...(parsed.stale.length > 0 ? { stale: parsed.stale } : {}),
        }
      } catch (error) {
        fs.closeSync(fd)
        throw error
      }
    },

    append(threadId: string, type: string, data: unknown, ts: Date = new Date()): TranscriptEntry {
      const open = files.get(threadId)
      if (!open) throw notOpen(threadId)
      if (open.appendError) {
        throw corrupt(
          open.file,
          threadId,
          'has an incomplete line from a failed append that could not be cut off. Close the thread and open it again to recover.',
        )
      }
      const handle = descriptors.of(open, () => reopenTranscript(open, durability === 'fsync', options.onForeignTail))
      const fd = handle.fd
      // Read before the line is written: a failing fstat must not leave a line the journal lacks.
      const identity = journal ? (open.identity ??= recordIdentity(fd, paths.journal)) : null
      // One fstat per line, for files this store did not create: a new file has had no other writer.
      if (open.inherited) settleForeignTail(open, fd, durability === 'fsync', options.onForeignTail)
      const encoded = encodeEntry(open.position, type, data, ts)
      const entry = encoded.entry
      // Written as a string (no Buffer per line); a short write, if any, is finished from bytes.
      const length = Buffer.byteLength(encoded.line, 'utf8')
      try {
        const written = fs.writeSync(fd, encoded.line)
        if (written < length) writeAll(fd, Buffer.from(encoded.line, 'utf8').subarray(written))
      } catch (error) {
        // A partial write (ENOSPC, EIO) would leave half a line that the next append lands after,
        // which reads back as real damage rather than a torn tail. Cut it off now.
        try {
          fs.ftruncateSync(fd, open.position.bytes)
        } catch (cutError) {
          open.appendError = cutError
        }
        throw error
      }
      if (journal && identity) journal.add(threadId, identity, open.position.bytes, encoded.line)
      open.position = { seq: entry.seq, hash: entry.hash, bytes: open.position.bytes + length }
      if (durability === 'fsync') descriptors.appended(handle)
      return entry
    },

    position(threadId: string): TranscriptPosition {
      const open = files.get(threadId)
      if (!open) throw notOpen(threadId)
      return { ...open.position }
    },

    async sync(options?: { files?: boolean; threads?: readonly string[] }): Promise<void> {
      if (durability !== 'fsync') return
      const dirs = [...newDirs]
      newDirs = new Set()
      // A bounded number at a time, as the files are: a burst of new threads must not open a
      // descriptor per new folder at once (a spawn of thousands would run out of them).
      const dirSyncs: Promise<unknown>[] = dirs.length === 0 ? [] : [syncDirs(dirs)]
      for (const d of dirSyncs) {
        dirsInFlight.add(d)
        void d.then(
          () => dirsInFlight.delete(d),
          () => dirsInFlight.delete(d),
        )
      }
      // A sync that finds nothing new must still not resolve before an earlier one that holds
      // this caller's appends.
      let earlier = [...inFlight]
      let parts: Promise<unknown>[]
      let finish: (() => void) | null = null
      const ownJournal = journal
      if (options?.threads && !options.files) {
        // The named threads' own files, whatever they hold: their state.json is about to point
        // into them. Out of `dirty` (a files sync in flight or to come waits for this one before
        // it deletes a journal epoch, as for one of its own: it is in `inFlight`), no rotation.
        // A thread whose descriptor the pool gave up is not opened again (that would take
        // descriptors past the pool's bound): its lines are durable already, or wait in a retired
        // descriptor (taken here), or in one a sync under way fdatasyncs — that sync is waited for.
        const current: Handle[] = []
        let givenUp = false
        for (const id of options.threads) {
          const open = files.get(id)
          if (!open) continue
          if (open.handle) current.push(open.handle)
          else givenUp = true
        }
        const batch = [...current, ...descriptors.takeThreads(new Set(options.threads), current)]
        for (const handle of batch) handle.syncing++
        earlier = [...dirsInFlight].filter((d) => !dirSyncs.includes(d)).concat(givenUp ? earlier : [])
        const errors: unknown[] = []
        parts = [
          eachLimited(batch, poolShare(), (handle) => syncFile(handle).catch((error: unknown) => void errors.push(error))).then(() => {
            if (errors.length > 0) throw errors[0]
          }),
        ]
      } else if (ownJournal && !options?.files) {
        // One write and one fdatasync of the journal vouch for every line appended so far (the
        // journal orders its own syncs). It does not wait for a files sync in flight, which takes
        // a whole round of thread files, only for the directories that name new files.
        earlier = [...dirsInFlight].filter((d) => !dirSyncs.includes(d))
        parts = [
          ownJournal.sync().catch((error: unknown) => {
            // After a failed fdatasync the kernel may have dropped the pages (see syncFile): from
            // here on every sync fdatasyncs the thread files themselves, which still hold every line.
            // The journal's files stay for the next runtime; its descriptors are let go.
            if (journal === ownJournal) {
              journal = null
              ownJournal.close(false)
            }
            throw error
          }),
        ]
      } else {
        // Cleared first: appends made while these fdatasyncs run belong to the next sync.
        const batch = descriptors.takeBatch()
        // Records added from here on go to a new epoch; the ones before are deleted once these
        // fdatasyncs succeed.
        finish = ownJournal ? ownJournal.rotate() : null
        // Counted now, not when each fdatasync starts: a bounded number run at once, and a thread
        // closed meanwhile must find its descriptor still held (close leaves a counted fd open).
        for (const handle of batch) handle.syncing++
        // Every file is tried, whatever fails: a failure stays with its file (see syncFile).
        const errors: unknown[] = []
        parts = [
          eachLimited(batch, poolShare(), (handle) => syncFile(handle).catch((error: unknown) => void errors.push(error))).then(() => {
            if (errors.length > 0) throw errors[0]
          }),
        ]
      }
      const work = Promise.allSettled([...parts, ...dirSyncs, ...earlier])
      inFlight.add(work)
      let results: PromiseSettledResult<unknown>[]
      try {
        results = await work
      } finally {
        inFlight.delete(work)
      }
      const rejected = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
      if (rejected) throw rejected.reason
      // With the journal, a thread file that failed does not stop other threads' effects: the
      // journal holds its lines (pinned). Files syncs (checkpoints) keep reporting it.
      if (options?.files || !ownJournal) for (const open of failed) throw open.syncError
      // Every line the retired journal epochs hold is now in a durable thread file.
      if (!pinned) finish?.()
    },

    async settleJournals(mayWriteBack?: (threadId: string) => boolean): Promise<{ removed: string[]; kept: string[] }> {
      return foreign().settle(fileOf, (threadId, records) => {
        // A thread this store has open was written back when it was opened.
        if (files.has(threadId) || !mayWriteBack?.(threadId)) return false
        const file = fileOf(threadId)
        let fd: number
        try {
          // A linked folder is named when the thread is opened or read; its journal lines stay.
          if (assertThreadDir(paths, threadId).missing) return false
          fd = openTranscript(file, OPEN_EXISTING)
        } catch {
          return false
        }
        try {
          return repairFromJournal(fd, file, records, { fsync: true, saveAside: (offset, length) => saveTorn(fd, file, offset, length, durability === 'fsync') }) !== null
        } catch {
          // Left for `spindle doctor` to name; the journal stays.
          return false
        } finally {
          fs.closeSync(fd)
        }
      })
    },

    read(threadId: string): { entries: TranscriptEntry[]; torn: { bytes: number } | null; stale?: Array<{ offset: number; bytes: number; seq: number }> } {
      const file = fileOf(threadId)
      let fd: number | null
      try {
        fd = assertThreadDir(paths, threadId).missing ? null : openTranscript(file, fs.constants.O_RDONLY | NOFOLLOW)
      } catch (error) {
        if (!isNoEntry(error)) throw error
        fd = null
      }
      if (fd === null) throw corrupt(file, threadId, `does not exist. Check the thread id, or whether the thread's directory was removed.`)
      try {
        const stat = fs.fstatSync(fd)
        const parsed = parseTranscriptBytes(readRange(fd, 0, stat.size), EMPTY_POSITION, file)
        return { entries: parsed.entries, torn: parsed.torn ? { bytes: parsed.torn.bytes } : null, ...(parsed.stale.length > 0 ? { stale: parsed.stale } : {}) }
      } finally {
        fs.closeSync(fd)
      }
    },

    releaseDescriptors(): number {
      return descriptors.shed()
    },

    close,

    closeAll(): void {
      let first: unknown = null
      for (const threadId of [...files.keys()]) {
        try {
          close(threadId)
        } catch (error) {
          first ??= error
        }
      }
      // Descriptors retired after their last files sync: made durable here, so the journal can go.
      let undecided = false
      for (const handle of descriptors.takeClosing()) {
        try {
          if (handle.owner.syncError) throw handle.owner.syncError
          if (handle.syncing > 0) {
            // Still being fdatasynced on the pool: it closes itself when that ends, and the
            // journal stays, since this cannot wait for the outcome.
            undecided = true
            continue
          }
          fs.fdatasyncSync(handle.fd)
        } catch (error) {
          first ??= error
        } finally {
          if (handle.syncing === 0) descriptors.close(handle)
        }
      }
      try {
        if (first === null && newDirs.size > 0) for (const dir of newDirs) fsyncDirSync(dir)
      } catch (error) {
        first ??= error
      }
      // A sync still in flight (a files sync's fdatasyncs, a directory's fsync) may be what makes
      // a line durable: its journal records must outlive it.
      if (inFlight.size > 0 || dirsInFlight.size > 0) undecided = true
      // Only when every thread file is durable do its journal's records become redundant.
      const ownJournal = journal
      journal = null
      try {
        ownJournal?.close(first === null && !undecided && failed.size === 0 && !pinned)
      } catch (error) {
        first ??= error
      }
      if (first !== null) throw first
    },
  }
}
