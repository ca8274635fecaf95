/**
 * The registry: canonical status of every thread, in SQLite (better-sqlite3).
 *
 * Caveats: one writer per process (better-sqlite3 is synchronous; concurrent processes wait on
 * SQLITE_BUSY up to busy_timeout). With durability 'fsync', synchronous = FULL: a committed
 * transaction survives power loss. With 'process', synchronous = NORMAL: in WAL mode that survives
 * a process crash but may lose the last transactions on power loss.
 */
import Database from 'better-sqlite3'
import { SpindleError } from '../src/errors.js'
import type { Cost, Durability, RegisterThread, Registry, ThreadRecord, ThreadStatus } from './types.js'

/** Numbered migrations; PRAGMA user_version records how many have run. Never edit one that shipped. */
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE threads (
     id TEXT PRIMARY KEY,
     directive_name TEXT NOT NULL,
     directive TEXT NOT NULL,
     parent_id TEXT,
     previous_thread_id TEXT,
     status TEXT NOT NULL CHECK (status IN ('created','running','suspended','completed','error','cancelled','continued')),
     nonce TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     updated_at INTEGER NOT NULL,
     cost TEXT,
     result TEXT,
     error TEXT
   );
   CREATE INDEX threads_status ON threads(status);
   CREATE INDEX threads_parent ON threads(parent_id);
   CREATE INDEX threads_previous ON threads(previous_thread_id);`,
]

interface Row {
  id: string
  directive_name: string
  directive: string
  parent_id: string | null
  previous_thread_id: string | null
  status: ThreadStatus
  nonce: string
  created_at: number
  updated_at: number
  cost: string | null
  result: string | null
  error: string | null
}

// A damaged JSON cell must not make the whole listing fail: the row is still returned, that field null.
function parseCell(text: string | null): any {
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
    nonce: row.nonce,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    cost: parseCell(row.cost),
    result: parseCell(row.result),
    error: parseCell(row.error),
  }
}

function notFound(id: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in the registry.`, { details: { threadId: id } })
}

class SqliteRegistry implements Registry {
  private readonly db: Database.Database
  private readonly stmt: Record<string, Database.Statement>
  private closed = false

  constructor(private readonly file: string, durability: Durability) {
    try {
      this.db = new Database(file)
      if (file !== ':memory:') this.db.pragma('journal_mode = WAL')
      this.db.pragma(`synchronous = ${durability === 'fsync' ? 'FULL' : 'NORMAL'}`)
      this.db.pragma('foreign_keys = ON')
      this.db.pragma('busy_timeout = 5000')
      this.migrate()
    } catch (error) {
      throw new SpindleError(
        'REGISTRY_FAILED',
        `Could not open the registry ${file}: ${(error as Error).message}. If the file is damaged, move it aside; ` +
          `the threads' own files are not affected.`,
        { cause: error, details: { path: file } },
      )
    }
    const p = (sql: string) => this.db.prepare(sql)
    this.stmt = {
      insert: p(`INSERT INTO threads (id, directive_name, directive, parent_id, previous_thread_id, status, nonce, created_at, updated_at)
                 VALUES (@id, @directiveName, @directive, @parentId, @previousThreadId, 'created', @nonce, @createdAt, @createdAt)`),
      status: p('UPDATE threads SET status = ?, updated_at = ? WHERE id = ?'),
      result: p('UPDATE threads SET result = ?, error = ? WHERE id = ?'),
      cost: p('UPDATE threads SET cost = ? WHERE id = ?'),
      get: p('SELECT * FROM threads WHERE id = ?'),
      active: p(`SELECT * FROM threads WHERE status IN ('created','running') ORDER BY created_at, id`),
      activeIds: p(`SELECT id, status FROM threads WHERE status IN ('created','running') ORDER BY created_at, id`),
      all: p('SELECT * FROM threads ORDER BY created_at, id'),
      children: p('SELECT * FROM threads WHERE parent_id = ? ORDER BY created_at, id'),
      next: p('SELECT * FROM threads WHERE previous_thread_id = ? ORDER BY created_at, id LIMIT 1'),
    }
  }

