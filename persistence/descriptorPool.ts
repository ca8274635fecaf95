/**
 * The descriptors a transcript store holds, bounded: an open thread does not keep its file open
 * for as long as it lives, or a process would run out of descriptors at its descriptor limit
 * (`ulimit -n`) of live threads, and then could not even write the checkpoints that let threads
 * end. The pool keeps the files of the threads that wrote last open (the least recently used is
 * given up first); a thread whose file was given up has it opened again at its next append (one
 * open, nothing read: see reopenTranscript). Side effects (reads /proc/self/limits once).
 *
 * A descriptor is never closed while lines written through it may not be durable, nor under an
 * fdatasync queued for it (see Handle): with durability 'fsync', one given up with unsynced lines
 * is fdatasynced first, in the background (its store starts that at once), and closed then. So two
 * bounds: at most `max` current descriptors, and at most `max` given up and not closed yet; past
 * the second, one is made durable at once (a blocking fdatasync: the price of more threads
 * writing at once than the disk keeps up with).
 */
import fs from 'node:fs'
import type { Handle } from './transcriptFile.js'

/** What the pool asks of its store, which knows what each descriptor's lines wait for. */
export interface PoolPorts {
  /** No line written through it waits for an fdatasync, and none is under way: closing it costs nothing. */
  idle(handle: Handle): boolean
  /** Retired descriptors not closed yet because their lines wait for an fdatasync, oldest first. */
  waiting(): Iterable<Handle>
  /** Gives up a thread's current descriptor: closed now if idle, otherwise once its lines are durable. */
  retire(handle: Handle): void
  /** Makes the lines of a descriptor no fdatasync is under way on durable now, and closes it (retiring it first if current). */
  flush(handle: Handle): void
}

export class DescriptorPool {
  /** The current descriptors of open threads, least recently used first. */
  private readonly current = new Set<Handle>()
  /** Every descriptor the store holds on transcripts: current ones and retired ones not closed yet. */
  held = 0
  /** The most held at once since the store opened (for the benchmark and the tests). */
  peak = 0

  constructor(
    /** Most current descriptors, and most retired ones not closed yet, at once. */
    readonly max: number,
    private readonly ports: PoolPorts,
  ) {}

  /** A descriptor just opened (the caller made room first). */
  adopt(handle: Handle): void {
    this.current.add(handle)
    this.held++
    if (this.held > this.peak) this.peak = this.held
  }

  /** Its thread used it: the last to be given up. */
  touch(handle: Handle): void {
    this.current.delete(handle)
    this.current.add(handle)
  }

  /** No longer a current descriptor (retired by its store). */
  leave(handle: Handle): void {
    this.current.delete(handle)
  }

  /** A descriptor the store held was closed. */
  closed(): void {
    this.held--
  }

  /** Current descriptors (of open threads) held now. */
  get size(): number {
    return this.current.size
  }

  /**
   * Before a descriptor is opened: at `max` current ones, the least recently used that no
   * fdatasync is under way on is given up; at `max` retired ones not closed yet, the oldest is made
   * durable and closed now. When every candidate is under an fdatasync already, the open goes one
   * past the bound (the next one makes room again).
   */
  makeRoom(): void {
    while (this.current.size >= this.max) {
      const victim = this.leastRecent()
      if (!victim) break
      this.ports.retire(victim)
    }
    while (this.held - this.current.size >= this.max) {
      const before = this.held
      const flushable = this.firstFlushable()
      if (!flushable) break
      this.ports.flush(flushable)
      // A descriptor that could not be closed stays counted: no loop on it.
      if (this.held === before) break
    }
  }

  /**
   * A descriptor could not be opened for want of descriptors (EMFILE, ENFILE): gives up every idle
   * one, so that this store's own never stand in the way of what the process must open; when none
   * is idle, makes one retired descriptor durable and closes it. Returns how many were closed.
   */
  shed(): number {
    const before = this.held
    for (const handle of [...this.current]) if (this.ports.idle(handle)) this.ports.retire(handle)
    if (this.held === before) {
      const victim = this.firstFlushable() ?? this.leastRecent()
      if (victim) this.ports.flush(victim)
    }
    return before - this.held
  }

  private leastRecent(): Handle | null {
    for (const handle of this.current) if (handle.syncing === 0) return handle
    return null
  }

  private firstFlushable(): Handle | null {
    for (const handle of this.ports.waiting()) if (handle.syncing === 0) return handle
    return null
  }
}

let limitRead: number | null | undefined

/**
 * The process's descriptor limit (the soft RLIMIT_NOFILE, which Node raises to the hard one when
 * it starts), or null where it cannot be read (no /proc) or is unlimited.
 */
export function descriptorLimit(): number | null {
  if (limitRead !== undefined) return limitRead
  limitRead = null
  try {
    const line = fs
      .readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'))
    const soft = Number(line?.slice('Max open files'.length).trim().split(/\s+/)[0])
    if (Number.isInteger(soft) && soft > 0) limitRead = soft
  } catch {
    // Not Linux: the fallback below.
  }
  return limitRead
}

/** The default of `maxOpenTranscripts` where the descriptor limit cannot be read. */
const FALLBACK_MAX_OPEN = 1024
/** Descriptors are cheap; reopening a file costs one open. More than this buys nothing measurable. */
const CEILING_MAX_OPEN = 4096

/**
 * How many transcript descriptors a store holds by default: a quarter of the process's descriptor
 * limit (the rest is the host's, SQLite's, and the checkpoint rounds'), at most 4096, at least 16.
 */
export function defaultMaxOpenTranscripts(): number {
  const limit = descriptorLimit()
  if (limit === null) return FALLBACK_MAX_OPEN
  return Math.max(16, Math.min(CEILING_MAX_OPEN, Math.floor(limit / 4)))
}
