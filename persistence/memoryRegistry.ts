/**
 * In-memory registry: the reference implementation of `Registry`, for tests and memory mode, and
 * executable documentation of the contract the SQLite backend keeps. Plain Maps; nothing survives
 * the process. Side effects (of the in-process kind only). Knows nothing about machines but the
 * names of their suspend reasons.
 */
import type { SuspendReason } from '../machines/threadContext.js'
import { SpindleError } from '../src/base/errors.js'
import { compareBinary } from './binaryOrder.js'
import { MemoryEventLog } from './memoryEventLog.js'
import type { Cost, RecoveryCount, RegisterThread, Registry, ThreadRecord, ThreadStatus } from './types.js'

const STATUSES: ReadonlySet<string> = new Set<ThreadStatus>(['created', 'running', 'suspended', 'completed', 'error', 'cancelled', 'continued'])
const SUSPEND_REASONS: ReadonlySet<string> = new Set<SuspendReason>(['limit', 'error', 'context_length', 'budget', 'crash_loop', 'tool_approval', 'waiting'])
const ACTIVE: readonly ThreadStatus[] = ['created', 'running']
const WHERE = 'the in-memory registry'

/**
 * One thread as the registry keeps it. JSON fields are kept as text, as the SQLite backend keeps
 * them: what a caller reads back is what JSON can carry (undefined dropped, NaN null, a Date its
 * ISO string), and every read parses a fresh copy the caller may mutate. Rows are never changed in
 * place, only replaced, so undoing a write is putting the old row back.
 */
interface Row {
  readonly id: string
  readonly directiveName: string
  readonly directive: string
  readonly parentId: string | null
  readonly previousThreadId: string | null
  readonly status: ThreadStatus
  readonly suspendReason: SuspendReason | null
  readonly nonce: string
  readonly createdAt: number
  readonly updatedAt: number
  readonly cost: string | null
  readonly result: string | null
  readonly error: string | null
  readonly recoveries: number
  readonly recoverySeq: number | null
}

type Brief = { id: string; status: ThreadStatus; parentId: string | null }

/** ORDER BY created_at, id. */
function byCreation(a: Row, b: Row): number {
  return a.createdAt - b.createdAt || compareBinary(a.id, b.id)
}

/** JSON text of a value; text that parses, or null, like the SQLite backend's cells. */
function parseCell(text: string | null): unknown {
  return text === null ? null : JSON.parse(text)
}

function toRecord(row: Row): ThreadRecord {
  return {
    id: row.id,
    directiveName: row.directiveName,
    directive: parseCell(row.directive),
    parentId: row.parentId,
    previousThreadId: row.previousThreadId,
    status: row.status,
    suspendReason: row.suspendReason,
    nonce: row.nonce,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    cost: parseCell(row.cost) as Cost | null,
    result: parseCell(row.result),
    error: parseCell(row.error) as ThreadRecord['error'],
  }
}

function brief(row: Row): Brief {
  return { id: row.id, status: row.status, parentId: row.parentId }
}

/** A number as a JSON cell carries it (`->>` in the SQLite backend): NaN, ±Infinity and undefined are null. */
function jsonNumber(value: number | null | undefined): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null
}

function threadNotFound(id: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `Thread ${id} is not in ${WHERE}; check the id.`, { details: { threadId: id } })
}

/** What SQLite's NOT NULL and CHECK constraints refuse: the same writes fail here, with the same code. */
function refused(action: string, reason: string, details: Record<string, unknown> = {}): SpindleError {
  return new SpindleError('REGISTRY_FAILED', `Could not ${action} in ${WHERE}: ${reason}.`, { details })
}

function required<T>(value: T | null | undefined, field: string, action: string): T {
  if (value === null || value === undefined || (typeof value === 'number' && Number.isNaN(value))) throw refused(action, `${field} is required`, { field })
  return value
}

function assertStatus(status: ThreadStatus, action: string): void {
  if (!STATUSES.has(status)) throw refused(action, `'${String(status)}' is not a thread status (one of ${[...STATUSES].join(', ')})`, { status })
}

