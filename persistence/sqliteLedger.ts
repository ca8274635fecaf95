/**
 * The budget ledger on SQLite (`ledger.db`): hierarchical spend and token budgets over thread
 * trees. Every operation is one transaction taken with BEGIN IMMEDIATE, so reservations from any
 * number of processes on one data directory are serialized and never oversubscribe a parent.
 * Side effects. Knows nothing about machines.
 */
import { accountNotFound, accountRow, assertSpawnSlot, checkRows, grantFrom, raisedLimit, reservedBy, storedAccount, toAccount as accountOf } from './ledgerBalance.js'
import type { AccountRow } from './ledgerBalance.js'
import { openSqliteFile, sqliteGuard } from './sqliteFile.js'
import type { SqliteStore } from './sqliteFile.js'
import type { BudgetAmounts, BudgetUsage, Durability, Ledger, LedgerAccount, SpawnSlot } from './types.js'

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

type Row = AccountRow

export function openSqliteLedger(options: { path: string; durability: Durability }): Ledger {
  const store: SqliteStore = { code: 'LEDGER_FAILED', what: 'the budget ledger', file: options.path }
  const db = openSqliteFile(store, { synchronous: options.durability === 'fsync' ? 'FULL' : 'NORMAL', migrations: MIGRATIONS })
  const get = db.prepare<[string], Row>('SELECT * FROM accounts WHERE thread_id = ?')
  const children = db.prepare<[string], Row>('SELECT * FROM accounts WHERE parent_id = ? ORDER BY created_at, thread_id')
  const childIds = db.prepare<[string], { thread_id: string }>('SELECT thread_id FROM accounts WHERE parent_id = ?')
  const all = db.prepare<[], Row>('SELECT * FROM accounts')
  const inOrder = db.prepare<[], Row>('SELECT * FROM accounts ORDER BY rowid')
  const restoreRow = db.prepare<[Row]>(
    `INSERT INTO accounts (thread_id, parent_id, limit_spend, limit_tokens, own_spend, own_tokens, spent_spend, spent_tokens, released, created_at, updated_at)
     VALUES (@thread_id, @parent_id, @limit_spend, @limit_tokens, @own_spend, @own_tokens, @spent_spend, @spent_tokens, @released, @created_at, @updated_at)
     ON CONFLICT(thread_id) DO NOTHING`,
  )
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

  const toAccount = (row: Row): LedgerAccount => accountOf(row, reservedBy(row.thread_id, heldBelow.all(row.thread_id)))

  const mustGet = (threadId: string, role: string): Row => {
    const row = get.get(threadId)
    if (!row) throw accountNotFound(threadId, role)
    return row
  }

  const openRootTx = db.transaction((threadId: string, limit: BudgetAmounts, at: number): LedgerAccount => {
    const existing = get.get(threadId)
    if (existing) return toAccount(existing)
    insert.run({ threadId, parentId: null, spend: limit.spend, tokens: limit.tokens, at })
    return toAccount(get.get(threadId)!)
  })

  // The slot is counted and taken in the transaction that reserves the budget: BEGIN IMMEDIATE
  // serializes it with every other process's spawns under the same parent.
  const reserveTx = db.transaction((childId: string, parentId: string, request: BudgetAmounts, at: number, slot?: SpawnSlot): LedgerAccount => {
    const existing = get.get(childId)
    if (existing) return toAccount(existing)
    const parentRow = mustGet(parentId, 'parent')
    if (slot) assertSpawnSlot(parentId, childIds.all(parentId).map((r) => r.thread_id), slot)
    const parent = toAccount(parentRow)
    const granted = grantFrom(parent, request)
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
    const parent = row.parent_id ? toAccount(mustGet(row.parent_id, 'parent')) : null
    const next = raisedLimit(row, parent, limit)
    setLimit.run(next.spend, next.tokens, at, threadId)
    return toAccount(get.get(threadId)!)
  })

  const restoreTx = db.transaction((accounts: readonly Row[]): void => {
    for (const row of accounts) restoreRow.run(row)
  })

  const guard = sqliteGuard(store)

  return {
    openRoot: (threadId, limit, at) => guard(`open the account of ${threadId}`, () => openRootTx.immediate(threadId, limit, at)),
    reserve: (childId, parentId, request, at, slot) => guard(`reserve a budget for ${childId}`, () => reserveTx.immediate(childId, parentId, request, at, slot)),
    record: (threadId, delta, at) => guard(`record the usage of ${threadId}`, () => recordTx.immediate(threadId, delta, at)),
    release: (threadId, at) => guard(`release the budget of ${threadId}`, () => releaseTx.immediate(threadId, at)),
    raise: (threadId, limit, at) => guard(`raise the budget of ${threadId}`, () => raiseTx.immediate(threadId, limit, at)),
    get: (threadId) =>
      guard(`read the account of ${threadId}`, () => {
        const row = get.get(threadId)
        return row ? toAccount(row) : null
      }),
    children: (threadId) => guard(`list the children of ${threadId}`, () => children.all(threadId).map(toAccount)),
    check: () => guard('check balances', () => checkRows(all.all())),
    untouched: () => guard('list untouched accounts', () => untouched.all().map((r) => r.thread_id)),
    dropUnborn: (threadId) =>
      guard(`drop the account of ${threadId}, which was never spawned`, () => db.transaction(() => dropUnborn.run(threadId, threadId).changes > 0).immediate()),
    accounts: () => guard('read every account', () => inOrder.all().map(storedAccount)),
    restore: (accounts) => guard(`restore ${accounts.length} accounts`, () => restoreTx.immediate(accounts.map(accountRow))),
    close: () => db.close(),
  }
}
