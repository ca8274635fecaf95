/**
 * The registry on PostgreSQL: the canonical status of every thread, one row per thread, shared by
 * the runtime processes of every host that opens the schema. Side effects. The port of
 * sqliteRegistry.ts; what differs is how it stays right with many writers at once.
 *
 * Fencing (`claim` / `leaseToken`): a thread's claimed token only grows, and a publishing
 * transaction that read the token must not interleave with a claim (a stalled process that read
 * its own token, then a successor's claim, then the stalled write: the write would land after the
 * takeover). SQLite got both from BEGIN IMMEDIATE; here rows are locked. `leaseToken` inside a
 * registry transaction reads the claim row FOR SHARE, and `claim` locks the rows it changes FOR
 * UPDATE, so a claim waits for a publishing transaction that read the token to commit (the write
 * lands before the takeover), or the publisher waits for the claim and reads the new token (and is
 * refused). Every registered thread has a claim row from its registration on (token 0: never
 * claimed), so there is always a row to lock. `claim` locks in id order, so two claimers never
 * deadlock; a claim and a publisher that reads several tokens still may, rarely: PostgreSQL ends
 * one of them (REGISTRY_FAILED, 40P01) and the caller's next round makes it again.
 *
 * No statement is allowed to fail inside a transaction: the bridge gives a transaction up at its
 * first failed statement, where SQLite carries on after it and the runtime relies on that (a round
 * reports one thread's failed write and commits the others). So values the schema would refuse are
 * refused here first, duplicates are found with ON CONFLICT DO NOTHING, and missing rows by the
 * count of rows changed.
 */
import { SpindleError } from '../../src/base/errors.js'
import type { SuspendReason } from '../../machines/threadContext.js'
import type { EventLog, NewEvent } from '../eventLog.js'
import type { Cost, RecoveryCount, RegisterThread, Registry, ThreadRecord, ThreadStatus } from '../types.js'
import type { PgBridge, Row } from './bridge.js'
import { PgEventLog } from './pgEventLog.js'
import { notAnInteger, notText, pgGuard, refused, type PgStore } from './pgStoreGuard.js'

const STATUSES: ReadonlySet<string> = new Set<ThreadStatus>(['created', 'running', 'suspended', 'completed', 'error', 'cancelled', 'continued'])
const SUSPEND_REASONS: ReadonlySet<string> = new Set<SuspendReason>(['limit', 'error', 'context_length', 'budget', 'crash_loop', 'tool_approval', 'waiting'])

const COLUMNS = 'id, directive_name, directive, parent_id, previous_thread_id, status, suspend_reason, nonce, created_at, updated_at, cost, result, error'
const ORDER = 'ORDER BY created_at, id'

/**
 * The continuation chain in one statement: back along previous_thread_id, then forward along the
 * oldest successor, each row visited once (damage could make the links loop), oldest first.
 */
const CHAIN = `WITH RECURSIVE
  back(id, prev, path, depth) AS (
    SELECT id, previous_thread_id, ARRAY[id], 0 FROM threads WHERE id = $1
    UNION ALL
    SELECT t.id, t.previous_thread_id, b.path || t.id, b.depth - 1
    FROM back AS b JOIN threads AS t ON t.id = b.prev
    WHERE t.id <> ALL (b.path)
  ),
  fwd(id, path, depth) AS (
    SELECT id, ARRAY[id], 0 FROM threads WHERE id = $1
    UNION ALL
    SELECT n.id, f.path || n.id, f.depth + 1
    FROM fwd AS f CROSS JOIN LATERAL (SELECT id FROM threads WHERE previous_thread_id = f.id ${ORDER} LIMIT 1) AS n
    WHERE n.id <> ALL (f.path) AND n.id NOT IN (SELECT id FROM back)
  ),
  links AS (SELECT id, depth FROM back UNION ALL SELECT id, depth FROM fwd WHERE depth > 0)
SELECT ${COLUMNS.split(', ').map((c) => `t.${c}`).join(', ')} FROM links JOIN threads AS t USING (id) ORDER BY links.depth`

