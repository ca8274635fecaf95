/**
 * The registry backend on SQLite (better-sqlite3): the canonical status of every thread, one row
 * per thread. Side effects. Knows nothing about machines but the names of their suspend reasons.
 */
import Database from 'better-sqlite3'
import { SpindleError } from '../src/base/errors.js'
import { openSqliteFile, sqliteFailure } from './sqliteFile.js'
import { SqliteEventLog } from './sqliteEventLog.js'
import type { EventLog } from './eventLog.js'
import type { SuspendReason } from '../machines/threadContext.js'
import type { Cost, Durability, RecoveryCount, RegisterThread, Registry, ThreadRecord, ThreadStatus } from './types.js'

/**
 * Numbered schema migrations: `PRAGMA user_version` records how many have run, and opening a
 * database runs the rest in one transaction. Append only; never edit one that has shipped.
 */
export const MIGRATIONS: readonly string[] = [
  // 1. threads. parent_id has no foreign key on purpose: after damage a parent row may be missing,
  // and a child must still be registrable (and listable) without it.
  `CREATE TABLE threads (
     id TEXT PRIMARY KEY,
     directive_name TEXT NOT NULL,
     directive TEXT NOT NULL,
     parent_id TEXT NULL,
     previous_thread_id TEXT NULL,
     status TEXT NOT NULL CHECK (status IN ('created','running','suspended','completed','error','cancelled','continued')),
     nonce TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL,
     cost TEXT NULL,
     result TEXT NULL,
     error TEXT NULL
   );
   CREATE INDEX threads_status ON threads(status);
   CREATE INDEX threads_parent ON threads(parent_id);
   CREATE INDEX threads_previous ON threads(previous_thread_id);`,
  // 2. Crash-loop detection: how many consecutive recoveries found the thread at the same point of
  // its history, and that point (the seq of the last transcript entry that moved it on). Counted
  // here, not in the runtime's memory, because the process that would remember dies with the loop.
  `ALTER TABLE threads ADD COLUMN recoveries INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE threads ADD COLUMN recovery_seq INTEGER NULL;`,
  // 3. Fencing: the lease token (leases.db) of the last process to take each thread over. A process
  // stopped between its lease check and its write publishes with an older token, and is refused.
  // A narrow table of its own: a recovery claims ten thousand threads at once, and rewriting that
  // many wide thread rows cost three times as long. A thread may be claimed before its row exists.
  `CREATE TABLE lease_claims (thread_id TEXT PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID;`,
  // 4. Why a suspended thread waits, beside its status: a thread at a limit and one quarantined for
  // a crash loop are both 'suspended', and `spindle ls` / `rt.list()` must tell them apart without
  // reading every state.json. Rows written before it read as null until their next status change.
  `ALTER TABLE threads ADD COLUMN suspend_reason TEXT NULL
     CHECK (suspend_reason IN ('limit','error','context_length','budget','crash_loop'));`,
  // 5. Two more reasons: a thread at a tool call waiting for an approval, or for an answer. SQLite
  // cannot change a CHECK in place: the column is rebuilt, its values kept.
  `ALTER TABLE threads ADD COLUMN suspend_reason_5 TEXT NULL
     CHECK (suspend_reason_5 IN ('limit','error','context_length','budget','crash_loop','tool_approval','waiting'));
   UPDATE threads SET suspend_reason_5 = suspend_reason;
   ALTER TABLE threads DROP COLUMN suspend_reason;
   ALTER TABLE threads RENAME COLUMN suspend_reason_5 TO suspend_reason;`,
  // 6. The event log (rt.events): what happened to each thread, appended by whichever process made
  // the change, in the transaction of the row change it describes. AUTOINCREMENT so that an id is
  // never handed out twice, even after pruning: a reader's cursor is an id.
  `CREATE TABLE events (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     thread_id TEXT NOT NULL,
     type TEXT NOT NULL,
     at INTEGER NOT NULL,
     data TEXT NOT NULL
   );
   CREATE INDEX events_at ON events(at);`,
]

