/**
 * Group commit: many threads' writes made durable together, so one round of fsyncs serves every
 * thread that is waiting. Two levels, because they cost very different amounts:
 *
 * - **logged** — the transcript lines appended so far are durable (one write and fdatasync of the
 *   transcript journal; see persistence/transcriptJournal.ts). The transcript is the source of
 *   truth: the state a thread is in is a pure function of its recorded inputs, so once they are
 *   durable the state that starts an effect is durable too. Effects wait for this level
 *   (write-ahead).
 * - **checkpointed** — additionally the thread files are fdatasynced (so the journal epochs before
 *   them can go), every staged state.json is replaced atomically (temp file, fsync, rename,
 *   directory fsync) and the registry updated in one transaction. This is the fast
 *   path to resume; it runs continuously in the background and never blocks an effect. `spawn` and
 *   `done` wait for it, so what a host is told agrees with every store.
 *
 * Order that recovery relies on: a state.json is published only after the transcript it points
 * into is durable, and the registry is updated only after state.json, so the registry is never
 * ahead of state.json and state.json never ahead of the transcript. Anything the transcript holds
 * beyond state.json is replayed on recovery.
 */
import type { SuspendReason } from '../machines/threadContext.js'
import { SpindleError } from '../src/base/errors.js'
import { isDescriptorShortage } from './storageFailure.js'
import type { CheckpointStore, Cost, RegisterThread, Registry, ThreadStatus, TranscriptStore } from './types.js'

/** A registry change for one thread; the newest value of each field wins within a commit. */
export interface RegistryPatch {
  status?: ThreadStatus
  at?: number
  /** Why the thread waits, when `status` is 'suspended'; staged with the status it explains. */
  suspendReason?: SuspendReason | null
  cost?: Cost
  outcome?: { result?: unknown; error?: { code: string; message: string } | null }
  /** The lease token the thread was held with when this was staged (set by `stageRegistry`). */
  token?: number
}

export interface CommitStats {
  /** Rounds that made transcript lines durable (through the journal, with durability fsync). */
  logCommits: number
  /** Checkpoint rounds: thread files fdatasynced, state.json files and the registry written. */
  commits: number
  /** Checkpoints staged (one per transition). */
  checkpointsStaged: number
  /** state.json files written (staged checkpoints of one thread within a round coalesce). */
  checkpointsWritten: number
}

/** See `Rounds.eager`: measured on 2 cores, smaller rounds that overlap CPU work beat one big one. */
const LOG_ROUND_EAGER = 48
const LOG_ROUNDS_IN_FLIGHT = 4
/** See `Rounds.spacingMs`. */
const CHECKPOINT_SPACING_MS = 500
/**
 * After a failed round (a full disk, an I/O error) the next waits 100 ms, doubling up to this:
 * its waiters are still served as soon as the disk takes writes again, without a round per
 * event-loop turn hammering it meanwhile.
 */
export const FAILED_ROUND_BACKOFF_MAX_MS = 5000

type Waiter = { resolve: () => void; reject: (e: unknown) => void }

/**
 * Runs `work` in rounds: waiters that arrive while rounds are in flight are served by a later one.
 * Up to `concurrency` rounds may be in flight (each covers what was written before it started).
 */
class Rounds {
  private waiting: Waiter[] = []
  private inFlight = 0
  private scheduled = false
  private spacing: ReturnType<typeof setTimeout> | null = null
  /** When the timer in `spacing` fires. */
  private spacingDue = 0
  private lastEnd = Number.NEGATIVE_INFINITY
  /** Rounds failed in a row; 0 after one succeeds. */
  failures = 0

  constructor(
    private readonly work: () => Promise<void>,
    private readonly concurrency = 1,
  ) {}

