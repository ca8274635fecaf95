/**
 * In-memory leases: the reference implementation of `LeaseStore`, for a runtime that keeps nothing
 * on disk (memory mode) and as executable documentation of what `openSqliteLeases` keeps in
 * leases.db. One process only: nothing is shared with another runtime, nothing survives this one.
 */
import { SpindleError } from '../src/base/errors.js'
import type { Lease, LeaseStore, RecordedWait } from './types.js'

type Owner = { id: string; pid: number; host: string }

/** A recorded wait and who recorded it: it counts while `owner` holds the lease of `waiter`. */
interface WaitRow extends RecordedWait {
  owner: string
}

function copyLease(lease: Lease): Lease {
  return { ...lease }
}

function copyWait(row: RecordedWait): RecordedWait {
  return { waiter: row.waiter, failFast: row.failFast, ids: [...row.ids] }
}

/** leases.db lists by thread id; ids are ASCII (src/base/ids.ts), where code-unit and byte order agree. */
function byThreadId(a: Lease, b: Lease): number {
  return a.threadId < b.threadId ? -1 : a.threadId > b.threadId ? 1 : 0
}

function closedStore(): SpindleError {
  return new SpindleError(
    'REGISTRY_FAILED',
    'The in-memory lease store was closed, and with it every lease and wait it held: nothing was read or changed. Open the runtime again to take leases.',
  )
}

/**
 * A `LeaseStore` in Maps, with the semantics of the SQLite one: a lease is live while
 * `expiresAt > now`, a token grows at every change of hands and never goes back (the last one
 * handed out outlives its lease), a revoked lease stays under an owner no runtime has. Every
 * operation runs to its end before the next (one thread of JavaScript), which is what SQLite's
 * IMMEDIATE transactions give. `stale` is asked before anything changes, so one that throws
 * leaves the store as it was; a `check` that throws records nothing (the waits found over are
 * dropped all the same, as the SQLite transaction commits).
 *
 * Returned leases and waits are copies; what is passed in is copied too.
 *
 * Caveat: wait ids are never reused; SQLite's rowids may be, once the newest wait has ended.
 *
 * @example
 * const leases = createMemoryLeases()
 * leases.acquire('research-3f9k2m1x0q7a', { id: 'h:1:x', pid: 1, host: 'h' }, 30_000, Date.now()) // { acquired: true, lease: { token: 1, … } }
 * @see openSqliteLeases for the backend that processes share.
 */