/** A `threads` row as SQLite returns it (JSON columns still text). */
interface Row {
  id: string
  directive_name: string
  directive: string
  parent_id: string | null
  previous_thread_id: string | null
  status: ThreadStatus
  suspend_reason: SuspendReason | null
  nonce: string
  created_at: number
  updated_at: number
  cost: string | null
  result: string | null
  error: string | null
}

interface InsertParams {
  id: string
  directiveName: string
  directive: string
  parentId: string | null
  previousThreadId: string | null
  nonce: string
  createdAt: number
}

/** Every statement the registry runs, prepared once per connection. */
function prepareStatements(db: Database.Database) {
  return {
    insert: db.prepare<InsertParams>(
      `INSERT INTO threads (id, directive_name, directive, parent_id, previous_thread_id, status, nonce, created_at, updated_at)
       VALUES (@id, @directiveName, @directive, @parentId, @previousThreadId, 'created', @nonce, @createdAt, @createdAt)`,
    ),
    updateStatus: db.prepare<[ThreadStatus, number, SuspendReason | null, string]>('UPDATE threads SET status = ?, updated_at = ?, suspend_reason = ? WHERE id = ?'),
    setResult: db.prepare<[string | null, string | null, string]>('UPDATE threads SET result = ?, error = ? WHERE id = ?'),
    setCost: db.prepare<[string, string]>('UPDATE threads SET cost = ? WHERE id = ?'),
    get: db.prepare<[string], Row>('SELECT * FROM threads WHERE id = ?'),
    active: db.prepare<[], Row>(`SELECT * FROM threads WHERE status IN ('created','running') ORDER BY created_at, id`),
    activeStatuses: db.prepare<[], { id: string; status: ThreadStatus; parentId: string | null }>(
      `SELECT id, status, parent_id AS parentId FROM threads WHERE status IN ('created','running') ORDER BY created_at, id`,
    ),
    statuses: db.prepare<[string], { id: string; status: ThreadStatus; parentId: string | null }>(
      `SELECT id, status, parent_id AS parentId FROM threads WHERE status IN (SELECT value FROM json_each(?)) ORDER BY created_at, id`,
    ),
    // LIMIT -1 means no limit in SQLite, so one statement serves both cases.
    all: db.prepare<[number], Row>('SELECT * FROM threads ORDER BY created_at, id LIMIT ?'),
    // The statuses arrive as one JSON array, so one prepared statement serves any number of them.
    byStatus: db.prepare<[string, number], Row>(
      'SELECT * FROM threads WHERE status IN (SELECT value FROM json_each(?)) ORDER BY created_at, id LIMIT ?',
    ),
    children: db.prepare<[string], Row>('SELECT * FROM threads WHERE parent_id = ? ORDER BY created_at, id'),
    // Only damage can fork a chain (two rows continuing the same thread); follow the oldest.
    next: db.prepare<[string], Row>('SELECT * FROM threads WHERE previous_thread_id = ? ORDER BY created_at, id LIMIT 1'),
    successor: db.prepare<[string], { id: string }>('SELECT id FROM threads WHERE previous_thread_id = ? ORDER BY created_at, id LIMIT 1'),
    recoveryCount: db.prepare<[string], { count: number; seq: number | null }>('SELECT recoveries AS count, recovery_seq AS seq FROM threads WHERE id = ?'),
    recoveryCounts: db.prepare<[], { id: string; count: number; seq: number | null }>(
      'SELECT id, recoveries AS count, recovery_seq AS seq FROM threads WHERE recoveries <> 0 OR recovery_seq IS NOT NULL',
    ),
    // One statement for a whole recovery's counts ([id, count, seq] triples as JSON): ten thousand
    // single-row UPDATEs cost 50 ms of calls from JavaScript before the first thread could run.
    setRecoveryCounts: db.prepare<[string]>(
      'UPDATE threads SET recoveries = c.value ->> 1, recovery_seq = c.value ->> 2 FROM json_each(?) AS c WHERE threads.id = c.value ->> 0',
    ),
    resetRecoveryCount: db.prepare<[string]>('UPDATE threads SET recoveries = 0 WHERE id = ? AND recoveries <> 0'),
    // [id, token] pairs as JSON: a recovery claims thousands of rows in one statement.
    claim: db.prepare<[string]>(
      `INSERT INTO lease_claims (thread_id, token) SELECT c.value ->> 0, c.value ->> 1 FROM json_each(?) AS c WHERE true
       ON CONFLICT(thread_id) DO UPDATE SET token = excluded.token WHERE excluded.token > lease_claims.token`,
    ),
    // Claims already at or above the token offered: none, unless leases.db handed out a token again
    // (it lost commits in a power loss: it is not fsynced; or it was deleted).
    claimedAhead: db.prepare<[string], { id: string; token: number }>(
      `SELECT l.thread_id AS id, l.token FROM json_each(?) AS c JOIN lease_claims AS l ON l.thread_id = c.value ->> 0 WHERE l.token >= c.value ->> 1`,
    ),
    leaseToken: db.prepare<[string], { token: number }>('SELECT token FROM lease_claims WHERE thread_id = ?'),
  }
}

