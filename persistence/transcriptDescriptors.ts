/**
 * The descriptors a JSONL transcript store holds on its threads' files, and what each one's lines
 * wait for. Side effects (opens, fdatasyncs and closes descriptors).
 *
 * A thread's file is opened again at its next line once the pool (descriptorPool.ts) gave its
 * descriptor up, so a descriptor outlives its thread's use of it while an fdatasync needs it: one
 * given up with lines no fdatasync covers yet is fdatasynced in the background (the journal
 * vouches for them meanwhile) and closed then; one under an fdatasync is closed when that ends
 * (its number could by then name another file). The store decides what a sync covers; this module
 * keeps the sets it takes them from.
 */
import fs from 'node:fs'
import { DescriptorPool } from './descriptorPool.js'
import { poolShare } from './poolShare.js'
import { isDescriptorShortage } from './storageFailure.js'
import type { Handle, OpenFile } from './transcriptFile.js'

/** What the descriptors ask of their store, which keeps what a failed fdatasync means. */
export interface DescriptorPorts {
  /** fdatasyncs one descriptor, counted in `handle.syncing` by the caller (the store's syncFile). */
  sync(handle: Handle): Promise<void>
  /** A file's fdatasync failed through one of its descriptors: sticky for the file. */
  syncFailed(open: OpenFile, error: unknown): void
}

export class TranscriptDescriptors {
  // Only tracked with durability 'fsync': with 'process' there is nothing for a sync to do.
  /** Descriptors appended through since their last fdatasync. */
  private dirty = new Set<Handle>()
  /**
   * Descriptors retired (their thread closed, or the pool gave them up) with appends no fdatasync
   * covers yet: the next files sync fdatasyncs and closes them.
   */
  private closing = new Set<Handle>()
  /** Of those, the ones the pool gave up, waiting for the fdatasync started ahead of that sync (see flushAhead). */
  private readonly ahead = new Set<Handle>()
  private aheadRunning = 0
  private readonly pool: DescriptorPool

  constructor(
    maxOpen: number,
    private readonly ports: DescriptorPorts,
  ) {
    this.pool = new DescriptorPool(maxOpen, {
      idle: (handle) => handle.syncing === 0 && !this.dirty.has(handle),
      waiting: () => this.closing,
      retire: (handle) => this.evict(handle, true),
      flush: (handle) => this.flushNow(handle),
    })
  }

  /** The thread's descriptor is `fd` from now on (room was made before it was opened). */
  adopt(open: OpenFile, fd: number): Handle {
    const handle: Handle = { fd, owner: open, syncing: 0, retired: false }
    open.handle = handle
    this.pool.adopt(handle)
    return handle
  }

  /** A descriptor the store did not open through `opening` (a prefetched one) counts from here. */
  adoptOpened(open: OpenFile, fd: number): Handle {
    this.pool.makeRoom()
    return this.adopt(open, fd)
  }

  close(handle: Handle): void {
    this.pool.closed()
    fs.closeSync(handle.fd)
  }

  /**
   * Opens a descriptor (`open`) within the pool's bound. Short of descriptors (EMFILE, ENFILE), the
   * pool gives up its idle ones, so that the store never starves the process of what it holds
   * itself, and the open is tried once more; failing again, the error is thrown as it is.
   */
  opening<T>(open: () => T): T {
    this.pool.makeRoom()
    try {
      return open()
    } catch (error) {
      if (!isDescriptorShortage(error) || this.pool.shed() === 0) throw error
      return open()
    }
  }

  /** The thread's descriptor, its file opened again (`reopen`) if the pool gave the last one up. */
  of(open: OpenFile, reopen: () => number): Handle {
    if (open.handle) {
      this.pool.touch(open.handle)
      return open.handle
    }
    return this.adopt(open, this.opening(reopen))
  }

  /** A line was written through `handle` (durability 'fsync'): the next files sync covers it. */
  appended(handle: Handle): void {
    this.dirty.add(handle)
  }

  /**
   * The thread closed: its descriptor stops being its own. Returns it, and whether lines written
   * through it wait for an fdatasync; null when the pool had given it up (a descriptor given up
   * with unsynced lines waits in `closing` as it did).
   */
  release(open: OpenFile): { handle: Handle; dirty: boolean } | null {
    const handle = this.retire(open)
    return handle ? { handle, dirty: this.dirty.delete(handle) } : null
  }

  /** A released descriptor whose lines the journal holds: the next files sync fdatasyncs and closes it. */
  closeAfterSync(handle: Handle): void {
    this.closing.add(handle)
  }

