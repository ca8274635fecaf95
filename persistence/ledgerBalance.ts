/**
 * The budget ledger's arithmetic, shared by its backends: what a child holds of its parent, what
 * an account has available, whether a reservation or a raise is covered, and what `check()` finds.
 * Pure: takes account rows, returns numbers, accounts and errors. No I/O.
 */
import { SpindleError } from '../src/base/errors.js'
import type { BudgetAmounts, BudgetUsage, LedgerAccount, LedgerProblem, SpawnSlot, StoredAccount } from './types.js'

/** One account as ledger.db stores it (a row of `accounts`); the memory ledger keeps the same shape. */
export interface AccountRow {
  thread_id: string
  parent_id: string | null
  limit_spend: number | null
  limit_tokens: number | null
  own_spend: number
  own_tokens: number
  spent_spend: number
  spent_tokens: number
  /** 1 once released, else 0 (SQLite has no booleans). */
  released: number
  created_at: number
  updated_at: number
}

export type Amount = 'spend' | 'tokens'
export const AMOUNTS: readonly Amount[] = ['spend', 'tokens']

/** Dollars are floats: 10 × 0.1 must fit in 1.0. */
export const EPSILON = 1e-9

export function limitOf(row: AccountRow, amount: Amount): number | null {
  return amount === 'spend' ? row.limit_spend : row.limit_tokens
}

export function spentOf(row: AccountRow, amount: Amount): number {
  return amount === 'spend' ? row.spent_spend : row.spent_tokens
}

/**
 * What a child still holds of its parent's budget. An open child: its limit minus what it has
 * spent. An ended (released) child: only what its own open descendants still hold — a child may
 * end before its children do, and their reservations must keep counting up the tree, or an
 * ancestor would grant the same money twice. `below` lists accounts by parent (see `reservedBy`).
 */
function held(child: AccountRow, amount: Amount, below: Map<string, AccountRow[]>, seen: Set<string>): number {
  const limit = limitOf(child, amount)
  const unspent = limit === null ? Infinity : Math.max(0, limit - spentOf(child, amount))
  if (!child.released) return limit === null ? 0 : unspent
  if (seen.has(child.thread_id)) return 0 // a cycle in damaged data
  seen.add(child.thread_id)
  let sum = 0
  for (const grandchild of below.get(child.thread_id) ?? []) sum += held(grandchild, amount, below, seen)
  return Math.min(unspent, sum)
}

/**
 * What `threadId`'s children hold of it. `below`: its children, and below each released one its
 * children, and so on (each account once) — the accounts whose reservations still count against
 * it. Sums follow the order of `below`, so backends that list it alike get the same floats.
 */
export function reservedBy(threadId: string, below: Iterable<AccountRow>): BudgetUsage {
  const reserved = { spend: 0, tokens: 0 }
  const byParent = new Map<string, AccountRow[]>()
  for (const row of below) {
    const siblings = byParent.get(row.parent_id!)
    if (siblings) siblings.push(row)
    else byParent.set(row.parent_id!, [row])
  }
  for (const child of byParent.get(threadId) ?? []) for (const a of AMOUNTS) reserved[a] += held(child, a, byParent, new Set([threadId]))
  return reserved
}

/** The account a row stands for, given what its children hold of it. */
export function toAccount(row: AccountRow, reserved: BudgetUsage): LedgerAccount {
  const available: BudgetAmounts = { spend: null, tokens: null }
  for (const a of AMOUNTS) {
    const limit = limitOf(row, a)
    available[a] = limit === null ? null : limit - spentOf(row, a) - reserved[a]
  }
  return { ...storedAccount(row), reserved, available }
}

/** A row as `Ledger.accounts()` gives it. */
export function storedAccount(row: AccountRow): StoredAccount {
  return {
    threadId: row.thread_id,
    parentId: row.parent_id,
    limit: { spend: row.limit_spend, tokens: row.limit_tokens },
    ownSpent: { spend: row.own_spend, tokens: row.own_tokens },
    spent: { spend: row.spent_spend, tokens: row.spent_tokens },
    released: row.released === 1,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  }
}

/** The row a restored account is stored as. */
export function accountRow(account: StoredAccount): AccountRow {
  return {
    thread_id: account.threadId,
    parent_id: account.parentId,
    limit_spend: account.limit.spend,
    limit_tokens: account.limit.tokens,
    own_spend: account.ownSpent.spend,
    own_tokens: account.ownSpent.tokens,
    spent_spend: account.spent.spend,
    spent_tokens: account.spent.tokens,
    released: account.released ? 1 : 0,
    created_at: account.createdAt,
    updated_at: account.updatedAt,
  }
}

function money(amount: Amount, value: number): string {
  return amount === 'spend' ? `$${value.toFixed(4).replace(/0+$/, '').replace(/\.$/, '')}` : `${value} tokens`
}

/** THREAD_NOT_FOUND for an operation on `threadId`, in the role (thread, parent) it has in it. */
export function accountNotFound(threadId: string, role: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `The budget ledger has no account for ${role} ${threadId}. It was spawned before budgets were kept, or ledger.db was lost; \`spindle doctor\` checks it.`, {
    details: { threadId },
  })
}