function toRecord(row: Row): ThreadRecord {
  return {
    id: row.id as string,
    directiveName: row.directive_name as string,
    directive: row.directive,
    parentId: row.parent_id as string | null,
    previousThreadId: row.previous_thread_id as string | null,
    status: row.status as ThreadStatus,
    suspendReason: row.suspend_reason as SuspendReason | null,
    nonce: row.nonce as string,
    createdAt: row.created_at as number,
    updatedAt: row.updated_at as number,
    cost: (row.cost ?? null) as Cost | null,
    result: row.result ?? null,
    error: (row.error ?? null) as ThreadRecord['error'],
  }
}

/** The offers a claim is at or behind, each with the token claimed already (token 0 is no claim). */
function claimsAhead(offers: ReadonlyArray<{ id: string; token: number }>, rows: Row[]): Array<{ id: string; token: number }> {
  const claimed = new Map(rows.map((row) => [row.id as string, row.token as number]))
  const ahead: Array<{ id: string; token: number }> = []
  for (const { id, token } of offers) {
    const current = claimed.get(id)
    if (current !== undefined && current > 0 && current >= token) ahead.push({ id, token: current })
  }
  return ahead
}

class PgRegistry implements Registry {
  private readonly store: PgStore
  private readonly guard: <T>(action: string, fn: () => T) => T
  private readonly log: PgEventLog
  private open = true
  /** Registry transactions under way (nested ones are savepoints). */
  private depth = 0

  constructor(private readonly db: PgBridge) {
    this.store = { code: 'REGISTRY_FAILED', what: 'the registry', db }
    this.guard = pgGuard(this.store)
    this.log = new PgEventLog(db, {
      inTransaction: () => this.depth > 0,
      assertOpen: () => this.assertOpen(),
      guard: this.guard,
      check: (event) => this.checkEvent(event),
    })
  }

  get events(): EventLog {
    return this.log
  }

  register(thread: RegisterThread): void {
    this.assertOpen()
    const directive = JSON.stringify(thread.directive) as string | undefined
    if (directive === undefined) throw this.refuse(`Thread ${thread.id} has no directive to register; pass the directive it runs.`, thread.id)
    for (const [field, value] of [['id', thread.id], ['directiveName', thread.directiveName], ['nonce', thread.nonce], ['parentId', thread.parentId ?? ''], ['previousThreadId', thread.previousThreadId ?? '']] as const) {
      const problem = notText(value)
      if (problem) throw this.refuse(`Cannot register thread ${JSON.stringify(thread.id)}: its ${field} ${problem}.`, thread.id)
    }
    this.checkTime(thread.createdAt, `register thread ${thread.id}`, thread.id)
    const rows = this.guard(`register thread ${thread.id}`, () =>
      this.db.querySync(
        `WITH thread AS (
           INSERT INTO threads (id, directive_name, directive, parent_id, previous_thread_id, status, nonce, created_at, updated_at)
           VALUES ($1, $2, $3::json, $4, $5, 'created', $6, $7, $7)
           ON CONFLICT (id) DO NOTHING RETURNING id
         ), claim AS (
           INSERT INTO lease_claims (thread_id, token) SELECT id, 0 FROM thread ON CONFLICT (thread_id) DO NOTHING
         )
         SELECT id FROM thread`,
        [thread.id, thread.directiveName, directive, thread.parentId ?? null, thread.previousThreadId ?? null, thread.nonce, thread.createdAt],
      ),
    )
    if (rows.length === 0) throw this.refuse(`Thread ${thread.id} is already registered in ${this.where()}; register each thread id once.`, thread.id)
    this.known.add(thread.id)
  }

  updateStatus(id: string, status: ThreadStatus, at: number, suspendReason: SuspendReason | null = null): void {
    this.assertOpen()
    const reason = status === 'suspended' ? suspendReason : null
    if (!STATUSES.has(status)) throw this.refuse(`Cannot set the status of thread ${id} to ${JSON.stringify(status)}: not a thread status (${[...STATUSES].join(', ')}).`, id)
    if (reason !== null && !SUSPEND_REASONS.has(reason)) throw this.refuse(`Cannot suspend thread ${id} for ${JSON.stringify(reason)}: not a suspend reason (${[...SUSPEND_REASONS].join(', ')}).`, id)
    this.checkTime(at, `set the status of thread ${id}`, id)
    this.change(`set the status of thread ${id}`, id, 'UPDATE threads SET status = $1, updated_at = $2, suspend_reason = $3 WHERE id = $4', [status, at, reason, id])
  }

