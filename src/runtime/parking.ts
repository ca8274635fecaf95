/**
 * Storage parking: a thread whose write failed for want of storage (a full disk, an I/O error, a
 * file system gone read-only, no file descriptors left) is parked at its last recorded input and
 * tried again later, backing off, outside its supervisor's restart intensity. A cancel that
 * reaches a parked thread waits with it and is delivered as soon as it can write again. Owns the
 * retry timers.
 *
 * A full disk is waited out however long it lasts: someone is told to free space, and a thread
 * has nowhere better to be. A descriptor shortage is not: the limit it hits is the process's, set
 * when it started, and every thread parked on it would try again forever. So after
 * DESCRIPTOR_GIVE_UP_MS of it a thread stops here (its `done` rejects with DESCRIPTORS_EXHAUSTED,
 * its lease goes), holding nothing, at its last durable step: `rt.recover()` or the next runtime
 * carries it on.
 */
import type { Clock } from '../base/clock.js'
import { threadMachine } from '../../machines/thread.machine.js'
import { DESCRIPTOR_GIVE_UP_MS, isStorageFailure, storageFailureOf, threadParked, threadStoppedForDescriptors } from '../../persistence/storageFailure.js'
import type { StorageShortage } from '../../persistence/storageFailure.js'
import type { LiveThread } from '../thread/liveThread.js'
import type { Emitter, Lifecycle, Reporter } from './events.js'
import type { ThreadTable } from './threadTable.js'
import { startThread } from './threadStarter.js'

/** A thread parked for want of storage is tried again after this, doubling up to the max. */
const STORAGE_RETRY_FIRST_MS = 250
const STORAGE_RETRY_MAX_MS = 10_000
const STORAGE_REPORT_EVERY_MS = 60_000

export interface ParkingDeps {
  table: ThreadTable
  clock: Clock
  bus: Reporter & Emitter
  life: Lifecycle
  /** Whether a cancel of `id` must wait for its children (open ones, or spawns under way). */
  hasChildrenToSettle(id: string): boolean
}

/** A thread's storage episode: the retry timer (null while unparked), the attempts so far, a cancel waiting. */
interface Episode {
  timer: unknown
  attempts: number
  since: number
  errno: string
  /** What the last failure lacked, and since when failures have lacked it without a break. */
  shortage: StorageShortage
  shortSince: number
  /** The last failure (for the report of a thread that stops for want of descriptors). */
  error: unknown
  cancel?: { reason: string; by: string }
  /** Tried at once because another thread's probe got through (see `retrySoon`). */
  hurried?: boolean
}

export class Parking {
  /** When each thread's storage failure was last told to `onProblem`. */
  private readonly toldAt = new Map<string, number>()
  private readonly episodes = new Map<string, Episode>()

  constructor(private readonly deps: ParkingDeps) {}

  /**
   * A write of the thread's failed for want of storage: it is parked at its last recorded input,
   * and tried again later, backing off. Told to the host once per episode. A thread that meets it
   * again after a retry stays in the same episode.
   */
  storageFailed(thread: LiveThread, error: unknown): void {
    const { clock, bus } = this.deps
    if (this.deps.life.closed || thread.stopped) return
    thread.park()
    const episode = this.episodes.get(thread.id)
    if (episode && episode.timer !== null) return
    const attempts = (episode?.attempts ?? 0) + 1
    const now = clock.now()
    const shortage = storageFailureOf(error)?.kind ?? 'disk'
    if (attempts === 1) {
      const parked = threadParked(thread.id, error, STORAGE_RETRY_MAX_MS)
      // A disk on the edge of full lets a thread go on and stop again and again (a journal epoch
      // deleted frees a little): the host hears of it once a minute, and sees each park as an event.
      const told = this.toldAt.get(thread.id)
      if (told === undefined || now - told >= STORAGE_REPORT_EVERY_MS) {
        this.toldAt.set(thread.id, now)
        bus.report(parked, thread.id)
      }
      bus.emit({ type: 'thread_parked', at: now, threadId: thread.id, error: { code: parked.code as 'STORAGE_FAILED' | 'DESCRIPTORS_EXHAUSTED', message: parked.message } })
    }
    const delay = Math.min(STORAGE_RETRY_MAX_MS, STORAGE_RETRY_FIRST_MS * 2 ** (attempts - 1))
    const timer = clock.setTimeout(() => this.retry(thread.id), delay)
    this.episodes.set(thread.id, {
      ...episode,
      // Tried in a hurry and failed: its own backoff again, and its next success wakes the others.
      hurried: false,
      timer,
      attempts,
      since: episode?.since ?? now,
      errno: episode?.errno ?? storageFailureOf(error)?.code ?? 'unknown',
      shortage,
      shortSince: episode && episode.shortage === shortage ? episode.shortSince : now,
      error,
    })
  }

