/**
 * The budget ledger on PostgreSQL: hierarchical spend and token budgets over thread trees, shared
 * by runtime processes on any number of hosts. The arithmetic is the SQLite ledger's own
 * (ledgerBalance.ts); the table is `ledger_accounts` (leaseTables.ts). Side effects.
 *
 * What reads a balance and then grants from it (reserve, raise) runs behind the ledger's advisory
 * transaction lock, as SQLite's BEGIN IMMEDIATE ran it: reservations from every process take turns,
 * so two of them can never both be granted the last of a parent's budget. So does dropUnborn, which
 * must not delete an account a reservation is opening a child under. record and release are one
 * statement each and take no turn: they never refuse, so whichever way one falls around a
 * reservation the outcome is one the reservations taking turns could have had (the reservation
 * first, then the usage or the release).
 */
import { SpindleError } from '../../src/base/errors.js'
import { accountNotFound, assertSpawnSlot, checkRows, grantFrom, raisedLimit, reservedBy, storedAccount, toAccount } from '../ledgerBalance.js'
import type { AccountRow } from '../ledgerBalance.js'
import type { BudgetAmounts, Ledger, LedgerAccount } from '../types.js'
import type { PgBridge, Row } from './bridge.js'
import { pgGuard } from './pgStoreGuard.js'

/** Held to the commit; one per schema. */
const LOCK = `SELECT pg_advisory_xact_lock(hashtext('spindle.ledger:' || current_schema()))`
/** A row as ledgerBalance.ts reads it (released as 1 or 0, as SQLite keeps it). */
const COLUMNS = 'thread_id, parent_id, limit_spend, limit_tokens, own_spend, own_tokens, spent_spend, spent_tokens, released::int AS released, created_at, updated_at'

/**
 * The accounts matching `where` (over `a`, in `order`), and below every id `anchor` names the
 * accounts whose reservations still count against it: its children, and below each released one
 * its children, and so on. One statement, so one snapshot: the balance is never read half before
 * and half after another process's change. UNION (not UNION ALL) ends on a cycle in damaged data.
 * Rows come as `root` null for the accounts, else the id they are below, in opening order (`seq`:
 * the order the sums of every backend follow).
 */
function accountsQuery(where: string, order: string, anchor = 'c.parent_id IN (SELECT thread_id FROM target)'): string {
  return `WITH RECURSIVE target AS (SELECT a.*, row_number() OVER (ORDER BY ${order}) AS rank FROM ledger_accounts AS a WHERE ${where}),
    below AS (
      SELECT c.parent_id AS root, c.* FROM ledger_accounts AS c WHERE ${anchor}
      UNION
      SELECT b.root, c.* FROM below AS b JOIN ledger_accounts AS c ON c.parent_id = b.thread_id WHERE b.released
    )
    SELECT NULL AS root, rank AS ord, ${COLUMNS} FROM target
    UNION ALL
    SELECT root, seq AS ord, ${COLUMNS} FROM below
    ORDER BY root NULLS FIRST, ord`
}

const GET = accountsQuery('a.thread_id = $1', 'a.seq')
const CHILDREN = accountsQuery('a.parent_id = $1', 'a.created_at, a.thread_id')
/** The child and its parent, and what is held below each (the child may exist or not). */
const CHILD_AND_PARENT = accountsQuery('a.thread_id = ANY($1)', 'a.seq', 'c.parent_id = ANY($1)')
/** An account and its parent. */
const SELF_AND_PARENT = accountsQuery('a.thread_id = $1 OR a.thread_id = (SELECT parent_id FROM ledger_accounts WHERE thread_id = $1)', 'a.seq')

/** What `accountsQuery` returned: the accounts, and the rows below each id. */
function balances(rows: Row[]): { accounts: Map<string, AccountRow>; below: (threadId: string) => AccountRow[] } {
  const accounts = new Map<string, AccountRow>()
  const below = new Map<string, AccountRow[]>()
  for (const row of rows as unknown as Array<AccountRow & { root: string | null }>) {
    if (row.root === null) accounts.set(row.thread_id, row)
    else (below.get(row.root) ?? below.set(row.root, []).get(row.root)!).push(row)
  }
  return { accounts, below: (threadId) => below.get(threadId) ?? [] }
}

