/**
 * What the PostgreSQL lease store and ledger share around every call: refusing a closed store,
 * and a database failure turned into the store's error naming the schema and what to do, while
 * SpindleErrors (DATABASE_UNAVAILABLE, BUDGET_EXCEEDED …) and whatever a caller's callback threw
 * pass unchanged. Side effects: none of its own.
 */
import { SpindleError } from '../../src/base/errors.js'
import type { SpindleErrorCode } from '../../src/base/errors.js'
import type { PgBridge } from './bridge.js'

export interface PgStore {
  /** The error code of this store's failures (REGISTRY_FAILED, LEDGER_FAILED …). */
  code: SpindleErrorCode
  /** What the store is, for messages: "the lease store", "the budget ledger" … */
  what: string
}

/** What the user can do about a PostgreSQL failure, by its SQLSTATE. */
function pgHint(pgCode: string | undefined): string {
  if (pgCode === '42P01' || pgCode === '42703') return 'The schema lacks spindle\'s tables: open it with this spindle once (it migrates), or check the configured schema.'
  if (pgCode === '40P01') return 'Another transaction held the rows this one needed (a deadlock the server broke); try again.'
  if (pgCode?.startsWith('53')) return "The database server is out of resources (disk, memory or connections); free some and try again."
  if (pgCode === '42501') return 'The database user lacks a privilege on the schema; grant it, or use the user that migrated it.'
  return "Check the database server's log."
}

export interface PgGuard {
  /** Runs `fn` on the open store, turning a database failure into the store's error. */
  <T>(action: string, fn: () => T): T
  /** `fn`, whose throw `guard` passes unchanged (a caller's `stale` or `check`). */
  callerOf<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R
  close(): void
}

/** A guard for `store` on `db`; `close()` makes every later call fail (the bridge stays open: it is the caller's). */
export function pgGuard(store: PgStore, db: PgBridge): PgGuard {
  let closed = false
  const none = Symbol('none')
  let thrownByCaller: unknown = none
  const guard = (<T>(action: string, fn: () => T): T => {
    if (closed) {
      throw new SpindleError(store.code, `${store.what[0]!.toUpperCase()}${store.what.slice(1)} was closed: could not ${action}, nothing was read or changed. Open it again.`)
    }
    thrownByCaller = none
    try {
      return fn()
    } catch (error) {
      if (error instanceof SpindleError || error === thrownByCaller) throw error
      const pgCode = (error as { code?: unknown }).code
      const code = typeof pgCode === 'string' ? pgCode : undefined
      throw new SpindleError(
        store.code,
        `Could not ${action} in ${store.what} (PostgreSQL schema ${db.schema ?? 'public'}): ${error instanceof Error ? error.message : String(error)}. ${pgHint(code)}`,
        { cause: error, details: { schema: db.schema ?? 'public', ...(code ? { pgCode: code } : {}) } },
      )
    } finally {
      thrownByCaller = none
    }
  }) as PgGuard
  guard.callerOf = (fn) => (...args) => {
    try {
      return fn(...args)
    } catch (error) {
      thrownByCaller = error
      throw error
    }
  }
  guard.close = () => {
    closed = true
  }
  return guard
}
