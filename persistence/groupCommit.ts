/**
 * Group commit: many threads' writes made durable together, so one round of fsyncs serves every
 * thread that is waiting. Three kinds of round, because they cost very different amounts:
 *
 * - **logged** — the transcript lines appended so far are durable (one write and fdatasync of the
 *   transcript journal; see persistence/transcriptJournal.ts). The transcript is the source of
 *   truth: the state a thread is in is a pure function of its recorded inputs, so once they are
 *   durable the state that starts an effect is durable too. Effects wait for this level
 *   (write-ahead).
 * - **checkpointed** — additionally the thread files are fdatasynced (so the journal epochs before
 *   them can go), every staged state.json is replaced atomically (temp file, fsync, rename,
 *   directory fsync) and the registry updated in one transaction. This is the fast
 *   path to resume; it runs continuously in the background and never blocks an effect. `spawn`
 *   waits for it, so what a host is told agrees with every store.
 * - **settled** — the same for the threads that stopped, and nothing else: their own thread files,
 *   their state.json, their registry rows. `done` waits for this, so it settles as soon as the
 *   thread's end is as durable as the stores promise, not when a round over every running thread's
 *   state.json ends; a thread's end is taken out of a checkpoint round under way that has not
 *   published it yet.
 *
 * Order that recovery relies on: a state.json is published only after the transcript it points
 * into is durable, and the registry is updated only after state.json, so the registry is never
 * ahead of state.json and state.json never ahead of the transcript. Anything the transcript holds
 * beyond state.json is replayed on recovery.
 */
import type { SuspendReason } from '../machines/threadContext.js'
import { SpindleError } from '../src/base/errors.js'
import { Rounds } from './rounds.js'
import { isDescriptorShortage } from './storageFailure.js'
import type { NewEvent } from './eventLog.js'
import type { CheckpointStore, Cost, RegisterThread, Registry, ThreadStatus, TranscriptStore } from './types.js'

export { FAILED_ROUND_BACKOFF_MAX_MS } from './rounds.js'

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
  /**
   * Events of the thread's event log (rt.events), appended in the transaction that applies the
   * rest of the patch, and dropped with it when the thread was lost to another process.
   */
  events?: NewEvent[]
}

export interface CommitStats {
  /** Rounds that made transcript lines durable (through the journal, with durability fsync). */
  logCommits: number
  /** Checkpoint rounds: thread files fdatasynced, state.json files and the registry written. */
  commits: number
  /** Settle rounds: the files, state.json and registry rows of threads that stopped (what `done` waits for). */
  settleCommits: number
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

/** `newer`'s fields over `older`'s: what applying both, in order, leaves. */
function mergePatches(older: RegistryPatch | undefined, newer: RegistryPatch | undefined): RegistryPatch | undefined {
  if (!older) return newer
  if (!newer) return older
  const merged = { ...older, ...newer }
  // Events add up where every other field is replaced: each is something that happened.
  if (older.events && newer.events) merged.events = [...older.events, ...newer.events]
  else if (older.events) merged.events = older.events
  return merged
}

export class GroupCommit {
  private registrations: RegisterThread[] = []
  /** Threads whose registration no round has committed yet: their end waits for that round. */
  private readonly unregistered = new Set<string>()
  private patches = new Map<string, RegistryPatch>()
  /** The registry changes the checkpoint round under way took and has not applied yet. */
  private applying: Map<string, RegistryPatch> | null = null
  /** The threads whose state.json the checkpoint round under way writes (for `stats`). */
  private writing: Set<string> | null = null
  private staged = new Set<string>()
  /** Threads waiting for the next settle round (`whenSettled`). */
  private settling = new Set<string>()
  /** The settle round under way: a checkpoint round finishes only after it (see `commitCheckpoints`). */
  private settleInFlight: Promise<void> | null = null
  readonly stats: CommitStats = { logCommits: 0, commits: 0, settleCommits: 0, checkpointsStaged: 0, checkpointsWritten: 0 }
  private readonly log: Rounds
  private readonly checkpoint: Rounds
  private readonly settle: Rounds

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
    // thread or a status change is written at once, so the registry keeps up with the threads. A
    // stopped thread's status is the settle round's, which starts at once (`whenSettled`).
    this.checkpoint.spacingMs = CHECKPOINT_SPACING_MS
    this.checkpoint.urgent = () => this.registrations.length > 0 || this.statusChanged.size > 0
    // A thread's end is written at once; the ends that come while it is written share the next round.
    this.settle = new Rounds(() => this.commitSettled())
    this.settle.eager = 1
  }