/** Refuses `requested` when the parent's available amount cannot cover it (nothing left covers nothing). */
export function assertCovered(parent: LedgerAccount, amount: Amount, requested: number): void {
  const available = parent.available[amount]
  if (available === null || (requested <= available + EPSILON && available > EPSILON)) return
  const left = Math.max(0, available)
  throw new SpindleError(
    'BUDGET_EXCEEDED',
    `Thread ${parent.threadId} has ${money(amount, left)} of its ${money(amount, parent.limit[amount]!)} ${amount} budget left ` +
      `(${money(amount, parent.spent[amount])} spent, ${money(amount, parent.reserved[amount])} reserved by its open children); ` +
      `ask for at most ${money(amount, left)}, or raise ${parent.threadId}'s ${amount} limit first.`,
    { details: { parentId: parent.threadId, amount, requested, available: left } },
  )
}

/** SPAWN_REFUSED: thread `threadId` has started `started` children, and may start `max`. */
export function spawnsRefused(threadId: string, started: number, max: number): SpindleError {
  return new SpindleError('SPAWN_REFUSED', `Thread ${threadId} has started ${started} children, its spawns limit is ${max}.`, {
    details: { threadId, limit: 'spawns', started, max },
  })
}

/** Refuses a new child of `parentId` when its children (`children`, its accounts', with `slot.known`) fill its spawn slots. */
export function assertSpawnSlot(parentId: string, children: Iterable<string>, slot: SpawnSlot): void {
  const started = new Set(children)
  for (const id of slot.known) started.add(id)
  if (started.size >= slot.max) throw spawnsRefused(parentId, started.size, slot.max)
}

/** The limit a new child of `parent` gets for `request`; BUDGET_EXCEEDED when the parent cannot cover it. */
export function grantFrom(parent: LedgerAccount, request: BudgetAmounts): BudgetAmounts {
  const granted: BudgetAmounts = { spend: null, tokens: null }
  for (const a of AMOUNTS) {
    const available = parent.available[a]
    const asked = request[a]
    // Asking for "unlimited" under a limited parent gets whatever the parent has left.
    const want = asked === null ? available : asked
    if (want === null) continue
    assertCovered(parent, a, want)
    granted[a] = a === 'tokens' ? Math.floor(want) : want
  }
  return granted
}

/**
 * The limits of `row` after a raise to `limit` (amounts left out keep theirs). An open child's
 * growth is reserved from `parent`: BUDGET_EXCEEDED when it cannot cover it, or when the child asks
 * to be unlimited under a limited parent. A root, or a released child, takes any limit.
 */
export function raisedLimit(row: AccountRow, parent: LedgerAccount | null, limit: Partial<BudgetAmounts>): BudgetAmounts {
  const next: BudgetAmounts = { spend: row.limit_spend, tokens: row.limit_tokens }
  for (const a of AMOUNTS) {
    const wanted = limit[a]
    if (wanted === undefined) continue
    const current = limitOf(row, a)
    if (parent && !row.released) {
      if (wanted === null) {
        if (parent.available[a] !== null) {
          throw new SpindleError('BUDGET_EXCEEDED', `Thread ${row.thread_id} cannot have an unlimited ${a} budget: its parent ${parent.threadId}'s is limited.`, {
            details: { parentId: parent.threadId, amount: a },
          })
        }
      } else if (current !== null) {
        // Only the growth of what the child holds beyond its spend is reserved from the parent.
        const spent = spentOf(row, a)
        const more = Math.max(0, wanted - spent) - Math.max(0, current - spent)
        if (more > EPSILON) assertCovered(parent, a, more)
      }
    }
    next[a] = wanted
  }
  return next
}

/** Recomputes every account's `spent` from the own usage of its tree, and lists what does not add up. */
export function checkRows(rows: readonly AccountRow[]): LedgerProblem[] {
  const byId = new Map(rows.map((r) => [r.thread_id, r]))
  const problems: LedgerProblem[] = []
  const expected = new Map<string, BudgetUsage>()
  for (const row of rows) expected.set(row.thread_id, { spend: 0, tokens: 0 })
  for (const row of rows) {
    if (row.parent_id !== null && !byId.has(row.parent_id)) {
      problems.push({ threadId: row.thread_id, kind: 'orphan_account', message: `account ${row.thread_id} names parent ${row.parent_id}, which has no account` })
    }
    // Each thread's own usage counts for it and every ancestor.
    const seen = new Set<string>()
    let id: string | null = row.thread_id
    while (id !== null && byId.has(id) && !seen.has(id)) {
      seen.add(id)
      const e = expected.get(id)!
      e.spend += row.own_spend
      e.tokens += row.own_tokens
      id = byId.get(id)!.parent_id
    }
  }
  for (const row of rows) {
    const e = expected.get(row.thread_id)!
    if (Math.abs(e.spend - row.spent_spend) > 1e-6 || e.tokens !== row.spent_tokens) {
      problems.push({
        threadId: row.thread_id,
        kind: 'spent_mismatch',
        message: `account ${row.thread_id} records ${row.spent_spend} spent and ${row.spent_tokens} tokens, but its tree's usage adds up to ${e.spend} and ${e.tokens}`,
      })
    }
    // A negative `available` is no damage: a thread's own replies may spend what its open
    // children hold (limits are checked before calls); it then suspends for its budget.
  }
  return problems
}