function closed(): SpindleError {
  return new SpindleError('REGISTRY_FAILED', 'The in-memory registry is closed: open a new one (what the closed one held is gone).')
}

function isThenable(value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function'
}

class MemoryRegistry implements Registry {
  private readonly rows = new Map<string, Row>()
  private readonly byParent = new Map<string, Set<string>>()
  private readonly byPrevious = new Map<string, Set<string>>()
  private readonly claims = new Map<string, number>()
  /** Inverse of every write made inside `transaction`, newest last; empty outside one. */
  private readonly undo: Array<() => void> = []
  private depth = 0
  private open = true
  readonly events = new MemoryEventLog(() => this.assertOpen(), (undo) => this.remember(undo))

  register(thread: RegisterThread): void {
    this.assertOpen()
    const action = `register thread ${thread.id}`
    // Serialised before anything is checked or written: a value JSON cannot carry (a BigInt) throws here.
    const directive = JSON.stringify(thread.directive) as string | undefined
    if (this.rows.has(thread.id)) {
      throw new SpindleError('REGISTRY_FAILED', `Thread ${thread.id} is already registered in ${WHERE}; register each thread id once.`, {
        details: { threadId: thread.id },
      })
    }
    const row: Row = {
      id: required(thread.id, 'id', action),
      directiveName: required(thread.directiveName, 'directiveName', action),
      directive: required(directive, 'directive', action),
      parentId: thread.parentId ?? null,
      previousThreadId: thread.previousThreadId ?? null,
      status: 'created',
      suspendReason: null,
      nonce: required(thread.nonce, 'nonce', action),
      createdAt: required(thread.createdAt, 'createdAt', action),
      updatedAt: thread.createdAt,
      cost: null,
      result: null,
      error: null,
      recoveries: 0,
      recoverySeq: null,
    }
    this.rows.set(row.id, row)
    if (row.parentId !== null) this.index(this.byParent, row.parentId, row.id)
    if (row.previousThreadId !== null) this.index(this.byPrevious, row.previousThreadId, row.id)
    this.remember(() => {
      this.rows.delete(row.id)
      if (row.parentId !== null) this.byParent.get(row.parentId)?.delete(row.id)
      if (row.previousThreadId !== null) this.byPrevious.get(row.previousThreadId)?.delete(row.id)
    })
  }

  updateStatus(id: string, status: ThreadStatus, at: number, suspendReason: SuspendReason | null = null): void {
    const row = this.mustGet(id)
    const action = `set the status of thread ${id}`
    assertStatus(status, action)
    const reason = status === 'suspended' ? suspendReason : null
    if (reason !== null && !SUSPEND_REASONS.has(reason)) {
      throw refused(action, `'${String(reason)}' is not a suspend reason (one of ${[...SUSPEND_REASONS].join(', ')})`, { suspendReason: reason })
    }
    this.replace(row, { status, updatedAt: required(at, 'at', action), suspendReason: reason })
  }

  get(id: string): ThreadRecord | null {
    this.assertOpen()
    const row = this.rows.get(id)
    return row ? toRecord(row) : null
  }

  setResult(id: string, outcome: { result?: unknown; error?: { code: string; message: string } | null }): void {
    const row = this.mustGet(id)
    const result = outcome.result === undefined ? null : ((JSON.stringify(outcome.result) as string | undefined) ?? null)
    const error = outcome.error ? JSON.stringify(outcome.error) : null
    this.replace(row, { result, error })
  }

  updateCostSnapshot(id: string, cost: Cost): void {
    const row = this.mustGet(id)
    this.replace(row, { cost: (JSON.stringify(cost) as string | undefined) ?? null })
  }

  listActive(): ThreadRecord[] {
    return this.select(ACTIVE).map(toRecord)
  }

  activeStatuses(): Brief[] {
    return this.select(ACTIVE).map(brief)
  }

  statuses(statuses: readonly ThreadStatus[]): Brief[] {
    return this.select(statuses).map(brief)
  }

