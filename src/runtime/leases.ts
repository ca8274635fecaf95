/**
 * Leases: one process runs a thread. Takes, renews, fences and gives up this process's leases,
 * claims their tokens in the registry, and looks for orphans — unfinished threads no live process
 * holds — at every heartbeat. Owns the heartbeat timer.
 */
import os from 'node:os'
import { nanoid } from 'nanoid'
import { SpindleError } from '../base/errors.js'
import { pidAlive } from '../base/processes.js'
import type { Config } from '../../config/schema.js'
import { isStorageFailure } from '../../persistence/storageFailure.js'
import type { Lease, LeaseStore, Registry } from '../../persistence/types.js'
import { isActive } from '../thread/threadStatus.js'
import type { Reporter } from './events.js'
import type { Lifecycle } from './events.js'
import type { ThreadTable } from './threadTable.js'

export interface LeaseDeps {
  store: LeaseStore
  registry: Registry
  table: ThreadTable
  config: Config
  bus: Reporter
  life: Lifecycle
  /**
   * Whether other processes can take this runtime's threads (a shared data directory): only then
   * does it renew its leases, fence itself when it could not, and look for orphans.
   */
  shared: boolean
  /** Carries on the orphans found (recovery): how takeover happens. */
  takeOver(): Promise<{ resumed: string[] }>
}

export class Leases {
  /** This process as a lease owner. */
  readonly owner = { id: `${os.hostname()}:${process.pid}:${nanoid(8)}`, pid: process.pid, host: os.hostname() }
  /** Wall-clock time until which this process's leases are certainly its own (self-fencing). */
  private validUntil = 0
  /** The token of each lease this process holds (leases.db): what its registry writes are fenced with. */
  private readonly tokens = new Map<string, number>()
  /** Leases whose release failed (a full disk), tried again at each heartbeat. */
  private readonly unreleased = new Set<string>()
  /** When the leases were last renewed or taken (see `keepAlive`). */
  private renewedAt = 0
  /** When `fenced` last tried to renew leases the heartbeat had let run out (see `renewOverdue`). */
  private overdueTriedAt = 0
  /** Why the last heartbeat could not renew the leases; null once one did. */
  private renewFailure: unknown = null
  private heartbeat: NodeJS.Timeout | null = null
  /** `close` ran: no renewal, no fencing (what the close still writes is this process's own). */
  private stopped = false

  constructor(private readonly deps: LeaseDeps) {}

  private get ttlMs(): number {
    return this.deps.config.orphans.thresholdMs
  }

  private get heartbeatMs(): number {
    return this.deps.config.orphans.heartbeatMs ?? Math.max(1, Math.floor(this.deps.config.orphans.thresholdMs / 3))
  }

  /** Whether this process has held a lease yet: until then, what it publishes is no thread's another process runs. */
  get held(): boolean {
    return this.validUntil !== 0
  }

  /** The token this process holds thread `id` with, if it does. */
  tokenOf(id: string): number | undefined {
    return this.tokens.get(id)
  }

  /** Whether `lease` belongs to a process that is gone: expired, or a dead pid on this host. */
  isStale(lease: Lease, now: number): boolean {
    if (lease.owner === this.owner.id) return false
    if (lease.expiresAt <= now) return true
    if (lease.host !== this.owner.host) return false
    return !pidAlive(lease.pid)
  }

  /** Takes a thread's lease, or says which live process holds it. */
  private tryTake(id: string, fresh: boolean): boolean {
    const { store } = this.deps
    const now = Date.now()
    let taken = fresh ? store.acquireFresh(id, this.owner, this.ttlMs, now) : store.acquire(id, this.owner, this.ttlMs, now)
    if (!taken.acquired && this.isStale(taken.lease, now)) {
      // The holder died on this host before its lease ran out: no need to wait for the expiry.
      // Only that lease is removed: another process may have taken the thread since we read it.
      if (store.removeIf(taken.lease)) taken = store.acquire(id, this.owner, this.ttlMs, now)
    }
    if (taken.acquired && this.validUntil < now + this.ttlMs - this.heartbeatMs) {
      this.validUntil = now + this.ttlMs - this.heartbeatMs
      this.renewedAt = now
    }
    if (taken.acquired && fresh && taken.lease.token === 1) {
      // A made-up id's first lease: the registry has no row of it to claim yet (its registration,
      // with the claim, comes with its first checkpoint), so there is nothing to read there.
      this.tokens.set(id, 1)
      return true
    }
    if (taken.acquired && this.claimTokens(new Map([[id, taken.lease.token]])).has(id)) return false
    return taken.acquired
  }