  get(id: string): ThreadRecord | null {
    const row = this.read(`read thread ${id}`, `SELECT ${COLUMNS} FROM threads WHERE id = $1`, [id])[0]
    return row ? toRecord(row) : null
  }

  setResult(id: string, outcome: { result?: unknown; error?: { code: string; message: string } | null }): void {
    this.assertOpen()
    const result = outcome.result === undefined ? null : (JSON.stringify(outcome.result) ?? null)
    const error = outcome.error ? JSON.stringify(outcome.error) : null
    this.change(`store the result of thread ${id}`, id, 'UPDATE threads SET result = $1::json, error = $2::json WHERE id = $3', [result, error, id])
  }

  updateCostSnapshot(id: string, cost: Cost): void {
    this.assertOpen()
    this.change(`store the cost of thread ${id}`, id, 'UPDATE threads SET cost = $1::json WHERE id = $2', [JSON.stringify(cost), id])
  }

  listActive(): ThreadRecord[] {
    return this.read('list active threads', `SELECT ${COLUMNS} FROM threads WHERE status IN ('created', 'running') ${ORDER}`).map(toRecord)
  }

  activeStatuses(): Array<{ id: string; status: ThreadStatus; parentId: string | null }> {
    return this.statuses(['created', 'running'])
  }

  statuses(statuses: readonly ThreadStatus[]): Array<{ id: string; status: ThreadStatus; parentId: string | null }> {
    this.assertOpen()
    if (statuses.length === 0) return []
    const rows = this.read('list threads', `SELECT id, status, parent_id AS "parentId" FROM threads WHERE status = ANY($1::text[]) ${ORDER}`, [statuses])
    return rows as Array<{ id: string; status: ThreadStatus; parentId: string | null }>
  }

  list(filter: { status?: ThreadStatus | ThreadStatus[]; limit?: number } = {}): ThreadRecord[] {
    this.assertOpen()
    const limit = filter.limit ?? null
    if (limit !== null && !Number.isInteger(limit)) throw this.refuse(`Cannot list threads: the limit ${limit} is not an integer.`)
    // LIMIT NULL is no limit: a negative limit means none, as in SQLite.
    const bound = limit === null || limit < 0 ? null : limit
    if (filter.status === undefined) return this.read('list threads', `SELECT ${COLUMNS} FROM threads ${ORDER} LIMIT $1`, [bound]).map(toRecord)
    const statuses = Array.isArray(filter.status) ? filter.status : [filter.status]
    if (statuses.length === 0) return []
    return this.read('list threads', `SELECT ${COLUMNS} FROM threads WHERE status = ANY($1::text[]) ${ORDER} LIMIT $2`, [statuses, bound]).map(toRecord)
  }

  listChildren(id: string): ThreadRecord[] {
    return this.read(`list the children of thread ${id}`, `SELECT ${COLUMNS} FROM threads WHERE parent_id = $1 ${ORDER}`, [id]).map(toRecord)
  }

  successorOf(id: string): string | null {
    const row = this.read(`read the successor of thread ${id}`, `SELECT id FROM threads WHERE previous_thread_id = $1 ${ORDER} LIMIT 1`, [id])[0]
    return row ? (row.id as string) : null
  }

  chain(id: string): ThreadRecord[] {
    return this.read(`read the continuation chain of thread ${id}`, CHAIN, [id]).map(toRecord)
  }

  recoveryCount(id: string): RecoveryCount | null {
    const row = this.read(`read the recovery count of thread ${id}`, 'SELECT recoveries AS count, recovery_seq AS seq FROM threads WHERE id = $1', [id])[0]
    return row ? { count: row.count as number, seq: row.seq as number | null } : null
  }

  recoveryCounts(): Map<string, RecoveryCount> {
    const rows = this.read('read the recovery counts', 'SELECT id, recoveries AS count, recovery_seq AS seq FROM threads WHERE recoveries <> 0 OR recovery_seq IS NOT NULL')
    return new Map(rows.map((row) => [row.id as string, { count: row.count as number, seq: row.seq as number | null }]))
  }

