/**
 * `spindle locks` (design 003 §2): the leases of a data directory, which of them are stale, and
 * reclaiming those — never a live one younger than its TTL unless forced — with an audit log.
 */
import fs from 'node:fs'
import { pidAlive } from '../base/processes.js'
import os from 'node:os'
import path from 'node:path'
import { dataDirNotFound, dataPaths } from '../../persistence/paths.js'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import type { Lease, LeaseStore } from '../../persistence/types.js'

export type LockState =
  /** Renewed in time by a process that is alive (or on another host). */
  | 'live'
  /** Its expiry passed without a renewal. */
  | 'expired'
  /** Held by a process of this host that no longer exists. */
  | 'dead_owner'

export interface LockView extends Lease {
  state: LockState
  /** ms until expiry (negative: expired that long ago). */
  expiresInMs: number
}

export interface LocksReport {
  locks: LockView[]
  /** What was reclaimed (only with apply). */
  reclaimed: LockView[]
  /** Live locks left alone because they were not forced. */
  kept: LockView[]
}

export function lockState(lease: Lease, now: number, host = os.hostname()): LockState {
  if (lease.host === host && !pidAlive(lease.pid)) return 'dead_owner'
  return lease.expiresAt <= now ? 'expired' : 'live'
}

function withLeases<T>(dir: string, fn: (leases: LeaseStore) => T): T {
  const paths = dataPaths(dir)
  const file = paths.leases
  if (!fs.existsSync(file)) {
    // A data directory whose runtimes never took a lease has none; a directory with no registry
    // either is not a data directory (like every other command, say so).
    if (!fs.existsSync(paths.registry)) throw dataDirNotFound(paths)
    return fn(emptyStore)
  }
  const leases = openSqliteLeases({ path: file, durability: 'process' })
  try {
    return fn(leases)
  } finally {
    leases.close()
  }
}

const emptyStore = {
  list: () => [],
  remove: () => null,
} as unknown as LeaseStore

/** The audit log every reclaimed lock is appended to. */
export function locksLogFile(dir: string): string {
  return path.join(dataPaths(dir).root, 'locks.log.jsonl')
}

/**
 * Lists the leases (dry run) or, with `apply`, reclaims the stale ones — and with `force` the live
 * ones too — appending each to `locks.log.jsonl`.
 */
export function locks(dir: string, options: LocksOptions = {}): LocksReport {
  return withLeases(dir, (store) => reviewLocks(store, options, (line) => fs.appendFileSync(locksLogFile(dir), `${JSON.stringify(line)}\n`)))
}

export interface LocksOptions {
  apply?: boolean
  force?: boolean
  now?: number
  only?: readonly string[]
}

/** `locks` of any backend's lease store; `audit` is told of each lease reclaimed (null: it is kept nowhere). */
export function reviewLocks(store: LeaseStore, options: LocksOptions, audit: ((line: Record<string, unknown>) => void) | null): LocksReport {
  const now = options.now ?? Date.now()
  const views: LockView[] = store.list().map((lease) => ({ ...lease, state: lockState(lease, now), expiresInMs: lease.expiresAt - now }))
  const report: LocksReport = { locks: views, reclaimed: [], kept: [] }
  if (!options.apply) return report
  for (const view of views) {
    if (options.only && !options.only.includes(view.threadId)) continue
    if (view.state === 'live' && !options.force) {
      report.kept.push(view)
      continue
    }
    // A live owner may be mid-write: its lease is revoked, not freed, so no other runtime runs
    // the thread until the owner has stopped (at its next heartbeat, or at the lease's expiry).
    const forced = view.state === 'live'
    const removed = forced ? store.revoke(view.threadId) : store.remove(view.threadId)
    if (!removed) continue
    report.reclaimed.push(view)
    audit?.({ at: new Date(now).toISOString(), action: forced ? 'revoked' : 'reclaimed', forced, by: `${os.hostname()}:${process.pid}`, lease: removed, state: view.state, ...(forced ? { freeAt: new Date(removed.expiresAt).toISOString() } : {}) })
  }
  return report
}