  /**
   * Takes a thread's lease, or throws THREAD_LEASED naming the live process that holds it.
   * `fresh`: the id was just made up here (a new thread's), so no other process can know of it.
   */
  take(id: string, fresh = false): void {
    // Taken a moment ago by this process (a spawn takes it, then starts the thread) and not lapsed
    // since: taking it again would only renew it, one more transaction on a database.
    if (this.tokens.has(id) && Date.now() < this.validUntil) return
    if (this.tryTake(id, fresh)) return
    const lease = this.deps.store.get(id)
    throw new SpindleError(
      'THREAD_LEASED',
      `Thread ${id} is run by another runtime process (${lease?.owner ?? 'unknown'}, pid ${lease?.pid ?? '?'}, lease until ` +
        `${lease ? new Date(lease.expiresAt).toISOString() : '?'}). Act on it there, or wait until that process stops and its lease expires.`,
      { details: { threadId: id, owner: lease?.owner, pid: lease?.pid } },
    )
  }

  /** Takes the leases of many threads in one transaction; a lease held by a dead local process is taken too. */
  takeMany(ids: string[]): Set<string> {
    if (ids.length === 0) return new Set()
    const now = Date.now()
    // One liveness check per owner, not per thread: a dead process held all of its threads.
    const verdicts = new Map<string, boolean>()
    const stale = (lease: Lease): boolean => {
      let verdict = verdicts.get(lease.owner)
      if (verdict === undefined) verdicts.set(lease.owner, (verdict = this.isStale({ ...lease, expiresAt: Number.MAX_SAFE_INTEGER }, now)))
      return verdict
    }
    const { acquired, tokens } = this.deps.store.acquireMany(ids, this.owner, this.ttlMs, now, stale)
    const taken = new Set(acquired)
    if (taken.size > 0 && this.validUntil < now + this.ttlMs - this.heartbeatMs) {
      this.validUntil = now + this.ttlMs - this.heartbeatMs
      this.renewedAt = now
    }
    for (const id of this.claimTokens(tokens)) taken.delete(id)
    return taken
  }

  /**
   * Remembers the lease tokens this process holds threads with, and claims the threads that
   * changed hands in the registry with them, before anything of theirs is read or run: a process
   * that held one before and stopped between its lease check and its registry write publishes with
   * an older token from then on, and is refused (see GroupCommit).
   *
   * A thread already claimed with the token leases.db gave, or a larger one, is one of two cases.
   * leases.db handed the token out again (it is not fsynced, so a power loss can take its last
   * commits; or it was deleted): this process still holds the lease, raises its token past the
   * claim and claims that. Or this process was stopped between taking the lease and claiming it,
   * and another took the thread since: it no longer holds the lease. Returns those threads: lost.
   */
  private claimTokens(tokens: ReadonlyMap<string, number>): Set<string> {
    const lost = new Set<string>()
    const claims: Array<{ id: string; token: number }> = []
    for (const [id, token] of tokens) {
      if (this.tokens.get(id) === token) continue
      this.tokens.set(id, token)
      claims.push({ id, token })
    }
    try {
      const raised: Array<{ id: string; token: number }> = []
      for (const ahead of this.deps.registry.claim(claims)) {
        const token = ahead.token + 1
        if (this.deps.store.raiseToken(ahead.id, this.owner.id, token)) {
          this.tokens.set(ahead.id, token)
          raised.push({ id: ahead.id, token })
        } else {
          this.tokens.delete(ahead.id)
          lost.add(ahead.id)
        }
      }
      this.deps.registry.claim(raised)
    } catch (error) {
      // Only the fence is lost: the threads still run, and are claimed at their next change of hands.
      this.deps.bus.report(error)
    }
    return lost
  }