  wait(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject })
      // Enough waiters to be worth a round: start it now, so its fsyncs run on the pool while the
      // threads that are still busy finish their steps (they join a later round).
      if (this.waiting.length >= this.eager && this.inFlight < this.concurrency && this.failures === 0) this.startNow()
      else this.schedule()
    })
  }

  /** Waiters that start a round at once rather than at the end of the event-loop turn. */
  eager = Number.POSITIVE_INFINITY

  /**
   * A round with nobody waiting and nothing `urgent` starts at least this long after the previous
   * round ended; anything else starts one at once. Each round rewrites every file changed since
   * the last, so spaced rounds write fewer files for the same transitions.
   */
  spacingMs = 0

  /** Starts a round even with nobody waiting (background work). */
  poke(): void {
    this.schedule()
  }

  pending: () => boolean = () => false
  /** Pending background work that should not wait for the spacing. */
  urgent: () => boolean = () => false

  private schedule(): void {
    if (this.inFlight >= this.concurrency) return
    const now = this.waiting.length > 0 || this.urgent()
    // Nothing to do (a closed commit, or a round that took everything): no timer keeps the process up.
    if (!now && !this.pending()) return
    const backoff = this.failures > 0 ? this.lastEnd + Math.min(FAILED_ROUND_BACKOFF_MAX_MS, 100 * 2 ** (this.failures - 1)) : 0
    const due = Math.max(now ? 0 : this.lastEnd + this.spacingMs, backoff)
    if (this.spacing !== null) {
      if (this.spacingDue <= due) return
      clearTimeout(this.spacing)
      this.spacing = null
    }
    if (this.scheduled) return
    const wait = due - performance.now()
    if (wait > 0) {
      this.spacingDue = due
      this.spacing = setTimeout(() => {
        this.spacing = null
        this.schedule()
      }, wait)
      return
    }
    this.scheduled = true
    // setImmediate lets every thread that transitions in this turn of the event loop join the round.
    setImmediate(() => {
      this.scheduled = false
      if (this.inFlight < this.concurrency && (this.waiting.length > 0 || this.pending())) this.startNow()
    })
  }

  private startNow(): void {
    this.inFlight++
    const waiters = this.waiting
    this.waiting = []
    this.work()
      .then(
        () => {
          this.failures = 0
          waiters.forEach((w) => w.resolve())
        },
        (error: unknown) => {
          this.failures++
          waiters.forEach((w) => w.reject(error))
        },
      )
      .finally(() => {
        this.inFlight--
        this.lastEnd = performance.now()
        if (this.waiting.length > 0 || this.pending()) this.schedule()
      })
  }
}

export class GroupCommit {
  private registrations: RegisterThread[] = []
  private patches = new Map<string, RegistryPatch>()
  private staged = new Set<string>()
  readonly stats: CommitStats = { logCommits: 0, commits: 0, checkpointsStaged: 0, checkpointsWritten: 0 }
  private readonly log: Rounds
  private readonly checkpoint: Rounds

  constructor(
    private readonly parts: { transcripts: TranscriptStore; checkpoints: CheckpointStore; registry: Registry },
    /** A registry update of one thread failed; the others in the commit still apply. */
    private readonly onRegistryError: (threadId: string, error: unknown) => void = () => {},
    /**
     * Checkpoint rounds started failing (they are retried, backing off): told once, at the first
     * failure of a run of them.
     */
    private readonly onBackgroundError: (error: unknown) => void = () => {},
    /**
     * Why this process may not publish checkpoints or registry changes now (its leases' validity
     * ran out: another process may run its threads), or null. Asked before each publishes.
     */
    private readonly fenced: () => Error | null = () => null,
    /**
     * The lease token this process holds a thread with (leases.db), or undefined (no leases: the
     * memory store). A thread claimed since with a larger token (`Registry.claim`) was taken over:
     * what this process staged for it is not applied, even when its validity check passed before it stopped.
     */
    private readonly tokenOf: (threadId: string) => number | undefined = () => undefined,
  ) {
    // Transcript rounds may overlap: each fsyncs the files written before it began, and the store
    // orders a round with nothing new behind the ones in flight.
    this.log = new Rounds(async () => {
      await this.parts.transcripts.sync()
      this.stats.logCommits++
    }, LOG_ROUNDS_IN_FLIGHT)
    this.checkpoint = new Rounds(() => this.commitCheckpoints())
    this.checkpoint.pending = () =>
      !this.closed && (this.staged.size > 0 || this.patches.size > 0 || this.registrations.length > 0)
    this.log.eager = LOG_ROUND_EAGER
    // Checkpoints that only carry a thread forward (its snapshot, its cost) are spaced; a new
    // thread or a status change is written at once, so the registry keeps up with the threads.
    this.checkpoint.spacingMs = CHECKPOINT_SPACING_MS
    this.checkpoint.urgent = () => this.registrations.length > 0 || this.statusChanged
  }

  /** Commits what is staged, then accepts nothing more (the stores are about to close). */
  async close(): Promise<void> {
    this.closing = true
    try {
      await this.whenDurable()
    } finally {
      // Failed too (a full disk): what is left stays in the transcripts, and no round runs on
      // closed stores.
      this.closed = true
    }
  }

  /** `close` has begun: a thread waiting for its last checkpoint stops waiting at a failure. */
  closing = false

  private closed = false
  /** Threads discarded (lost to another process) and not staged again since. */
  private readonly discarded = new Set<string>()
  /** A status or outcome is staged for the registry (cleared when a round takes the patches). */
  private statusChanged = false

  /** Records that a thread staged a checkpoint; the background round will write it. */
  noteCheckpoint(threadId: string): void {
    this.discarded.delete(threadId)
    this.stats.checkpointsStaged++
    this.staged.add(threadId)
    if (!this.closed) this.checkpoint.poke()
  }