  list(filter: { status?: ThreadStatus | ThreadStatus[]; limit?: number } = {}): ThreadRecord[] {
    const { limit } = filter
    // SQLite refuses a LIMIT that is not an integer ("datatype mismatch") and reads a negative one as none.
    if (limit !== undefined && !Number.isInteger(limit)) throw refused('list threads', `limit must be an integer (got ${limit})`, { limit })
    const statuses = filter.status === undefined ? undefined : Array.isArray(filter.status) ? filter.status : [filter.status]
    const rows = this.select(statuses)
    return (limit === undefined || limit < 0 ? rows : rows.slice(0, limit)).map(toRecord)
  }

  listChildren(id: string): ThreadRecord[] {
    this.assertOpen()
    return this.sorted(this.byParent.get(id)).map(toRecord)
  }

  successorOf(id: string): string | null {
    this.assertOpen()
    return this.next(id)?.id ?? null
  }

  chain(id: string): ThreadRecord[] {
    this.assertOpen()
    const start = this.rows.get(id)
    if (!start) return []
    // Damage could make previousThreadId loop; every row is visited at most once.
    const seen = new Set([start.id])
    const rows: Row[] = [start]
    for (let row = start; row.previousThreadId !== null && !seen.has(row.previousThreadId); ) {
      const previous = this.rows.get(row.previousThreadId)
      if (!previous) break
      seen.add(previous.id)
      rows.unshift(previous)
      row = previous
    }
    for (let row = start; ; ) {
      const next = this.next(row.id)
      if (!next || seen.has(next.id)) break
      seen.add(next.id)
      rows.push(next)
      row = next
    }
    return rows.map(toRecord)
  }

  recoveryCount(id: string): RecoveryCount | null {
    this.assertOpen()
    const row = this.rows.get(id)
    return row ? { count: row.recoveries, seq: row.recoverySeq } : null
  }

  recoveryCounts(): Map<string, RecoveryCount> {
    this.assertOpen()
    const counts = new Map<string, RecoveryCount>()
    for (const row of this.rows.values()) {
      if (row.recoveries !== 0 || row.recoverySeq !== null) counts.set(row.id, { count: row.recoveries, seq: row.recoverySeq })
    }
    return counts
  }

  setRecoveryCounts(counts: ReadonlyArray<{ id: string } & RecoveryCount>): void {
    this.assertOpen()
    // All or nothing, as the one UPDATE of the SQLite backend: check every count before writing one.
    const known = counts.filter(({ id }) => this.rows.has(id))
    for (const { id, count } of known) required(jsonNumber(count), 'count', `record the recovery count of thread ${id}`)
    // The last count given for an id wins.
    for (const { id, count, seq } of known) this.replace(this.rows.get(id)!, { recoveries: count, recoverySeq: jsonNumber(seq) })
  }

  resetRecoveryCounts(ids: readonly string[]): void {
    this.assertOpen()
    for (const id of ids) {
      const row = this.rows.get(id)
      if (row && row.recoveries !== 0) this.replace(row, { recoveries: 0 })
    }
  }

  claim(tokens: ReadonlyArray<{ id: string; token: number }>): Array<{ id: string; token: number }> {
    this.assertOpen()
    // Claims at or above the token offered, read before anything is written (one per offer, repeats included).
    const ahead: Array<{ id: string; token: number }> = []
    for (const { id, token } of tokens) {
      const claimed = this.claims.get(id)
      if (claimed !== undefined && claimed >= token) ahead.push({ id, token: claimed })
    }
    // Token 1 is a thread's first lease: no holder before it can publish under a smaller one, so a
    // batch of first leases records nothing. A batch with a later lease in it records every offer.
    if (tokens.every(({ token }) => token <= 1)) return ahead
    for (const { id, token } of tokens) required(jsonNumber(token), 'token', `record the lease token of thread ${id}`)
    for (const { id, token } of tokens) {
      const claimed = this.claims.get(id)
      if (claimed !== undefined && claimed >= token) continue
      this.claims.set(id, token)
      this.remember(() => (claimed === undefined ? this.claims.delete(id) : this.claims.set(id, claimed)))
    }
    return ahead
  }