/**
 * One JSON cell back to its value. A cell that does not parse (hand edit, disk damage) reads as
 * null instead of throwing: one damaged row must not hide every other thread from `list` or from
 * recovery, and the raw text stays in the file for inspection.
 */
function parseCell(text: string | null): unknown {
  if (text === null) return null
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

function toRecord(row: Row): ThreadRecord {
  return {
    id: row.id,
    directiveName: row.directive_name,
    directive: parseCell(row.directive),
    parentId: row.parent_id,
    previousThreadId: row.previous_thread_id,
    status: row.status,
    suspendReason: row.suspend_reason,
    nonce: row.nonce,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    cost: parseCell(row.cost) as Cost | null,
    result: parseCell(row.result),
    error: parseCell(row.error) as ThreadRecord['error'],
  }
}

function threadNotFound(id: string, file: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `Thread ${id} is not in the registry ${file}; check the id and the data directory.`, {
    details: { threadId: id, path: file },
  })
}

function registryFailed(file: string, action: string, error: unknown): unknown {
  return sqliteFailure({ code: 'REGISTRY_FAILED', what: 'the registry', file }, action, error)
}

class SqliteRegistry implements Registry {
  private readonly db: Database.Database
  private readonly statements: ReturnType<typeof prepareStatements>
  readonly events: EventLog

  constructor(
    private readonly file: string,
    durability: Durability,
  ) {
    // WAL + NORMAL survives a process crash but may lose the last commits on power loss; FULL survives both.
    const db = openSqliteFile(
      { code: 'REGISTRY_FAILED', what: 'the registry', file },
      { synchronous: durability === 'fsync' ? 'FULL' : 'NORMAL', migrations: MIGRATIONS },
    )
    try {
      db.pragma('foreign_keys = ON')
      this.statements = prepareStatements(db)
      this.events = new SqliteEventLog(db, (action, fn) => this.guard(action, fn))
    } catch (error) {
      db.close()
      throw registryFailed(file, 'prepare its statements', error)
    }
    this.db = db
  }

  register(thread: RegisterThread): void {
    const params: InsertParams = {
      id: thread.id,
      directiveName: thread.directiveName,
      directive: JSON.stringify(thread.directive),
      parentId: thread.parentId ?? null,
      previousThreadId: thread.previousThreadId ?? null,
      nonce: thread.nonce,
      createdAt: thread.createdAt,
    }
    try {
      this.statements.insert.run(params)
    } catch (error) {
      if (error instanceof Database.SqliteError && error.code === 'SQLITE_CONSTRAINT_PRIMARYKEY') {
        throw new SpindleError('REGISTRY_FAILED', `Thread ${thread.id} is already registered in ${this.file}; register each thread id once.`, {
          cause: error,
          details: { path: this.file, threadId: thread.id },
        })
      }
      throw registryFailed(this.file, `register thread ${thread.id}`, error)
    }
  }