  /**
   * Registers a new thread in the next checkpoint round, in the same transaction as its first
   * status: its row commits only after its first state.json, so a row always has files.
   */
  stageRegistration(thread: RegisterThread): void {
    this.registrations.push(thread)
    if (!this.closed) this.checkpoint.poke()
  }

  /** A registration staged and not yet committed is taken back (a spawn that failed). */
  withdrawRegistration(threadId: string): void {
    this.registrations = this.registrations.filter((r) => r.id !== threadId)
  }

  stageRegistry(threadId: string, patch: RegistryPatch): void {
    this.discarded.delete(threadId)
    if (patch.status !== undefined || patch.outcome !== undefined) this.statusChanged = true
    // The token of when it was staged: a patch staged before this process released the thread
    // is still refused once another process has claimed it.
    const token = this.tokenOf(threadId)
    const prev = this.patches.get(threadId)
    const merged = prev ? { ...prev, ...patch } : { ...patch }
    if (token !== undefined) merged.token = token
    this.patches.set(threadId, merged)
    if (!this.closed) this.checkpoint.poke()
  }

  /**
   * This process lost the thread to another: nothing staged for it is published any more (a round
   * under way included), so a stale state.json or registry row never overwrites the new owner's.
   */
  discard(threadId: string): void {
    this.discarded.add(threadId)
    this.staged.delete(threadId)
    this.patches.delete(threadId)
    this.parts.checkpoints.discard(threadId)
  }

  /** Resolves when every transcript line appended before this call is durable. */
  whenLogged(): Promise<void> {
    return this.log.wait()
  }

  /** Resolves when everything appended or staged before this call is durable in every store. */
  whenDurable(): Promise<void> {
    return this.checkpoint.wait()
  }

  private async commitCheckpoints(): Promise<void> {
    const registrations = this.registrations
    this.registrations = []
    const patches = this.patches
    this.patches = new Map()
    const statusChanged = this.statusChanged
    this.statusChanged = false
    const staged = this.staged
    this.staged = new Set()
    try {
      // A process stopped or starved past its leases' validity publishes nothing until its
      // heartbeat has found out which threads are still its own (the rest are discarded).
      const mayPublish = (): void => {
        const fenced = this.fenced()
        if (fenced) throw fenced
      }
      await this.parts.checkpoints.sync({
        beforePublish: async () => {
          await this.parts.transcripts.sync({ files: true })
          mayPublish()
        },
      })
      for (const id of patches.keys()) if (this.discarded.has(id)) patches.delete(id)
      if (patches.size > 0 || registrations.length > 0) {
        mayPublish()
        this.applyRegistry(registrations, patches)
      }
      this.stats.commits++
      this.stats.checkpointsWritten += staged.size
    } catch (error) {
      // What was not applied goes back so the next round retries it, unless something newer replaced it.
      this.registrations.unshift(...registrations)
      // The store re-stages what it could not write; remember those threads so the next round runs.
      for (const id of staged) if (!this.discarded.has(id)) this.staged.add(id)
      for (const [id, patch] of patches) if (!this.patches.has(id) && !this.discarded.has(id)) this.patches.set(id, patch)
      if (statusChanged) this.statusChanged = true
      // Short of descriptors (a state.json's temp file, a folder to fsync): the transcripts' idle
      // ones go first, so that what this process holds itself never keeps checkpoints from being written.
      if (isDescriptorShortage(error)) this.parts.transcripts.releaseDescriptors?.()
      if (this.checkpoint.failures === 0) this.onBackgroundError(error)
      throw error
    }
  }

  private applyRegistry(registrations: RegisterThread[], patches: Map<string, RegistryPatch>): void {
    const { registry } = this.parts
    registry.transaction(() => {
      for (const thread of registrations) {
        try {
          registry.register(thread)
        } catch (error) {
          this.onRegistryError(thread.id, error)
        }
      }
      for (const [id, patch] of patches) {
        try {
          const token = patch.token
          const claimed = token === undefined ? null : registry.leaseToken(id)
          if (claimed !== null && claimed > token!) {
            this.onRegistryError(
              id,
              new SpindleError(
                'LEASE_LOST',
                `Thread ${id} was taken over by another runtime process (lease token ${claimed}, this process holds ${token}); ` +
                  'this process stops publishing its status.',
                { details: { threadId: id, token, claimed } },
              ),
            )
            continue
          }
          if (patch.cost) registry.updateCostSnapshot(id, patch.cost)
          if (patch.outcome) registry.setResult(id, patch.outcome)
          if (patch.status) registry.updateStatus(id, patch.status, patch.at ?? Date.now(), patch.suspendReason ?? null)
        } catch (error) {
          this.onRegistryError(id, error)
        }
      }
    })
  }
}