export function createMemoryLeases(): LeaseStore {
  const leases = new Map<string, Lease>()
  /** The last token handed out per thread: it outlives the lease, so tokens only ever grow. */
  const lastTokens = new Map<string, number>()
  /** By id, which only grows: insertion order is the order they were recorded in. */
  const waits = new Map<number, WaitRow>()
  let nextWaitId = 1
  let closed = false

  function open(): void {
    if (closed) throw closedStore()
  }

  /** Another owner's lease that has not expired: only its owner (or a verdict that it died) frees it. */
  function liveOther(lease: Lease, owner: string, now: number): boolean {
    return lease.owner !== owner && lease.expiresAt > now
  }

  /** A new lease for `owner`, with a token above both the current one and the last handed out. */
  function handOver(threadId: string, owner: Owner, ttlMs: number, now: number): Lease {
    const token = Math.max(leases.get(threadId)?.token ?? 0, lastTokens.get(threadId) ?? 0) + 1
    const lease: Lease = { threadId, owner: owner.id, pid: owner.pid, host: owner.host, acquiredAt: now, expiresAt: now + ttlMs, token }
    leases.set(threadId, lease)
    lastTokens.set(threadId, token)
    return lease
  }

  /** Whether `row` still counts: a wait taken over or released with its waiter's lease is over. */
  function counts(row: WaitRow): boolean {
    return leases.get(row.waiter)?.owner === row.owner
  }

  function othersWaits(owner: string): RecordedWait[] {
    const seen: RecordedWait[] = []
    for (const row of waits.values()) if (row.owner !== owner && counts(row)) seen.push(copyWait(row))
    return seen
  }

  return {
    acquire(threadId, owner, ttlMs, now) {
      open()
      const current = leases.get(threadId)
      if (current && liveOther(current, owner.id, now)) return { acquired: false, lease: copyLease(current) }
      if (current?.owner === owner.id) {
        // Renewed, expired or not: a lease nobody took since is still this owner's, with its token.
        current.expiresAt = now + ttlMs
        return { acquired: true, lease: copyLease(current) }
      }
      return { acquired: true, lease: copyLease(handOver(threadId, owner, ttlMs, now)) }
    },

    // Nothing to save here: one map lookup either way.
    acquireFresh(threadId, owner, ttlMs, now) {
      return this.acquire(threadId, owner, ttlMs, now)
    },

    acquireMany(threadIds, owner, ttlMs, now, stale) {
      open()
      // An id given twice is taken once: the second time it is already this owner's.
      const unique = [...new Set(threadIds)]
      const staleOwners = new Set<string>()
      if (stale) {
        const asked = new Set<string>()
        for (const id of unique) {
          const lease = leases.get(id)
          if (!lease || !liveOther(lease, owner.id, now) || asked.has(lease.owner)) continue
          asked.add(lease.owner)
          if (stale(copyLease(lease))) staleOwners.add(lease.owner)
        }
      }
      const acquired: string[] = []
      const held: Lease[] = []
      const tokens = new Map<string, number>()
      for (const id of unique) {
        const current = leases.get(id)
        if (current && liveOther(current, owner.id, now) && !staleOwners.has(current.owner)) {
          held.push(copyLease(current))
          continue
        }
        acquired.push(id)
        // Already this owner's: extended, and its token (the last handed out) stays.
        if (current?.owner === owner.id) current.expiresAt = now + ttlMs
        else tokens.set(id, handOver(id, owner, ttlMs, now).token)
      }
      return { acquired, held, tokens }
    },

    renew(owner, threadIds, ttlMs, now) {
      open()
      const lost: string[] = []
      for (const id of threadIds) {
        const current = leases.get(id)
        // A lease that expired but nobody took is still ours to extend: no other process ran it.
        if (current?.owner === owner) current.expiresAt = now + ttlMs
        else lost.push(id)
      }
      return lost
    },

    raiseToken(threadId, owner, token) {
      open()
      const current = leases.get(threadId)
      if (current?.owner !== owner) return false
      if (current.token < token) current.token = token
      lastTokens.set(threadId, Math.max(token, lastTokens.get(threadId) ?? 0))
      return true
    },

    release(threadId, owner) {
      open()
      if (leases.get(threadId)?.owner === owner) leases.delete(threadId)
    },

    get(threadId) {
      open()
      const lease = leases.get(threadId)
      return lease ? copyLease(lease) : null
    },

    list() {
      open()
      return [...leases.values()].map(copyLease).sort(byThreadId)
    },

    remove(threadId) {
      open()
      const lease = leases.get(threadId)
      if (!lease) return null
      leases.delete(threadId)
      return copyLease(lease)
    },

    removeIf(lease) {
      open()
      const current = leases.get(lease.threadId)
      if (current?.owner !== lease.owner || current.token !== lease.token) return false
      leases.delete(lease.threadId)
      return true
    },

    heldByOthers(owner) {
      open()
      return [...leases.values()].filter((lease) => lease.owner !== owner).map(copyLease).sort(byThreadId)
    },

    revoke(threadId) {
      open()
      const current = leases.get(threadId)
      if (!current) return null
      const before = copyLease(current)
      // Same expiry, pid and host (a dead owner still frees it at once); an owner no runtime has.
      current.owner = `revoked:${current.owner}`
      return before
    },

    recordWait(owner, wait, check) {
      open()
      for (const [id, row] of waits) if (!counts(row)) waits.delete(id)
      // A refusal leaves the waits that were over gone, as the SQLite transaction (which commits
      // its purge and returns the refusal) does.
      check(othersWaits(owner))
      const id = nextWaitId++
      waits.set(id, { ...copyWait(wait), failFast: Boolean(wait.failFast), owner })
      return id
    },

    waitsOfOthers(owner) {
      open()
      return othersWaits(owner)
    },

    endWait(owner, id) {
      open()
      if (waits.get(id)?.owner === owner) waits.delete(id)
    },

    endWaitsOf(owner) {
      open()
      for (const [id, row] of waits) if (row.owner === owner) waits.delete(id)
    },

    close() {
      closed = true
      leases.clear()
      lastTokens.clear()
      waits.clear()
    },
  }
}