  /** Commits what is staged, then accepts nothing more (the stores are about to close). */
  async close(): Promise<void> {
    this.closing = true
    try {
      await this.whenDurable()
      // A settle round queued or under way ends before the stores close, as a checkpoint round does.
      while (this.settling.size > 0 || this.settleInFlight) await this.settle.wait()
    } finally {
      // Failed too (a full disk): what is left stays in the transcripts, and no round runs on
      // closed stores.
      this.closed = true
    }
  }

  /** `close` has begun: a thread waiting for its last checkpoint stops waiting at a failure. */
  closing = false
  /** Told after a transaction that appended events has committed (the event stream wakes its readers). */
  afterEvents: (() => void) | null = null

  private closed = false
  /** Threads discarded (lost to another process) and not staged again since. */
  private readonly discarded = new Set<string>()
  /**
   * Threads with a status or outcome staged for the registry that no settle round is to write
   * (cleared when a round takes the patches): a checkpoint round for them starts at once.
   */
  private statusChanged = new Set<string>()

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
    this.unregistered.add(thread.id)
    if (!this.closed) this.checkpoint.poke()
  }

  /** A registration staged and not yet committed is taken back (a spawn that failed). */
  withdrawRegistration(threadId: string): void {
    this.registrations = this.registrations.filter((r) => r.id !== threadId)
    this.unregistered.delete(threadId)
  }

  stageRegistry(threadId: string, patch: RegistryPatch): void {
    this.discarded.delete(threadId)
    if ((patch.status !== undefined || patch.outcome !== undefined || patch.events !== undefined) && !this.settling.has(threadId)) this.statusChanged.add(threadId)
    // The token of when it was staged: a patch staged before this process released the thread
    // is still refused once another process has claimed it.
    const token = this.tokenOf(threadId)
    const merged = mergePatches(this.patches.get(threadId), patch)!
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
    this.statusChanged.delete(threadId)
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

  /**
   * Resolves when the thread's end is durable in every store — its transcript file, the state.json
   * and the registry change staged for it — without waiting for other threads' checkpoints: a
   * stopped thread's `done` waits for this. A thread whose registration is still to commit waits
   * for that round instead, which writes its row, state.json and status together.
   */
  whenSettled(threadId: string): Promise<void> {
    if (this.unregistered.has(threadId)) return this.whenDurable()
    this.settling.add(threadId)
    // Its status is the settle round's: no checkpoint round need start at once for it.
    this.statusChanged.delete(threadId)
    return this.settle.wait()
  }

  /** Throws while this process may not publish (see `fenced`). */
  private mayPublish(): void {
    const fenced = this.fenced()
    if (fenced) throw fenced
  }

  private async commitCheckpoints(): Promise<void> {
    const registrations = this.registrations
    this.registrations = []
    const patches = this.patches
    this.patches = new Map()
    this.applying = patches
    const statusChanged = this.statusChanged
    this.statusChanged = new Set()
    const staged = this.staged
    this.staged = new Set()
    this.writing = staged
    try {
      // A process stopped or starved past its leases' validity publishes nothing until its
      // heartbeat has found out which threads are still its own (the rest are discarded).
      await this.parts.checkpoints.sync({
        beforePublish: async () => {
          await this.parts.transcripts.sync({ files: true })
          this.mayPublish()
        },
      })
      // A settle round may have taken threads' ends out of this one: its waiters were promised
      // those too. Asked until none is under way, so none takes a registry change from this round
      // between the last look and the transaction below.
      // A settle round's failure is for its own waiters (they ask again), not this round's.
      while (this.settleInFlight) await this.settleInFlight.catch(() => {})
      for (const id of patches.keys()) if (this.discarded.has(id)) patches.delete(id)
      if (patches.size > 0 || registrations.length > 0) {
        this.mayPublish()
        this.applyRegistry(registrations, patches)
      }
      this.stats.commits++
      this.stats.checkpointsWritten += staged.size
    } catch (error) {
      // What was not applied goes back so the next round retries it, under anything newer.
      this.registrations.unshift(...registrations)
      // The store re-stages what it could not write; remember those threads so the next round runs.
      for (const id of staged) if (!this.discarded.has(id)) this.staged.add(id)
      this.restorePatches(patches)
      for (const id of statusChanged) if (patches.has(id) && !this.settling.has(id)) this.statusChanged.add(id)
      // Short of descriptors (a state.json's temp file, a folder to fsync): the transcripts' idle
      // ones go first, so that what this process holds itself never keeps checkpoints from being written.
      if (isDescriptorShortage(error)) this.parts.transcripts.releaseDescriptors?.()
      if (this.checkpoint.failures === 0) this.onBackgroundError(error)
      throw error
    } finally {
      this.applying = null
      this.writing = null
    }
  }

  /**
   * The settle round: the threads waiting in `whenSettled`, and nothing else, made durable — their
   * thread files, their newest state.json, their registry changes — including what of them a
   * checkpoint round under way took and has not published (it leaves them to this round).
   */
  private async commitSettled(): Promise<void> {
    const ids = this.settling
    this.settling = new Set()
    const patches = new Map<string, RegistryPatch>()
    for (const id of ids) {
      const taken = this.applying?.get(id)
      this.applying?.delete(id)
      const patch = mergePatches(taken, this.patches.get(id))
      this.patches.delete(id)
      if (patch) patches.set(id, patch)
      this.staged.delete(id)
      this.writing?.delete(id)
    }
    const round = this.settleThreads(ids, patches)
    this.settleInFlight = round
    try {
      await round
    } finally {
      this.settleInFlight = null
    }
  }

  private async settleThreads(ids: Set<string>, patches: Map<string, RegistryPatch>): Promise<void> {
    try {
      await this.parts.checkpoints.sync({
        only: ids,
        beforePublish: async () => {
          await this.parts.transcripts.sync({ threads: [...ids] })
          this.mayPublish()
        },
      })
      for (const id of patches.keys()) if (this.discarded.has(id)) patches.delete(id)
      if (patches.size > 0) {
        this.mayPublish()
        this.applyRegistry([], patches)
      }
      this.stats.settleCommits++
      this.stats.checkpointsWritten += ids.size
    } catch (error) {
      // Back to the checkpoint rounds (the store re-staged the state.json files it did not
      // publish), and to the next settle round once `done` asks again.
      for (const id of ids) if (!this.discarded.has(id)) this.staged.add(id)
      this.restorePatches(patches)
      if (!this.closed) this.checkpoint.poke()
      throw error
    }
  }

  /** Registry changes a failed round took go back, under whatever was staged since. */
  private restorePatches(patches: Map<string, RegistryPatch>): void {
    for (const [id, patch] of patches) {
      if (!this.discarded.has(id)) this.patches.set(id, mergePatches(patch, this.patches.get(id))!)
    }
  }

  /** The claimed tokens of the patched threads that carry a token, read at once; null when the read failed (each is read alone). */
  private tokensOf(patches: Map<string, RegistryPatch>): Map<string, number | null> | null {
    const ids = [...patches].filter(([, patch]) => patch.token !== undefined).map(([id]) => id)
    if (ids.length === 0) return null
    try {
      return this.parts.registry.leaseTokens!(ids)
    } catch {
      return null
    }
  }

    private applyRegistry(registrations: RegisterThread[], patches: Map<string, RegistryPatch>): void {
    const { registry } = this.parts
    let appended = false
    registry.transaction(() => {
      for (const thread of registrations) {
        try {
          registry.register(thread)
        } catch (error) {
          this.onRegistryError(thread.id, error)
        }
      }
      // One read for every patched thread's claim where the registry offers it (a database).
      const tokens = registry.leaseTokens && patches.size > 1 ? this.tokensOf(patches) : null
      for (const [id, patch] of patches) {
        try {
          const token = patch.token
          const claimed = token === undefined ? null : tokens?.has(id) ? tokens.get(id)! : registry.leaseToken(id)
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
          if (patch.events) {
            registry.events.append(patch.events)
            appended = true
          }
          if (patch.cost) registry.updateCostSnapshot(id, patch.cost)
          if (patch.outcome) registry.setResult(id, patch.outcome)
          if (patch.status) registry.updateStatus(id, patch.status, patch.at ?? Date.now(), patch.suspendReason ?? null)
        } catch (error) {
          this.onRegistryError(id, error)
        }
      }
    })
    // Committed, or refused for good (reported): either way no later round registers it.
    for (const thread of registrations) this.unregistered.delete(thread.id)
    if (appended) this.afterEvents?.()
  }
}