  /** Parks live thread `id` if `error` is a storage failure; true if it did. */
  parkForStorage(id: string, error: unknown): boolean {
    const thread = this.deps.table.get(id)
    if (!thread || !isStorageFailure(error)) return false
    this.storageFailed(thread, error)
    return true
  }

  /**
   * Delivers a cancel to a live thread; to a parked one, it is kept with its episode — a cancel is
   * an input like any other, recorded before it acts — and delivered as soon as the thread can
   * write again, which is tried at once. False when the thread took no cancel.
   */
  cancel(thread: LiveThread, reason: string, by: string): boolean {
    if (!thread.parked) {
      const awaitChildren = this.deps.hasChildrenToSettle(thread.id)
      try {
        return thread.deliver({ type: 'CANCEL', at: this.deps.clock.now(), reason, by, ...(awaitChildren ? { awaitChildren } : {}) })
      } catch (error) {
        // Not recorded for want of storage: the thread is parked now, and the cancel waits with it.
        if (!thread.parked) throw error
      }
    }
    const episode = this.episodes.get(thread.id)
    if (!episode) return false
    episode.cancel ??= { reason, by }
    if (episode.timer !== null) this.deps.clock.clearTimeout(episode.timer)
    this.retry(thread.id)
    return true
  }

  /**
   * Tries a parked thread again. A note first, as a probe: it costs one line, where carrying the
   * thread on would cost a model call whose reply might not be recordable either.
   */
  private retry(id: string): void {
    const episode = this.episodes.get(id)
    if (!episode || this.deps.life.closed) return
    episode.timer = null
    const thread = this.deps.table.get(id)
    if (!thread || thread.stopped || !thread.parked) {
      this.episodes.delete(id)
      return
    }
    const at = this.deps.clock.now()
    if (episode.shortage === 'descriptors' && at - episode.shortSince >= DESCRIPTOR_GIVE_UP_MS) {
      this.stopShortOfDescriptors(thread, episode)
      return
    }
    try {
      if (!thread.unpark(threadMachine, ['storage_resumed', { at, since: episode.since, attempts: episode.attempts, errno: episode.errno }])) return
    } catch (error) {
      // The probe failed: `storageFailed` has set the next attempt. Anything else is reported.
      if (!isStorageFailure(error)) this.deps.bus.report(error, id)
      return
    }
    this.episodes.delete(id)
    this.deps.bus.emit({ type: 'thread_unparked', at, threadId: id, since: episode.since, attempts: episode.attempts })
    // Parked before its START could be written: it starts now, as recovery starts a created thread.
    if (thread.status === 'created') startThread(thread, this.deps.clock.now())
    if (episode.cancel) this.cancel(thread, episode.cancel.reason, episode.cancel.by)
    if (!episode.hurried) this.retrySoon(episode.shortage)
  }

  /**
   * One thread's probe got through: the storage is back for the others parked for the same want
   * (a database that answers again, a disk with room), which would otherwise each wait out their
   * own backoff, up to STORAGE_RETRY_MAX_MS. Tried on the next turn of the event loop, one after
   * another: one that fails again backs off as before.
   */
  private retrySoon(shortage: StorageShortage): void {
    for (const [other, episode] of this.episodes) {
      if (episode.timer === null || episode.shortage !== shortage || episode.hurried) continue
      episode.hurried = true
      this.deps.clock.clearTimeout(episode.timer)
      episode.timer = this.deps.clock.setTimeout(() => this.retry(other), 0)
    }
  }

  /**
   * A thread short of descriptors for DESCRIPTOR_GIVE_UP_MS stops in this process where it stands:
   * nothing is written (nothing could be), its lease goes with it, and its `done` says why and what
   * to do. A cancel that waited with it is named, not recorded.
   */
  private stopShortOfDescriptors(thread: LiveThread, episode: Episode): void {
    this.episodes.delete(thread.id)
    const stopped = threadStoppedForDescriptors(thread.id, episode.error, episode.cancel)
    this.deps.bus.report(stopped, thread.id)
    thread.detach(stopped)
  }

  /** The thread stopped here: its episode and report time go. */
  forget(id: string): void {
    this.toldAt.delete(id)
    const episode = this.episodes.get(id)
    if (episode) {
      if (episode.timer !== null) this.deps.clock.clearTimeout(episode.timer)
      this.episodes.delete(id)
    }
  }

  close(): void {
    for (const episode of this.episodes.values()) if (episode.timer !== null) this.deps.clock.clearTimeout(episode.timer)
    this.episodes.clear()
  }
}
