/**
 * What the PostgreSQL stores share around every call: PostgreSQL failures as the store's own error
 * (REGISTRY_FAILED, LEDGER_FAILED …) naming the database and schema and saying what to do, as
 * sqliteFile.ts does for files, while SpindleErrors (DATABASE_UNAVAILABLE, BUDGET_EXCEEDED …) and
 * whatever a caller's callback threw pass unchanged; a closed store refused; and the checks a
 * store makes before a write so that the database never refuses one inside a transaction (a
 * failed statement aborts a PostgreSQL transaction, where SQLite would carry on after it).
 * Side effects: none.
 */
import { isSpindleError, SpindleError } from '../../src/base/errors.js'
import type { SpindleErrorCode } from '../../src/base/errors.js'
import { redact, type PgBridge } from './bridge.js'

export interface PgStore {
  /** The error code of this store's failures. */
  code: SpindleErrorCode
  /** What the store is, for messages: "the registry", "the recovery state" … */
  what: string
  db: PgBridge
}

/** A failure PostgreSQL reported (it carries a five-character SQLSTATE). */
function sqlState(error: unknown): string | null {
  if (!(error instanceof Error) || isSpindleError(error)) return null
  const code = (error as { code?: unknown }).code
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null
}

/** What the user can do about a PostgreSQL failure, by its SQLSTATE. */
function hint(state: string): string {
  if (state === '42501') return 'The database user lacks a privilege on the schema; grant it, or use the user that migrated it.'
  if (state === '42P01' || state === '42703') return 'The schema is missing tables or columns: open the database with the spindle that migrates it (migrations run when a runtime opens it).'
  if (state === '40P01') return 'Two processes waited on each other for the same rows; the database ended this one. The call can be made again.'
  if (state === '57014') return 'The statement ran past its time limit: check the database server for load or locks held by a stuck session.'
  if (state.startsWith('53')) return "The database server is short of disk, memory or connections: check the server's log."
  if (state.startsWith('23')) return 'A row broke one of the schema\'s rules: a hand edit of the tables, or a bug in spindle (please report it).'
  return "Check the database server's log."
}

/** A PostgreSQL failure of `action` as the store's error naming the schema; anything else unchanged. */
export function pgFailure(store: PgStore, action: string, error: unknown): unknown {
  const state = sqlState(error)
  if (state === null) return error
  const where = `schema ${store.db.schema ?? 'public'} of ${redact(store.db.url)}`
  return new SpindleError(store.code, `Could not ${action} in ${store.what} (${where}): ${(error as Error).message}. ${hint(state)}`, {
    cause: error,
    details: { schema: store.db.schema ?? 'public', pgCode: state },
  })
}

export interface PgGuard {
  /** Runs `fn` on the open store, turning a PostgreSQL failure into the store's error. */
  <T>(action: string, fn: () => T): T
  /** `fn`, whose throw the guard passes unchanged (a caller's `stale` or `check`). */
  callerOf<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R
  /** Every later call fails (the bridge stays open: it is the caller's). */
  close(): void
}

export function pgGuard(store: PgStore): PgGuard {
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
      if (error === thrownByCaller) throw error
      throw pgFailure(store, action, error)
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

/** The store's error for a value it refuses before sending it. */
export function refused(store: PgStore, message: string, details: Record<string, unknown> = {}): SpindleError {
  return new SpindleError(store.code, message, { details: { schema: store.db.schema ?? 'public', ...details } })
}

/**
 * Why a value cannot go into a bigint column (ms times, counters), or null. Checked first:
 * PostgreSQL refuses 1.5 where SQLite stores it.
 */
export function notAnInteger(value: unknown): string | null {
  return Number.isSafeInteger(value) ? null : `${String(value)} is not an integer`
}

/** Why a string cannot go into a text column, or null: PostgreSQL text holds no NUL character. */
export function notText(value: string): string | null {
  return value.includes('\u0000') ? 'it contains a NUL character' : null
}