  private migrate(): void {
    const version = this.db.pragma('user_version', { simple: true }) as number
    if (version > MIGRATIONS.length) {
      throw new Error(`schema version ${version} is newer than this spindle knows (${MIGRATIONS.length}); upgrade spindle`)
    }
    this.db.transaction(() => {
      for (let i = version; i < MIGRATIONS.length; i++) this.db.exec(MIGRATIONS[i]!)
      this.db.pragma(`user_version = ${MIGRATIONS.length}`)
    })()
  }

  register(thread: RegisterThread): void {
    try {
      this.stmt.insert!.run({
        id: thread.id,
        directiveName: thread.directiveName,
        directive: JSON.stringify(thread.directive),
        parentId: thread.parentId ?? null,
        previousThreadId: thread.previousThreadId ?? null,
        nonce: thread.nonce,
        createdAt: thread.createdAt,
      })
    } catch (error) {
      throw new SpindleError('REGISTRY_FAILED', `Could not register thread ${thread.id} in ${this.file}: ${(error as Error).message}.`, {
        cause: error,
        details: { threadId: thread.id, path: this.file },
      })
    }
  }

  updateStatus(id: string, status: ThreadStatus, at: number): void {
    if (this.stmt.status!.run(status, at, id).changes === 0) throw notFound(id)
  }

  get(id: string): ThreadRecord | null {
    const row = this.stmt.get!.get(id) as Row | undefined
    return row ? toRecord(row) : null
  }

  setResult(id: string, outcome: { result?: unknown; error?: { code: string; message: string } | null }): void {
    const result = outcome.result === undefined ? null : JSON.stringify(outcome.result)
    const error = outcome.error ? JSON.stringify(outcome.error) : null
    if (this.stmt.result!.run(result, error, id).changes === 0) throw notFound(id)
  }

  updateCostSnapshot(id: string, cost: Cost): void {
    if (this.stmt.cost!.run(JSON.stringify(cost), id).changes === 0) throw notFound(id)
  }

  listActive(): ThreadRecord[] {
    return (this.stmt.active!.all() as Row[]).map(toRecord)
  }

  activeStatuses(): Array<{ id: string; status: ThreadStatus }> {
    return this.stmt.activeIds!.all() as Array<{ id: string; status: ThreadStatus }>
  }

  list(filter: { status?: ThreadStatus | ThreadStatus[]; limit?: number } = {}): ThreadRecord[] {
    const statuses = filter.status === undefined ? null : Array.isArray(filter.status) ? filter.status : [filter.status]
    let rows: Row[]
    if (statuses) {
      const marks = statuses.map(() => '?').join(',')
      rows = this.db.prepare(`SELECT * FROM threads WHERE status IN (${marks}) ORDER BY created_at, id`).all(...statuses) as Row[]
    } else {
      rows = this.stmt.all!.all() as Row[]
    }
    return (filter.limit !== undefined ? rows.slice(0, filter.limit) : rows).map(toRecord)
  }

  listChildren(id: string): ThreadRecord[] {
    return (this.stmt.children!.all(id) as Row[]).map(toRecord)
  }

  chain(id: string): ThreadRecord[] {
    const start = this.get(id)
    if (!start) return []
    const seen = new Set([start.id])
    const before: ThreadRecord[] = []
    let cursor = start
    while (cursor.previousThreadId && !seen.has(cursor.previousThreadId)) {
      const prev = this.get(cursor.previousThreadId)
      if (!prev) break
      seen.add(prev.id)
      before.unshift(prev)
      cursor = prev
    }
    const after: ThreadRecord[] = []
    cursor = start
    for (;;) {
      const row = this.stmt.next!.get(cursor.id) as Row | undefined
      if (!row || seen.has(row.id)) break
      seen.add(row.id)
      cursor = toRecord(row)
      after.push(cursor)
    }
    return [...before, start, ...after]
  }

  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn)()
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.db.close()
  }
}

/** Opens (and migrates) the registry database. */
export function openSqliteRegistry(options: { path: string; durability: Durability }): Registry {
  return new SqliteRegistry(options.path, options.durability)
}