  updateStatus(id: string, status: ThreadStatus, at: number, suspendReason: SuspendReason | null = null): void {
    const reason = status === 'suspended' ? suspendReason : null
    const { changes } = this.guard(`set the status of thread ${id}`, () => this.statements.updateStatus.run(status, at, reason, id))
    if (changes === 0) throw threadNotFound(id, this.file)
  }

  get(id: string): ThreadRecord | null {
    const row = this.guard(`read thread ${id}`, () => this.statements.get.get(id))
    return row ? toRecord(row) : null
  }

  setResult(id: string, outcome: { result?: unknown; error?: { code: string; message: string } | null }): void {
    const result = outcome.result === undefined ? null : JSON.stringify(outcome.result)
    const error = outcome.error ? JSON.stringify(outcome.error) : null
    const { changes } = this.guard(`store the result of thread ${id}`, () => this.statements.setResult.run(result, error, id))
    if (changes === 0) throw threadNotFound(id, this.file)
  }

  updateCostSnapshot(id: string, cost: Cost): void {
    const { changes } = this.guard(`store the cost of thread ${id}`, () => this.statements.setCost.run(JSON.stringify(cost), id))
    if (changes === 0) throw threadNotFound(id, this.file)
  }

  listActive(): ThreadRecord[] {
    return this.guard('list active threads', () => this.statements.active.all()).map(toRecord)
  }

  activeStatuses(): Array<{ id: string; status: ThreadStatus; parentId: string | null }> {
    return this.guard('list active threads', () => this.statements.activeStatuses.all())
  }

  statuses(statuses: readonly ThreadStatus[]): Array<{ id: string; status: ThreadStatus; parentId: string | null }> {
    return this.guard('list threads', () => this.statements.statuses.all(JSON.stringify(statuses)))
  }

  list(filter: { status?: ThreadStatus | ThreadStatus[]; limit?: number } = {}): ThreadRecord[] {
    const limit = filter.limit ?? -1
    const rows = this.guard('list threads', () => {
      if (filter.status === undefined) return this.statements.all.all(limit)
      const statuses = Array.isArray(filter.status) ? filter.status : [filter.status]
      return this.statements.byStatus.all(JSON.stringify(statuses), limit)
    })
    return rows.map(toRecord)
  }

  listChildren(id: string): ThreadRecord[] {
    return this.guard(`list the children of thread ${id}`, () => this.statements.children.all(id)).map(toRecord)
  }

  successorOf(id: string): string | null {
    return this.guard(`read the successor of thread ${id}`, () => this.statements.successor.get(id)?.id ?? null)
  }

  chain(id: string): ThreadRecord[] {
    return this.guard(`read the continuation chain of thread ${id}`, () => {
      const start = this.statements.get.get(id)
      if (!start) return []
      // Damage could make previous_thread_id loop; every row is visited at most once.
      const seen = new Set([start.id])
      const rows: Row[] = [start]
      for (let row = start; row.previous_thread_id !== null && !seen.has(row.previous_thread_id); ) {
        const previous = this.statements.get.get(row.previous_thread_id)
        if (!previous) break
        seen.add(previous.id)
        rows.unshift(previous)
        row = previous
      }
      for (let row = start; ; ) {
        const next = this.statements.next.get(row.id)
        if (!next || seen.has(next.id)) break
        seen.add(next.id)
        rows.push(next)
        row = next
      }
      return rows
    }).map(toRecord)
  }

  recoveryCount(id: string): RecoveryCount | null {
    return this.guard(`read the recovery count of thread ${id}`, () => this.statements.recoveryCount.get(id)) ?? null
  }

  recoveryCounts(): Map<string, RecoveryCount> {
    const counts = new Map<string, RecoveryCount>()
    this.guard('read the recovery counts', () => {
      for (const { id, count, seq } of this.statements.recoveryCounts.iterate()) counts.set(id, { count, seq })
    })
    return counts
  }