  /**
   * What a files sync fdatasyncs: every descriptor appended through since the last one, and the
   * retired ones waiting. Cleared: appends made while these fdatasyncs run belong to the next sync.
   */
  takeBatch(): Handle[] {
    const batch = [...this.dirty, ...this.closing]
    this.dirty = new Set()
    this.closing = new Set()
    return batch
  }

  /**
   * For a sync of just these threads' files (their state.json is about to point into them): their
   * `current` descriptors come off `dirty` (that sync covers them), and their retired ones waiting
   * in `closing` are taken out of it and returned, for that sync to fdatasync too.
   */
  takeThreads(threadIds: ReadonlySet<string>, current: Iterable<Handle>): Handle[] {
    for (const handle of current) this.dirty.delete(handle)
    const waiting = [...this.closing].filter((handle) => threadIds.has(handle.owner.threadId))
    for (const handle of waiting) this.closing.delete(handle)
    return waiting
  }

  /** Retired descriptors no files sync took (closeAll makes them durable itself). */
  takeClosing(): Handle[] {
    const left = [...this.closing]
    this.closing = new Set()
    return left
  }

  /** An fdatasync on `handle` ended: a retired one nothing waits on any more is closed. */
  syncEnded(handle: Handle): void {
    handle.syncing--
    // A retired descriptor waiting in `closing` is the next files sync's to fdatasync, then close.
    if (handle.retired && handle.syncing === 0 && !this.closing.has(handle)) this.close(handle)
  }

  /** The process is short of descriptors: gives up those nothing needs now (see DescriptorPool.shed). */
  shed(): number {
    return this.pool.shed()
  }

  /** The thread's descriptor stops being its own (the thread closed, or the pool gave it up). */
  private retire(open: OpenFile): Handle | null {
    const handle = open.handle
    if (!handle) return null
    open.handle = null
    this.pool.leave(handle)
    handle.retired = true
    return handle
  }

  /**
   * The pool gives a thread's descriptor up: closed now when idle; with appends no fdatasync covers
   * yet, kept in `closing` and (with `flush`) fdatasynced ahead of the next files sync; under an
   * fdatasync, closed when that ends. Its file's device and inode are kept, so that the file opened
   * again at the next append can be checked to be the same.
   */
  private evict(handle: Handle, flush: boolean): void {
    const open = handle.owner
    if (!open.inode) {
      const stat = fs.fstatSync(handle.fd)
      open.inode = { dev: stat.dev, ino: stat.ino }
    }
    this.retire(open)
    if (this.dirty.delete(handle)) {
      this.closing.add(handle)
      if (flush) {
        this.ahead.add(handle)
        this.flushAhead()
      }
    } else if (handle.syncing === 0) this.close(handle)
  }

  /**
   * fdatasyncs descriptors the pool gave up, a bounded number at a time on the threadpool (as a
   * files sync does, leaving room for the journal's), so that each is closed as soon as its lines
   * are durable rather than at the next checkpoint round: when more threads write at once than the
   * pool holds, descriptors come back at the disk's pace, not the rounds'. One a files sync took
   * meanwhile is left to it; one taken while its fdatasync runs waits for that one (`flushing`), so
   * a failure is seen by every sync that needs the lines.
   */
  private flushAhead(): void {
    for (const handle of this.ahead) {
      if (this.aheadRunning >= poolShare()) return
      this.ahead.delete(handle)
      if (!this.closing.has(handle) || handle.syncing > 0) continue
      this.aheadRunning++
      handle.syncing++
      const flushed = this.ports.sync(handle)
      handle.flushing = flushed
      flushed
        .then(
          () => {
            // Durable: closed now, unless a files sync took it meanwhile (that closes it).
            if (this.closing.delete(handle) && handle.syncing === 0) this.close(handle)
          },
          // Sticky with its file (see the store's syncFile): the next files sync reports it, then closes it.
          () => {},
        )
        .finally(() => {
          this.aheadRunning--
          this.flushAhead()
        })
    }
  }

  /**
   * Makes the appends through a descriptor no fdatasync is under way on durable now, then closes
   * it: the pool's last resort for room (see descriptorPool.ts). A failure is the file's, sticky,
   * as in a files sync; the journal keeps its lines.
   */
  private flushNow(handle: Handle): void {
    if (!handle.retired) this.evict(handle, false)
    this.ahead.delete(handle)
    if (!this.closing.delete(handle)) return
    try {
      if (!handle.owner.syncError) fs.fdatasyncSync(handle.fd)
    } catch (error) {
      this.ports.syncFailed(handle.owner, error)
    } finally {
      this.close(handle)
    }
  }
}
