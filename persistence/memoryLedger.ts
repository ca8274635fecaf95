/**
 * In-memory budget ledger: the reference implementation of `Ledger`, for tests and memory mode,
 * and executable documentation of the contract the SQLite backend keeps. Plain Maps; the balance
 * arithmetic is the SQLite ledger's own (ledgerBalance.ts). Nothing survives the process.
 */
import { SpindleError } from '../src/base/errors.js'
import { compareBinary } from './binaryOrder.js'
import { accountNotFound, accountRow, assertSpawnSlot, checkRows, grantFrom, raisedLimit, reservedBy, storedAccount, toAccount } from './ledgerBalance.js'
import type { AccountRow } from './ledgerBalance.js'
import type { BudgetAmounts, BudgetUsage, Ledger, LedgerAccount } from './types.js'

/** The columns SQLite declares NOT NULL, of those a caller's numbers reach. */
const REQUIRED = ['own_spend', 'own_tokens', 'spent_spend', 'spent_tokens', 'created_at', 'updated_at'] as const

function ledgerFailed(message: string, details: Record<string, unknown> = {}): SpindleError {
  return new SpindleError('LEDGER_FAILED', message, { details })
}

/**
 * A limit as SQLite stores it: NaN (and undefined) become NULL, which the ledger reads as
 * unlimited. Kept, not refused, so both backends answer alike; callers pass finite amounts.
 */
function storedLimit(value: number | null | undefined): number | null {
  return value === undefined || value === null || Number.isNaN(value) ? null : value
}

/** Refuses a row SQLite would refuse (a NaN or missing amount or time in a NOT NULL column): nothing is written. */
function assertStorable(row: AccountRow, action: string): void {
  for (const column of REQUIRED) {
    const value = row[column] as number | undefined
    if (value === undefined || value === null || Number.isNaN(value)) {
      throw ledgerFailed(`Could not ${action} in the in-memory budget ledger: ${column} would be ${String(value)}; pass finite amounts and times.`, {
        threadId: row.thread_id,
        column,
      })
    }
  }
}

/** ORDER BY created_at, thread_id. */
function byCreation(a: AccountRow, b: AccountRow): number {
  return a.created_at - b.created_at || compareBinary(a.thread_id, b.thread_id)
}

function untouched(row: AccountRow, hasChildren: boolean): boolean {
  return !row.released && row.spent_spend === 0 && row.spent_tokens === 0 && !hasChildren
}

/**
 * A {@link Ledger} in Maps, for memory mode and tests. Every operation checks all it must before it
 * writes anything, so one that throws (BUDGET_EXCEEDED, THREAD_NOT_FOUND, LEDGER_FAILED) leaves the
 * ledger as it was — what the SQLite ledger's transactions give. Accounts handed out are fresh
 * objects the caller may mutate.
 *
 * Caveats: one process only, nothing durable (`close()` drops every account; a closed ledger throws
 * LEDGER_FAILED on every call but `close`). Only SQLite's serialisation across processes keeps many
 * runtimes on one data directory from oversubscribing a parent; within one process calls never
 * interleave, here as there.
 *
 * @example
 * const ledger = createMemoryLedger()
 * ledger.openRoot('lead', { spend: 1, tokens: null }, Date.now())
 * ledger.reserve('helper', 'lead', { spend: 0.25, tokens: null }, Date.now())
 * ledger.get('lead')?.available.spend // 0.75
 * @see openSqliteLedger for the durable backend.
 */