  setRecoveryCounts(counts: ReadonlyArray<{ id: string } & RecoveryCount>): void {
    if (counts.length === 0) return
    // One statement, so one transaction: recovery writes the counts of thousands of threads before any of them runs.
    this.guard('record recovery counts', () => this.statements.setRecoveryCounts.run(JSON.stringify(counts.map(({ id, count, seq }) => [id, count, seq]))))
  }

  resetRecoveryCounts(ids: readonly string[]): void {
    if (ids.length === 0) return
    this.guard('reset recovery counts', () =>
      this.db.transaction(() => {
        for (const id of ids) this.statements.resetRecoveryCount.run(id)
      })(),
    )
  }

  claim(tokens: ReadonlyArray<{ id: string; token: number }>): Array<{ id: string; token: number }> {
    if (tokens.length === 0) return []
    const pairs = JSON.stringify(tokens.map(({ id, token }) => [id, token]))
    // Token 1 is a thread's first lease: no holder before it can publish under a smaller one, so
    // its claim is not written (a spawn would otherwise commit, and fsync, the registry each time).
    if (tokens.every(({ token }) => token <= 1)) return this.guard('read lease tokens', () => this.statements.claimedAhead.all(pairs))
    return this.guard('record lease tokens', () =>
      this.db.transaction(() => {
        const ahead = this.statements.claimedAhead.all(pairs)
        this.statements.claim.run(pairs)
        return ahead
      }).immediate(),
    )
  }

  leaseToken(id: string): number | null {
    return this.guard(`read the lease token of thread ${id}`, () => this.statements.leaseToken.get(id)?.token ?? null)
  }

  transaction<T>(fn: () => T): T {
    // Immediate: a transaction that reads before it writes (a lease token, then the patch it
    // guards) must not see a row another process changes before the write.
    return this.guard('run a transaction', () => this.db.transaction(fn).immediate())
  }

  close(): void {
    if (this.db.open) this.db.close()
  }

  /** Runs `fn`, turning a SQLite failure into REGISTRY_FAILED that names the file. */
  private guard<T>(action: string, fn: () => T): T {
    try {
      return fn()
    } catch (error) {
      throw registryFailed(this.file, action, error)
    }
  }
}

/**
 * Opens the registry database at `path`, creating and migrating it as needed, and returns it as a
 * {@link Registry}. Every write is one synchronous SQLite transaction, committed when the call returns.
 *
 * @param options.path - The database file, or `':memory:'` for a registry that lives and dies with
 *   the process (tests, `store: 'memory'`).
 * @param options.durability - `'fsync'` sets `synchronous = FULL`: a returned write survives power
 *   loss. `'process'` sets `synchronous = NORMAL`: in WAL mode a returned write survives a process
 *   crash, but the last commits may be lost on power loss.
 * @throws SpindleError `REGISTRY_FAILED` (details.path) when the file cannot be opened, is not a
 *   SQLite database, or has a schema newer than this spindle; later SQLite failures throw the same code.
 *
 * Caveats: one writer per process: open one registry per file and share it (better-sqlite3 is
 * synchronous, so calls in one process never interleave). Another process's connection may hold
 * the write lock; a statement then waits up to busy_timeout (5 s) and fails with REGISTRY_FAILED
 * (SQLITE_BUSY). Durability is as chosen above; WAL keeps readers (the CLI) from blocking the writer.
 *
 * @example
 * const registry = openSqliteRegistry({ path: ':memory:', durability: 'process' })
 * registry.register({ id: 't-1', directiveName: 'hello', directive: {}, nonce: 'n', createdAt: Date.now() })
 * registry.get('t-1')?.status // 'created'
 * registry.close()
 */
export function openSqliteRegistry(options: { path: string | ':memory:'; durability: Durability }): Registry {
  return new SqliteRegistry(options.path, options.durability)
}