  setRecoveryCounts(counts: ReadonlyArray<{ id: string } & RecoveryCount>): void {
    this.assertOpen()
    if (counts.length === 0) return
    // The last count given for a thread wins; an UPDATE … FROM would take any one of them.
    const last = new Map(counts.map(({ id, count, seq }) => [id, { count, seq }]))
    for (const [id, { count, seq }] of last) {
      if (notAnInteger(count) || (seq !== null && notAnInteger(seq))) throw this.refuse(`Cannot record the recovery count of thread ${id}: ${count} / ${seq} are not integers.`, id)
    }
    const ids = [...last.keys()].sort()
    this.guard('record recovery counts', () =>
      this.db.changeSync(
        `UPDATE threads SET recoveries = c.count, recovery_seq = c.seq
         FROM unnest($1::text[], $2::integer[], $3::bigint[]) AS c(id, count, seq) WHERE threads.id = c.id`,
        [ids, ids.map((id) => last.get(id)!.count), ids.map((id) => last.get(id)!.seq)],
      ),
    )
  }

  resetRecoveryCounts(ids: readonly string[]): void {
    this.assertOpen()
    if (ids.length === 0) return
    this.guard('reset recovery counts', () => this.db.changeSync('UPDATE threads SET recoveries = 0 WHERE id = ANY($1::text[]) AND recoveries <> 0', [[...ids].sort()]))
  }

  claim(tokens: ReadonlyArray<{ id: string; token: number }>): Array<{ id: string; token: number }> {
    this.assertOpen()
    if (tokens.length === 0) return []
    for (const { id, token } of tokens) if (notAnInteger(token)) throw this.refuse(`Cannot claim thread ${id} with lease token ${token}: not an integer.`, id)
    // The largest token offered for each thread, in id order: every claimer locks rows in that order.
    const best = new Map<string, number>()
    for (const { id, token } of tokens) best.set(id, Math.max(token, best.get(id) ?? -Infinity))
    const ids = [...best.keys()].sort()
    // Token 1 is a thread's first lease: no holder before it can publish under a smaller one, so
    // its claim is not written (a spawn would otherwise pay a transaction each time).
    if (tokens.every(({ token }) => token <= 1)) {
      return claimsAhead(tokens, this.read('read lease tokens', 'SELECT thread_id AS id, token FROM lease_claims WHERE thread_id = ANY($1::text[])', [ids]))
    }
    return this.guard('record lease tokens', () =>
      this.db.transactionSync(() => {
        const [, claimed] = this.db.batchSync([
          // Rows for threads not registered yet, so that the next statement can lock every one.
          { sql: 'INSERT INTO lease_claims (thread_id, token) SELECT unnest($1::text[]), 0 ON CONFLICT (thread_id) DO NOTHING', params: [ids] },
          { sql: 'SELECT thread_id AS id, token FROM lease_claims WHERE thread_id = ANY($1::text[]) ORDER BY thread_id FOR UPDATE', params: [ids] },
          {
            sql: `UPDATE lease_claims SET token = c.token FROM unnest($1::text[], $2::bigint[]) AS c(id, token)
                  WHERE lease_claims.thread_id = c.id AND c.token > lease_claims.token`,
            params: [ids, ids.map((id) => best.get(id)!)],
          },
        ])
        return claimsAhead(tokens, claimed!)
      }),
    )
  }

  /**
   * Threads this registry has seen a row of (registered or updated here): rows are never deleted,
   * so an update of one inside a transaction is deferred without asking first whether it exists.
   */
  private readonly known = new Set<string>()

  leaseTokens(ids: readonly string[]): Map<string, number | null> {
    const lock = this.depth > 0 ? ' FOR SHARE' : ''
    const rows = this.read(`read the lease tokens of ${ids.length} threads`, `SELECT thread_id, token FROM lease_claims WHERE thread_id = ANY($1) ORDER BY thread_id${lock}`, [ids])
    const tokens = new Map<string, number | null>(ids.map((id) => [id, null]))
    for (const row of rows) tokens.set(row.thread_id as string, row.token === 0 ? null : (row.token as number))
    return tokens
  }

  leaseToken(id: string): number | null {
    // Inside a transaction the row stays locked to its end: no claim can land between this read and the writes it guards.
    const lock = this.depth > 0 ? ' FOR SHARE' : ''
    const token = this.read(`read the lease token of thread ${id}`, `SELECT token FROM lease_claims WHERE thread_id = $1${lock}`, [id])[0]?.token as number | undefined
    return token === undefined || token === 0 ? null : token
  }