  leaseToken(id: string): number | null {
    this.assertOpen()
    return this.claims.get(id) ?? null
  }

  /**
   * Runs `fn` with every write it makes undone if it throws (the error propagates), as a SQLite
   * transaction rolls back. Nested calls are savepoints: an inner `fn` that throws undoes only its
   * own writes, and the outer one goes on if it catches the error. A failed write inside `fn`
   * (a thread registered twice, an unknown id) writes nothing, so `fn` may catch it and carry on.
   * Like better-sqlite3, a `fn` that returns a promise is refused (TypeError) and undone.
   */
  transaction<T>(fn: () => T): T {
    this.assertOpen()
    const mark = this.undo.length
    this.depth++
    try {
      const value = fn()
      if (isThenable(value)) throw new TypeError('Transaction function cannot return a promise')
      return value
    } catch (error) {
      while (this.undo.length > mark) this.undo.pop()!()
      throw error
    } finally {
      this.depth--
      if (this.depth === 0) this.undo.length = 0
    }
  }

  close(): void {
    this.open = false
    this.rows.clear()
    this.byParent.clear()
    this.byPrevious.clear()
    this.claims.clear()
  }

  private assertOpen(): void {
    if (!this.open) throw closed()
  }

  private mustGet(id: string): Row {
    this.assertOpen()
    const row = this.rows.get(id)
    if (!row) throw threadNotFound(id)
    return row
  }

  /** Puts a changed copy of `row` in its place. */
  private replace(row: Row, change: Partial<Row>): void {
    this.rows.set(row.id, { ...row, ...change })
    this.remember(() => this.rows.set(row.id, row))
  }

  private remember(undo: () => void): void {
    if (this.depth > 0) this.undo.push(undo)
  }

  private index(index: Map<string, Set<string>>, key: string, id: string): void {
    const ids = index.get(key)
    if (ids) ids.add(id)
    else index.set(key, new Set([id]))
  }

  /** The rows in any of `statuses` (every row when undefined), oldest first. */
  private select(statuses: readonly ThreadStatus[] | undefined): Row[] {
    this.assertOpen()
    const wanted = statuses === undefined ? undefined : new Set<string>(statuses)
    const rows: Row[] = []
    for (const row of this.rows.values()) if (!wanted || wanted.has(row.status)) rows.push(row)
    return rows.sort(byCreation)
  }

  private sorted(ids: Iterable<string> | undefined): Row[] {
    const rows: Row[] = []
    for (const id of ids ?? []) rows.push(this.rows.get(id)!)
    return rows.sort(byCreation)
  }

  /** The oldest thread naming `id` as its predecessor: only damage gives a thread two. */
  private next(id: string): Row | null {
    let oldest: Row | null = null
    for (const candidate of this.byPrevious.get(id) ?? []) {
      const row = this.rows.get(candidate)!
      if (oldest === null || byCreation(row, oldest) < 0) oldest = row
    }
    return oldest
  }
}

/**
 * A {@link Registry} in Maps, for memory mode and tests. It behaves as the SQLite registry does
 * within one process: the same ordering (creation time, then id), the same chain following, the
 * same refusals with the same codes (`REGISTRY_FAILED` for a second registration of an id, a
 * status that is none, a missing required field; `THREAD_NOT_FOUND` for writes to an unknown id).
 * Records handed out are fresh copies, and what a caller passed in is copied (as JSON) when
 * stored: neither can change the store.
 *
 * Caveats: nothing is durable; `close()` drops every row, and a closed registry throws
 * `REGISTRY_FAILED` on every call but `close`. One process only: no other process sees it, so
 * `claim` only ever meets tokens this process offered.
 *
 * @example
 * const registry = createMemoryRegistry()
 * registry.register({ id: 't-1', directiveName: 'hello', directive: {}, nonce: 'n', createdAt: Date.now() })
 * registry.get('t-1')?.status // 'created'
 * @see openSqliteRegistry for the durable backend.
 */
export function createMemoryRegistry(): Registry {
  return new MemoryRegistry()
}