  release(id: string): void {
    // What it staged while it held the lease keeps that token (GroupCommit.stageRegistry).
    this.tokens.delete(id)
    try {
      this.deps.store.release(id, this.owner.id)
      this.unreleased.delete(id)
    } catch (error) {
      // Given up again at the next heartbeat that renews: a lease left behind would make the
      // thread look held by this process until it exits.
      if (!this.unreleased.has(id)) this.deps.bus.report(error, id)
      this.unreleased.add(id)
    }
  }

  /**
   * Why this process may not write for its threads (for `threadId`) any more: its leases ran out
   * unrenewed, and could not be renewed now.
   */
  fenced(threadId?: string): SpindleError | null {
    if (!this.deps.shared || this.stopped) return null
    if (Date.now() < this.validUntil) return null
    const lost = this.renewOverdue()
    if (lost !== null && !(threadId !== undefined && lost.has(threadId))) return null
    return new SpindleError(
      'LEASE_LOST',
      `This runtime could not renew its thread leases in time (valid until ${new Date(this.validUntil).toISOString()}); ` +
        'another process may have taken its threads over, so it stops writing them. Check the data directory with `spindle doctor`.',
      // Renewals that failed for want of storage: its threads are parked, not let go (liveThread.ts).
      this.renewFailure !== null && isStorageFailure(this.renewFailure) ? { cause: this.renewFailure } : {},
    )
  }

  /**
   * The heartbeat did not renew the leases in time: the event loop was held longer than that (many
   * threads started at once on a busy machine), or the store did not answer. A lease that ran out
   * but that no other process took is still this one's (none ran the thread meanwhile), so they
   * are renewed now and the threads go on: giving them all up would have them taken over again —
   * by this process, at its next heartbeat, to be held up the same way, for ever. Returns the
   * threads another process took meanwhile (let go here), or null when the leases could not be
   * renewed. Tried at most once a heartbeat: a store that does not answer is left to the heartbeat.
   */
  private renewOverdue(): Set<string> | null {
    const now = Date.now()
    if (now - this.overdueTriedAt < this.heartbeatMs) return null
    this.overdueTriedAt = now
    const lost = this.renew(now, [])
    if (lost === null) return null
    for (const id of lost) this.lose(id)
    return new Set(lost)
  }

  /** Renews this process's leases and takes over orphans, every heartbeat. */
  start(): void {
    this.heartbeat = setInterval(() => this.beat(), this.heartbeatMs)
    this.heartbeat.unref()
  }

  /**
   * Stops the heartbeat. A closing runtime calls it last, once the tool calls it let finish are
   * done: until then their leases are renewed, and a lease lost meanwhile still fences them.
   */
  close(): void {
    this.stopped = true
    if (this.heartbeat) clearInterval(this.heartbeat)
    this.heartbeat = null
  }

  private beat(): void {
    if (this.stopped) return
    const now = Date.now()
    const lost = this.renew(now, [])
    if (lost === null) return
    for (const id of this.unreleased) if (!this.deps.table.has(id)) this.release(id)
    for (const id of lost) this.lose(id)
    // Orphans: unfinished threads no live process holds. Detection runs all the time, not only at start-up.
    this.takeOrphans(now)
  }

  /**
   * Renews the leases of the live threads and of `loading`; returns those the store says this
   * process no longer holds, or null when it could not renew (told once per run of failures: a
   * full disk fails every heartbeat until it is freed).
   */
  private renew(now: number, loading: readonly string[]): string[] | null {
    try {
      const lost = this.deps.store.renew(this.owner.id, [...this.deps.table.ids(), ...loading], this.ttlMs, now)
      this.validUntil = now + this.ttlMs - this.heartbeatMs
      this.renewedAt = now
      this.renewFailure = null
      return lost
    } catch (error) {
      if (this.renewFailure === null) this.deps.bus.report(error)
      this.renewFailure = error
      return null
    }
  }