export function createMemoryLedger(): Ledger {
  // Insertion order stands for SQLite's rowid order: the order of `check()`, `untouched()` and of
  // the sums behind `reserved`, so both backends add the same floats in the same order.
  const rows = new Map<string, AccountRow>()
  const childrenOf = new Map<string, Set<string>>()
  let open = true

  const assertOpen = (): void => {
    if (!open) throw ledgerFailed('The in-memory budget ledger is closed: open a new one (what the closed one held is gone).')
  }

  const insert = (row: AccountRow, action: string): void => {
    assertStorable(row, action)
    rows.set(row.thread_id, row)
    if (row.parent_id === null) return
    const siblings = childrenOf.get(row.parent_id)
    if (siblings) siblings.add(row.thread_id)
    else childrenOf.set(row.parent_id, new Set([row.thread_id]))
  }

  const childRows = (threadId: string): AccountRow[] => [...(childrenOf.get(threadId) ?? [])].map((id) => rows.get(id)!)

  /** The children of `threadId`, and below each released one its children, and so on, each once (the SQLite ledger's `heldBelow`). */
  const heldBelow = (threadId: string): AccountRow[] => {
    const below: AccountRow[] = []
    const included = new Set<string>()
    const include = (parentId: string): void => {
      for (const child of childRows(parentId)) {
        if (included.has(child.thread_id)) continue
        included.add(child.thread_id)
        below.push(child)
      }
    }
    include(threadId)
    // `below` grows while it is walked: breadth first, as SQLite's recursive query runs.
    for (let i = 0; i < below.length; i++) if (below[i]!.released) include(below[i]!.thread_id)
    return below
  }

  const account = (row: AccountRow): LedgerAccount => toAccount(row, reservedBy(row.thread_id, heldBelow(row.thread_id)))

  const mustGet = (threadId: string, role: string): AccountRow => {
    const row = rows.get(threadId)
    if (!row) throw accountNotFound(threadId, role)
    return row
  }

  const opened = (threadId: string, parentId: string | null, limit: BudgetAmounts, at: number): AccountRow => ({
    thread_id: threadId,
    parent_id: parentId,
    limit_spend: storedLimit(limit.spend),
    limit_tokens: storedLimit(limit.tokens),
    own_spend: 0,
    own_tokens: 0,
    spent_spend: 0,
    spent_tokens: 0,
    released: 0,
    created_at: at,
    updated_at: at,
  })

  return {
    openRoot(threadId, limit, at) {
      assertOpen()
      const existing = rows.get(threadId)
      if (existing) return account(existing)
      insert(opened(threadId, null, limit, at), `open the account of ${threadId}`)
      return account(rows.get(threadId)!)
    },

    reserve(childId, parentId, request, at, slot) {
      assertOpen()
      const existing = rows.get(childId)
      if (existing) return account(existing)
      const parent = mustGet(parentId, 'parent')
      if (slot) assertSpawnSlot(parentId, childrenOf.get(parentId) ?? [], slot)
      const granted = grantFrom(account(parent), request)
      insert(opened(childId, parentId, granted, at), `reserve a budget for ${childId}`)
      return account(rows.get(childId)!)
    },

    record(threadId, delta: BudgetUsage, at) {
      assertOpen()
      const row = mustGet(threadId, 'thread')
      // Every changed row first, then checked, then stored: a NaN anywhere writes nothing.
      const changed: AccountRow[] = [{ ...row, own_spend: row.own_spend + delta.spend, own_tokens: row.own_tokens + delta.tokens, updated_at: at }]
      // Cascade to every ancestor (the thread's own `spent` first); a cycle in damaged data must not loop forever.
      const seen = new Set<string>()
      for (let id: string | null = threadId; id !== null && !seen.has(id); ) {
        seen.add(id)
        const current: AccountRow | undefined = id === threadId ? changed[0] : rows.get(id)
        if (!current) break
        const next = { ...current, spent_spend: current.spent_spend + delta.spend, spent_tokens: current.spent_tokens + delta.tokens, updated_at: at }
        if (id === threadId) changed[0] = next
        else changed.push(next)
        id = current.parent_id
      }
      for (const next of changed) assertStorable(next, `record the usage of ${threadId}`)
      for (const next of changed) rows.set(next.thread_id, next)
    },

    release(threadId, at) {
      assertOpen()
      const row = rows.get(threadId)
      if (!row || row.released) return
      const next = { ...row, released: 1, updated_at: at }
      assertStorable(next, `release the budget of ${threadId}`)
      rows.set(threadId, next)
    },

    raise(threadId, limit, at) {
      assertOpen()
      const row = mustGet(threadId, 'thread')
      const parent = row.parent_id ? account(mustGet(row.parent_id, 'parent')) : null
      const next = raisedLimit(row, parent, limit)
      const raised = { ...row, limit_spend: storedLimit(next.spend), limit_tokens: storedLimit(next.tokens), updated_at: at }
      assertStorable(raised, `raise the budget of ${threadId}`)
      rows.set(threadId, raised)
      return account(raised)
    },

    get(threadId) {
      assertOpen()
      const row = rows.get(threadId)
      return row ? account(row) : null
    },

    children(threadId) {
      assertOpen()
      return childRows(threadId).sort(byCreation).map(account)
    },

    check() {
      assertOpen()
      return checkRows([...rows.values()])
    },

    untouched() {
      assertOpen()
      return [...rows.values()].filter((row) => untouched(row, (childrenOf.get(row.thread_id)?.size ?? 0) > 0)).map((row) => row.thread_id)
    },

    dropUnborn(threadId) {
      assertOpen()
      const row = rows.get(threadId)
      if (!row || row.own_spend !== 0 || row.own_tokens !== 0 || !untouched(row, (childrenOf.get(threadId)?.size ?? 0) > 0)) return false
      rows.delete(threadId)
      if (row.parent_id !== null) childrenOf.get(row.parent_id)?.delete(threadId)
      return true
    },

    accounts() {
      assertOpen()
      return [...rows.values()].map(storedAccount)
    },

    restore(accounts) {
      assertOpen()
      // Every row checked before any is stored, as one SQLite transaction would refuse them all.
      const fresh = accounts.map(accountRow).filter((row) => !rows.has(row.thread_id))
      for (const row of fresh) assertStorable(row, `restore the account of ${row.thread_id}`)
      for (const row of fresh) if (!rows.has(row.thread_id)) insert(row, `restore the account of ${row.thread_id}`)
    },

    close() {
      open = false
      rows.clear()
      childrenOf.clear()
    },
  }
}