function accountsOf(rows: Row[]): LedgerAccount[] {
  const { accounts, below } = balances(rows)
  return [...accounts.values()].map((row) => toAccount(row, reservedBy(row.thread_id, below(row.thread_id))))
}

/**
 * A limit as SQLite stores it: NaN (and undefined) become NULL, which the ledger reads as
 * unlimited, so every backend answers alike. (PostgreSQL would keep a NaN.)
 */
function storedLimit(value: number | null | undefined): number | null {
  return value === undefined || value === null || Number.isNaN(value) ? null : value
}

/** Refuses an amount or time SQLite would refuse in its NOT NULL columns (PostgreSQL keeps a NaN): nothing is written. */
function assertStorable(action: string, threadId: string, values: Record<string, number>): void {
  for (const [name, value] of Object.entries(values)) {
    if (typeof value === 'number' && !Number.isNaN(value)) continue
    throw new SpindleError('LEDGER_FAILED', `Could not ${action} in the budget ledger: ${name} is ${String(value)}; pass finite amounts and times.`, {
      details: { threadId, column: name },
    })
  }
}

/**
 * A {@link Ledger} on PostgreSQL, for runtime processes on many hosts sharing one database: the
 * same balances as the SQLite and memory ledgers, and concurrent reservations from any number of
 * processes never oversubscribe a parent nor take more spawn slots than its limit. An operation
 * that throws (BUDGET_EXCEEDED, SPAWN_REFUSED, THREAD_NOT_FOUND, LEDGER_FAILED) writes nothing.
 *
 * `db` stays the caller's: `close()` only makes this ledger refuse further calls.
 *
 * @example
 * const ledger = openPgLedger({ db: new PgBridge({ url: 'postgres://…', schema: 'spindle' }) })
 * ledger.openRoot('lead', { spend: 1, tokens: null }, Date.now())
 * ledger.reserve('helper', 'lead', { spend: 0.25, tokens: null }, Date.now())
 * ledger.get('lead')?.available.spend // 0.75
 * @see createMemoryLedger for the reference semantics.
 */
