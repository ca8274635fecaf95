/**
 * The budget ledger on SQLite (`ledger.db`): hierarchical spend and token budgets over thread
 * trees. Every operation is one transaction taken with BEGIN IMMEDIATE, so reservations from any
 * number of processes on one data directory are serialized and never oversubscribe a parent.
 * Side effects. Knows nothing about machines.
 */
import { openSqliteFile, sqliteGuard } from './sqliteFile.js'
import type { SqliteStore } from './sqliteFile.js'
import { SpindleError } from '../src/base/errors.js'
import type { BudgetAmounts, BudgetUsage, Durability, Ledger, LedgerAccount, LedgerProblem } from './types.js'

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE accounts (
     thread_id TEXT PRIMARY KEY,
     parent_id TEXT NULL,
     limit_spend REAL NULL,
     limit_tokens INTEGER NULL,
     own_spend REAL NOT NULL DEFAULT 0,
     own_tokens INTEGER NOT NULL DEFAULT 0,
     spent_spend REAL NOT NULL DEFAULT 0,
     spent_tokens INTEGER NOT NULL DEFAULT 0,
     released INTEGER NOT NULL DEFAULT 0,
     created_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL
   );
   CREATE INDEX accounts_parent ON accounts(parent_id);`,
]

/** Dollars are floats: 10 × 0.1 must fit in 1.0. */
const EPSILON = 1e-9

interface Row {
  thread_id: string
  parent_id: string | null
  limit_spend: number | null
  limit_tokens: number | null
  own_spend: number
  own_tokens: number
  spent_spend: number
  spent_tokens: number
  released: number
  created_at: number
  updated_at: number
}

type Amount = 'spend' | 'tokens'
const AMOUNTS: readonly Amount[] = ['spend', 'tokens']

function limitOf(row: Row, amount: Amount): number | null {
  return amount === 'spend' ? row.limit_spend : row.limit_tokens
}
function spentOf(row: Row, amount: Amount): number {
  return amount === 'spend' ? row.spent_spend : row.spent_tokens
}

/**
 * What a child still holds of its parent's budget. An open child: its limit minus what it has
 * spent. An ended (released) child: only what its own open descendants still hold — a child may
 * end before its children do, and their reservations must keep counting up the tree, or an
 * ancestor would grant the same money twice. `below` lists accounts by parent (see `heldBelow`).
 */
function held(child: Row, amount: Amount, below: Map<string, Row[]>, seen: Set<string>): number {
  const limit = limitOf(child, amount)
  const unspent = limit === null ? Infinity : Math.max(0, limit - spentOf(child, amount))
  if (!child.released) return limit === null ? 0 : unspent
  if (seen.has(child.thread_id)) return 0 // a cycle in damaged data
  seen.add(child.thread_id)
  let sum = 0
  for (const grandchild of below.get(child.thread_id) ?? []) sum += held(grandchild, amount, below, seen)
  return Math.min(unspent, sum)
}

function money(amount: Amount, value: number): string {
  return amount === 'spend' ? `$${value.toFixed(4).replace(/0+$/, '').replace(/\.$/, '')}` : `${value} tokens`
}

export function openSqliteLedger(options: { path: string; durability: Durability }): Ledger {
  const store: SqliteStore = { code: 'LEDGER_FAILED', what: 'the budget ledger', file: options.path }
  const db = openSqliteFile(store, { synchronous: options.durability === 'fsync' ? 'FULL' : 'NORMAL', migrations: MIGRATIONS })
  const get = db.prepare<[string], Row>('SELECT * FROM accounts WHERE thread_id = ?')
  const children = db.prepare<[string], Row>('SELECT * FROM accounts WHERE parent_id = ? ORDER BY created_at, thread_id')
  const all = db.prepare<[], Row>('SELECT * FROM accounts')
  const insert = db.prepare(
    `INSERT INTO accounts (thread_id, parent_id, limit_spend, limit_tokens, created_at, updated_at)
     VALUES (@threadId, @parentId, @spend, @tokens, @at, @at)`,
  )
  const addSpent = db.prepare<[number, number, number, string]>(
    'UPDATE accounts SET spent_spend = spent_spend + ?, spent_tokens = spent_tokens + ?, updated_at = ? WHERE thread_id = ?',
  )
  const addOwn = db.prepare<[number, number, number, string]>(
    'UPDATE accounts SET own_spend = own_spend + ?, own_tokens = own_tokens + ?, updated_at = ? WHERE thread_id = ?',
  )
  const setReleased = db.prepare<[number, string]>('UPDATE accounts SET released = 1, updated_at = ? WHERE thread_id = ?')
  const untouched = db.prepare<[], { thread_id: string }>(
    `SELECT thread_id FROM accounts a WHERE released = 0 AND spent_spend = 0 AND spent_tokens = 0
       AND NOT EXISTS (SELECT 1 FROM accounts c WHERE c.parent_id = a.thread_id)`,
  )
  const dropUnborn = db.prepare<[string, string]>(
    `DELETE FROM accounts WHERE thread_id = ? AND released = 0 AND own_spend = 0 AND own_tokens = 0
       AND spent_spend = 0 AND spent_tokens = 0 AND NOT EXISTS (SELECT 1 FROM accounts c WHERE c.parent_id = ?)`,
  )
  const setLimit = db.prepare<[number | null, number | null, number, string]>(
    'UPDATE accounts SET limit_spend = ?, limit_tokens = ?, updated_at = ? WHERE thread_id = ?',
  )

  // A thread's children, and below each ended child its children, and so on: the accounts whose
  // reservations still count against the thread. UNION (not UNION ALL) ends on a cycle in damaged data.
  const heldBelow = db.prepare<[string], Row>(
    `WITH RECURSIVE below AS (
       SELECT * FROM accounts WHERE parent_id = ?
       UNION
       SELECT a.* FROM accounts a JOIN below b ON a.parent_id = b.thread_id WHERE b.released = 1
     )
     SELECT * FROM below`,
  )

  const reservedBy = (threadId: string): BudgetUsage => {
    const reserved = { spend: 0, tokens: 0 }
    const below = new Map<string, Row[]>()
    for (const row of heldBelow.all(threadId)) {
      const siblings = below.get(row.parent_id!)
      if (siblings) siblings.push(row)
      else below.set(row.parent_id!, [row])
    }
    for (const child of below.get(threadId) ?? []) for (const a of AMOUNTS) reserved[a] += held(child, a, below, new Set([threadId]))
    return reserved
  }

  const toAccount = (row: Row): LedgerAccount => {
    const reserved = reservedBy(row.thread_id)
    const available: BudgetAmounts = { spend: null, tokens: null }
    for (const a of AMOUNTS) {
      const limit = limitOf(row, a)
      available[a] = limit === null ? null : limit - spentOf(row, a) - reserved[a]
    }
    return {
      threadId: row.thread_id,
      parentId: row.parent_id,
      limit: { spend: row.limit_spend, tokens: row.limit_tokens },
      spent: { spend: row.spent_spend, tokens: row.spent_tokens },
      ownSpent: { spend: row.own_spend, tokens: row.own_tokens },
      reserved,
      available,
      released: row.released === 1,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
    }
  }

  const mustGet = (threadId: string, role: string): Row => {
    const row = get.get(threadId)
    if (!row) {
      throw new SpindleError('THREAD_NOT_FOUND', `The budget ledger has no account for ${role} ${threadId}. It was spawned before budgets were kept, or ledger.db was lost; \`spindle doctor\` checks it.`, {
        details: { threadId },
      })
    }
    return row
  }

  /** Refuses `requested` when the parent's available amount cannot cover it (nothing left covers nothing). */
  const assertCovered = (parent: LedgerAccount, amount: Amount, requested: number): void => {
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

  const openRootTx = db.transaction((threadId: string, limit: BudgetAmounts, at: number): LedgerAccount => {
    const existing = get.get(threadId)
    if (existing) return toAccount(existing)
    insert.run({ threadId, parentId: null, spend: limit.spend, tokens: limit.tokens, at })
    return toAccount(get.get(threadId)!)
  })

  const reserveTx = db.transaction((childId: string, parentId: string, request: BudgetAmounts, at: number): LedgerAccount => {
    const existing = get.get(childId)
    if (existing) return toAccount(existing)
    const parent = toAccount(mustGet(parentId, 'parent'))
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
    insert.run({ threadId: childId, parentId, spend: granted.spend, tokens: granted.tokens, at })
    return toAccount(get.get(childId)!)
  })

  const recordTx = db.transaction((threadId: string, delta: BudgetUsage, at: number): void => {
    mustGet(threadId, 'thread')
    addOwn.run(delta.spend, delta.tokens, at, threadId)
    // Cascade to every ancestor; a cycle in damaged data must not loop forever.
    const seen = new Set<string>()
    let id: string | null = threadId
    while (id !== null && !seen.has(id)) {
      seen.add(id)
      addSpent.run(delta.spend, delta.tokens, at, id)
      id = get.get(id)?.parent_id ?? null
    }
  })

  const releaseTx = db.transaction((threadId: string, at: number): void => {
    const row = get.get(threadId)
    if (row && !row.released) setReleased.run(at, threadId)
  })

  const raiseTx = db.transaction((threadId: string, limit: Partial<BudgetAmounts>, at: number): LedgerAccount => {
    const row = mustGet(threadId, 'thread')
    const next: BudgetAmounts = { spend: row.limit_spend, tokens: row.limit_tokens }
    const parent = row.parent_id ? toAccount(mustGet(row.parent_id, 'parent')) : null
    for (const a of AMOUNTS) {
      const wanted = limit[a]
      if (wanted === undefined) continue
      const current = limitOf(row, a)
      if (parent && !row.released) {
        if (wanted === null) {
          if (parent.available[a] !== null) {
            throw new SpindleError('BUDGET_EXCEEDED', `Thread ${threadId} cannot have an unlimited ${a} budget: its parent ${parent.threadId}'s is limited.`, {
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
    setLimit.run(next.spend, next.tokens, at, threadId)
    return toAccount(get.get(threadId)!)
  })

  const guard = sqliteGuard(store)

  return {
    openRoot: (threadId, limit, at) => guard(`open the account of ${threadId}`, () => openRootTx.immediate(threadId, limit, at)),
    reserve: (childId, parentId, request, at) => guard(`reserve a budget for ${childId}`, () => reserveTx.immediate(childId, parentId, request, at)),
    record: (threadId, delta, at) => guard(`record the usage of ${threadId}`, () => recordTx.immediate(threadId, delta, at)),
    release: (threadId, at) => guard(`release the budget of ${threadId}`, () => releaseTx.immediate(threadId, at)),
    raise: (threadId, limit, at) => guard(`raise the budget of ${threadId}`, () => raiseTx.immediate(threadId, limit, at)),
    get: (threadId) =>
      guard(`read the account of ${threadId}`, () => {
        const row = get.get(threadId)
        return row ? toAccount(row) : null
      }),
    children: (threadId) => guard(`list the children of ${threadId}`, () => children.all(threadId).map(toAccount)),
    check: () =>
      guard('check balances', () => {
        const rows = all.all()
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
      }),
    untouched: () => guard('list untouched accounts', () => untouched.all().map((r) => r.thread_id)),
    dropUnborn: (threadId) =>
      guard(`drop the account of ${threadId}, which was never spawned`, () => db.transaction(() => dropUnborn.run(threadId, threadId).changes > 0).immediate()),
    close: () => db.close(),
  }
}