  /**
   * Renews the leases now if a heartbeat's time has passed since they were renewed or taken, with
   * those of `loading()` (threads whose leases this process took and has not started yet). A
   * recovery of many threads holds the event loop for longer than a heartbeat: leases left to run
   * out meanwhile would be taken by other processes while they are loaded here, and would fence
   * off every thread of this process, which would give them up, take them over again at the next
   * heartbeat and run out again, for ever. Returns the threads of `loading()` another process took
   * meanwhile (their leases had run out): not to be loaded.
   */
  keepAlive(loading: () => readonly string[]): Set<string> {
    const now = Date.now()
    if (!this.deps.shared || this.stopped || now - this.renewedAt < this.heartbeatMs) return new Set()
    const ids = loading()
    const lost = new Set(this.renew(now, ids) ?? [])
    const gone = new Set(ids.filter((id) => lost.has(id)))
    for (const id of gone) this.tokens.delete(id)
    for (const id of lost) if (!gone.has(id)) this.lose(id)
    return gone
  }

  /**
   * A store refused a write of the thread because another process holds its lease now (a database
   * checks that in the write's own transaction): this one stops running it, as when a renewal
   * finds the lease gone.
   */
  fencedOff(id: string): void {
    this.tokens.delete(id)
    this.lose(id)
  }

  private lose(id: string): void {
    const thread = this.deps.table.get(id)
    if (!thread) return
    this.deps.bus.report(new SpindleError('LEASE_LOST', `Thread ${id} was taken over by another runtime process; this one stops running it.`, { details: { threadId: id } }), id)
    thread.detach(new SpindleError('LEASE_LOST', `Thread ${id} is now run by another runtime process.`, { details: { threadId: id } }))
  }

  /** Takes over the unfinished threads no live process holds, if `orphans.autoTakeover`. */
  takeOrphans(now: number): void {
    if (!this.deps.config.orphans.autoTakeover || this.deps.life.closed) return
    let orphans: string[]
    try {
      orphans = this.orphans(now)
    } catch (error) {
      // Called from a timer or a notification, where a throw would end the process: the store
      // stopped answering (a database going down), and the next heartbeat looks again.
      this.deps.bus.report(error)
      return
    }
    if (orphans.length > 0) {
      this.deps.takeOver().then(
        (report) => {
          for (const id of report.resumed) this.deps.bus.report(new SpindleError('THREAD_LEASED', `Took over orphaned thread ${id}.`, { details: { threadId: id } }), id)
        },
        (error: unknown) => this.deps.bus.report(error),
      )
    }
  }

  /** Created or running threads not run here whose lease is missing, expired, or held by a dead process. */
  private orphans(now: number): string[] {
    const found: string[] = []
    const active = this.deps.registry.activeStatuses().filter((record) => !this.deps.table.has(record.id))
    if (active.length === 0) return found
    // Many: one read of every lease, not one per thread (on a database each read is a round trip).
    const leases = active.length > 32 ? new Map(this.deps.store.list().map((lease) => [lease.threadId, lease])) : null
    for (const record of active) {
      const lease = leases ? leases.get(record.id) : this.deps.store.get(record.id)
      if (!lease || this.isStale(lease, now)) found.push(record.id)
    }
    return found
  }

  /**
   * Removes the stale leases of threads that have no registry row, or a row of a thread that is
   * not running: a process killed between taking a new thread's lease and committing its row, or
   * one that could not release a finished thread's lease (a full disk), left a lease no runtime
   * would ever take over or release. A lease still used by a live process is not stale and stays.
   * Returns the threads with a registry row whose lease went: among them, threads stopped by a
   * decision whose file their process did not live to write (it holds the lease until then).
   */
  dropUnborn(): string[] {
    const { store, registry, table } = this.deps
    const dropped: string[] = []
    try {
      const now = Date.now()
      const verdicts = new Map<string, boolean>()
      for (const lease of store.heldByOthers(this.owner.id)) {
        // One pid check per owner: a dead process held all of its leases.
        let dead = verdicts.get(lease.owner)
        if (dead === undefined) verdicts.set(lease.owner, (dead = this.isStale({ ...lease, expiresAt: Number.MAX_SAFE_INTEGER }, now)))
        if (!dead && lease.expiresAt > now) continue
        if (table.has(lease.threadId)) continue
        const row = registry.get(lease.threadId)
        if (row && isActive(row.status)) continue
        if (store.removeIf(lease) && row) dropped.push(lease.threadId)
      }
    } catch (error) {
      this.deps.bus.report(error)
    }
    return dropped
  }
}