  transaction<T>(fn: () => T): T {
    this.assertOpen()
    return this.guard('run a transaction', () =>
      this.db.transactionSync(() => {
        const mark = this.log.mark(this.depth === 0)
        this.depth++
        try {
          const value = fn()
          if (value !== null && typeof (value as { then?: unknown } | undefined)?.then === 'function') {
            throw new TypeError('A registry transaction function cannot return a promise: it runs synchronously, and its writes are committed when it returns.')
          }
          // Last, so the event counter's lock is held for the commit only (see pgEventLog.ts).
          if (this.depth === 1) this.log.flush()
          return value
        } catch (error) {
          this.log.rollbackTo(mark)
          throw error
        } finally {
          this.depth--
        }
      }),
    )
  }

  /** Stops answering; the connection is the caller's, and stays open. */
  close(): void {
    this.open = false
  }

  private assertOpen(): void {
    if (!this.open) throw new SpindleError('REGISTRY_FAILED', `The registry on ${this.where()} is closed: open a new one.`, { details: { schema: this.db.schema ?? 'public' } })
  }

  private read(action: string, sql: string, params?: readonly unknown[]): Row[] {
    this.assertOpen()
    return this.guard(action, () => this.db.querySync(sql, params))
  }

  /**
   * An UPDATE of one thread's row: THREAD_NOT_FOUND when there is none. Inside a transaction, one
   * of a thread whose row this registry has seen is sent with the next read or the commit (a
   * group-commit round updates hundreds of rows: one round trip each would hold the event loop);
   * a row deleted by hand meanwhile is then updated in no row, without a word.
   */
  private change(action: string, id: string, sql: string, params: readonly unknown[]): void {
    if (this.depth > 0 && this.known.has(id)) {
      this.guard(action, () => this.db.execSync(sql, params))
      return
    }
    const changed = this.guard(action, () => this.db.changeSync(sql, params))
    if (changed > 0) this.known.add(id)
    if (changed === 0) {
      throw new SpindleError('THREAD_NOT_FOUND', `Thread ${id} is not in the registry (${this.where()}); check the id and the database.`, {
        details: { threadId: id, schema: this.db.schema ?? 'public' },
      })
    }
  }

  private checkTime(at: number, action: string, id: string): void {
    const problem = notAnInteger(at)
    if (problem) throw this.refuse(`Could not ${action}: the time ${problem} (ms since epoch).`, id)
  }

  private checkEvent(event: NewEvent): void {
    const problem = notText(event.threadId) ?? notText(event.type) ?? notAnInteger(event.at)
    if (problem) throw this.refuse(`Cannot append event ${JSON.stringify(event.type)} of thread ${JSON.stringify(event.threadId)}: ${problem}.`, event.threadId)
  }

  private refuse(message: string, threadId?: string): SpindleError {
    return refused(this.store, message, threadId === undefined ? {} : { threadId })
  }

  private where(): string {
    return `schema ${this.db.schema ?? 'public'}`
  }
}

/**
 * Opens the registry on the bridge's schema (migrated already: see schema.ts) and returns it as a
 * {@link Registry}, with its event log. Every write outside `transaction` is one statement,
 * committed (durably) when the call returns; `transaction(fn)` is one database transaction.
 *
 * @param options.db - The connection. The registry does not own it: `close` leaves it open.
 * @throws SpindleError `REGISTRY_FAILED` (details.schema, details.pgCode) when the database refuses
 *   a statement; DATABASE_UNAVAILABLE (from the bridge) when it cannot be reached.
 *
 * Caveats: many processes on many hosts may open the same schema; see the file comment for what
 * is locked and why. Each call is at least one round trip to the database.
 *
 * @example
 * const registry = openPgRegistry({ db: new PgBridge({ url, schema: 'spindle' }) })
 * registry.register({ id: 't-1', directiveName: 'hello', directive: {}, nonce: 'n', createdAt: Date.now() })
 * registry.get('t-1')?.status // 'created'
 */
export function openPgRegistry(options: { db: PgBridge }): Registry {
  return new PgRegistry(options.db)
}