export function openPgLedger(options: { db: PgBridge }): Ledger {
  const { db } = options
  const guard = pgGuard({ code: 'LEDGER_FAILED', what: 'the budget ledger', db })

  const insert = (threadId: string, parentId: string | null, limit: BudgetAmounts, at: number, conflict: string) => ({
    sql: `INSERT INTO ledger_accounts (thread_id, parent_id, limit_spend, limit_tokens, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5) ${conflict}`,
    params: [threadId, parentId, storedLimit(limit.spend), storedLimit(limit.tokens), at],
  })

  return {
    openRoot: (threadId, limit, at) =>
      guard(`open the account of ${threadId}`, () => {
        // An account that exists (a root, or a child of the same id) is returned as it is.
        const [, rows] = db.batchSync([insert(threadId, null, limit, at, 'ON CONFLICT (thread_id) DO NOTHING'), { sql: GET, params: [threadId] }])
        return accountsOf(rows!)[0]!
      }),

    reserve: (childId, parentId, request, at, slot) =>
      guard(`reserve a budget for ${childId}`, () =>
        db.transactionSync(() => {
          // The slot is counted and taken in the transaction that reserves the budget, behind the
          // lock: every process's spawns under the same parent take turns.
          const [, rows, siblings] = db.batchSync([
            { sql: LOCK },
            { sql: CHILD_AND_PARENT, params: [[childId, parentId]] },
            { sql: 'SELECT thread_id FROM ledger_accounts WHERE parent_id = $1', params: [parentId] },
          ])
          const { accounts, below } = balances(rows!)
          const existing = accounts.get(childId)
          if (existing) return toAccount(existing, reservedBy(childId, below(childId)))
          const parentRow = accounts.get(parentId)
          if (!parentRow) throw accountNotFound(parentId, 'parent')
          if (slot) assertSpawnSlot(parentId, siblings!.map((row) => row.thread_id as string), slot)
          const granted = grantFrom(toAccount(parentRow, reservedBy(parentId, below(parentId))), request)
          const opened = insert(childId, parentId, granted, at, '')
          db.execSync(opened.sql, opened.params)
          const row: AccountRow = {
            thread_id: childId,
            parent_id: parentId,
            limit_spend: storedLimit(granted.spend),
            limit_tokens: storedLimit(granted.tokens),
            own_spend: 0,
            own_tokens: 0,
            spent_spend: 0,
            spent_tokens: 0,
            released: 0,
            created_at: at,
            updated_at: at,
          }
          return toAccount(row, reservedBy(childId, below(childId)))
        }),
      ),

    record: (threadId, delta, at) =>
      guard(`record the usage of ${threadId}`, () => {
        assertStorable(`record the usage of ${threadId}`, threadId, { spend: delta.spend, tokens: delta.tokens, at })
        // The thread and every ancestor, locked in thread id order before they change, so two
        // records in one tree never wait on each other in a circle. UNION ends on a cycle in damaged data.
        const changed = db.querySync(
          `WITH RECURSIVE up AS (
             SELECT thread_id, parent_id FROM ledger_accounts WHERE thread_id = $1
             UNION
             SELECT a.thread_id, a.parent_id FROM ledger_accounts AS a JOIN up ON a.thread_id = up.parent_id
           ),
           locked AS MATERIALIZED (SELECT thread_id FROM ledger_accounts WHERE thread_id IN (SELECT thread_id FROM up) ORDER BY thread_id FOR UPDATE)
           UPDATE ledger_accounts AS a SET
             own_spend = CASE WHEN a.thread_id = $1 THEN a.own_spend + $2::float8 ELSE a.own_spend END,
             own_tokens = CASE WHEN a.thread_id = $1 THEN a.own_tokens + $3::float8 ELSE a.own_tokens END,
             spent_spend = a.spent_spend + $2::float8, spent_tokens = a.spent_tokens + $3::float8, updated_at = $4
           FROM locked WHERE a.thread_id = locked.thread_id
           RETURNING a.thread_id`,
          [threadId, delta.spend, delta.tokens, at],
        )
        if (!changed.some((row) => row.thread_id === threadId)) throw accountNotFound(threadId, 'thread')
      }),

    release: (threadId, at) => {
      guard(`release the budget of ${threadId}`, () =>
        db.changeSync('UPDATE ledger_accounts SET released = true, updated_at = $2 WHERE thread_id = $1 AND NOT released', [threadId, at]),
      )
    },

    raise: (threadId, limit, at) =>
      guard(`raise the budget of ${threadId}`, () =>
        db.transactionSync(() => {
          const [, rows] = db.batchSync([{ sql: LOCK }, { sql: SELF_AND_PARENT, params: [threadId] }])
          const { accounts, below } = balances(rows!)
          const row = accounts.get(threadId)
          if (!row) throw accountNotFound(threadId, 'thread')
          let parent: LedgerAccount | null = null
          if (row.parent_id !== null) {
            const parentRow = accounts.get(row.parent_id)
            if (!parentRow) throw accountNotFound(row.parent_id, 'parent')
            parent = toAccount(parentRow, reservedBy(row.parent_id, below(row.parent_id)))
          }
          const next = raisedLimit(row, parent, limit)
          const raised = { ...row, limit_spend: storedLimit(next.spend), limit_tokens: storedLimit(next.tokens), updated_at: at }
          db.execSync('UPDATE ledger_accounts SET limit_spend = $1, limit_tokens = $2, updated_at = $3 WHERE thread_id = $4', [
            raised.limit_spend,
            raised.limit_tokens,
            at,
            threadId,
          ])
          return toAccount(raised, reservedBy(threadId, below(threadId)))
        }),
      ),

    get: (threadId) => guard(`read the account of ${threadId}`, () => accountsOf(db.querySync(GET, [threadId]))[0] ?? null),

    children: (threadId) => guard(`list the children of ${threadId}`, () => accountsOf(db.querySync(CHILDREN, [threadId]))),

    check: () => guard('check balances', () => checkRows(db.querySync(`SELECT ${COLUMNS} FROM ledger_accounts ORDER BY seq`) as unknown as AccountRow[])),

    untouched: () =>
      guard('list untouched accounts', () =>
        db
          .querySync(
            `SELECT thread_id FROM ledger_accounts AS a WHERE NOT released AND spent_spend = 0 AND spent_tokens = 0
               AND NOT EXISTS (SELECT 1 FROM ledger_accounts AS c WHERE c.parent_id = a.thread_id) ORDER BY seq`,
          )
          .map((row) => row.thread_id as string),
      ),

    dropUnborn: (threadId) =>
      guard(`drop the account of ${threadId}, which was never spawned`, () =>
        db.transactionSync(() => {
          const [, dropped] = db.batchSync([
            { sql: LOCK },
            {
              sql: `DELETE FROM ledger_accounts WHERE thread_id = $1 AND NOT released AND own_spend = 0 AND own_tokens = 0
                      AND spent_spend = 0 AND spent_tokens = 0 AND NOT EXISTS (SELECT 1 FROM ledger_accounts AS c WHERE c.parent_id = $1)
                    RETURNING thread_id`,
              params: [threadId],
            },
          ])
          return dropped!.length > 0
        }),
      ),

    accounts: () => guard('read every account', () => (db.querySync(`SELECT ${COLUMNS} FROM ledger_accounts ORDER BY seq`) as unknown as AccountRow[]).map(storedAccount)),

    restore: (accounts) =>
      guard(`restore ${accounts.length} accounts`, () => {
        if (accounts.length === 0) return
        for (const a of accounts) {
          assertStorable(`restore the account of ${a.threadId}`, a.threadId, { ownSpend: a.ownSpent.spend, ownTokens: a.ownSpent.tokens, spentSpend: a.spent.spend, spentTokens: a.spent.tokens, createdAt: a.createdAt, updatedAt: a.updatedAt })
        }
        // One statement: WITH ORDINALITY keeps the given order, so `seq` (the order sums follow) is the source's.
        db.changeSync(
          `INSERT INTO ledger_accounts (thread_id, parent_id, limit_spend, limit_tokens, own_spend, own_tokens, spent_spend, spent_tokens, released, created_at, updated_at)
           SELECT r.thread_id, r.parent_id, r.limit_spend, r.limit_tokens, r.own_spend, r.own_tokens, r.spent_spend, r.spent_tokens, r.released, r.created_at, r.updated_at
           FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::float8[], $6::float8[], $7::float8[], $8::float8[], $9::boolean[], $10::bigint[], $11::bigint[])
             WITH ORDINALITY AS r(thread_id, parent_id, limit_spend, limit_tokens, own_spend, own_tokens, spent_spend, spent_tokens, released, created_at, updated_at, n)
           ORDER BY r.n
           ON CONFLICT (thread_id) DO NOTHING`,
          [
            accounts.map((a) => a.threadId),
            accounts.map((a) => a.parentId),
            accounts.map((a) => storedLimit(a.limit.spend)),
            accounts.map((a) => storedLimit(a.limit.tokens)),
            accounts.map((a) => a.ownSpent.spend),
            accounts.map((a) => a.ownSpent.tokens),
            accounts.map((a) => a.spent.spend),
            accounts.map((a) => a.spent.tokens),
            accounts.map((a) => a.released),
            accounts.map((a) => a.createdAt),
            accounts.map((a) => a.updatedAt),
          ],
        )
      }),

    close: () => guard.close(),
  }
}
