/**
 * Thread leases on SQLite (`leases.db` in the data directory): which runtime process runs which
 * thread, until when, with a fencing token that grows at every change of hands. Side effects.
 */
import { openSqliteFile, sqliteGuard } from './sqliteFile.js'
import type { SqliteStore } from './sqliteFile.js'
import type { Durability, Lease, LeaseStore } from './types.js'

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE leases (
     thread_id TEXT PRIMARY KEY,
     owner TEXT NOT NULL,
     pid INTEGER NOT NULL,
     host TEXT NOT NULL,
     acquired_at INTEGER NOT NULL,
     expires_at INTEGER NOT NULL,
     token INTEGER NOT NULL
   );
   CREATE INDEX leases_owner ON leases(owner);
   -- The last token handed out per thread survives a release, so tokens only ever grow.
   CREATE TABLE tokens (thread_id TEXT PRIMARY KEY, token INTEGER NOT NULL);`,
]

interface Row {
  thread_id: string
  owner: string
  pid: number
  host: string
  acquired_at: number
  expires_at: number
  token: number
}

function toLease(row: Row): Lease {
  return {
    threadId: row.thread_id,
    owner: row.owner,
    pid: row.pid,
    host: row.host,
    acquiredAt: row.acquired_at,
    expiresAt: row.expires_at,
    token: row.token,
  }
}

export function openSqliteLeases(options: { path: string; durability: Durability }): LeaseStore {
  // Leases only say which live process runs a thread: after a power loss no process is alive,
  // so a lease lost with it frees nothing that should stay held. No fsync per lease, whatever
  // the durability setting.
  void options.durability
  const store: SqliteStore = { code: 'REGISTRY_FAILED', what: 'the lease store', file: options.path }
  const db = openSqliteFile(store, { synchronous: 'NORMAL', migrations: MIGRATIONS })
  const get = db.prepare<[string], Row>('SELECT * FROM leases WHERE thread_id = ?')
  const lastToken = db.prepare<[string], { token: number }>('SELECT token FROM tokens WHERE thread_id = ?')
  const upsertToken = db.prepare('INSERT INTO tokens (thread_id, token) VALUES (?, ?) ON CONFLICT(thread_id) DO UPDATE SET token = excluded.token')
  const put = db.prepare(
    `INSERT INTO leases (thread_id, owner, pid, host, acquired_at, expires_at, token) VALUES (@threadId, @owner, @pid, @host, @acquiredAt, @expiresAt, @token)
     ON CONFLICT(thread_id) DO UPDATE SET owner = excluded.owner, pid = excluded.pid, host = excluded.host,
       acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, token = excluded.token`,
  )
  const extend = db.prepare<[number, string, string]>('UPDATE leases SET expires_at = ? WHERE thread_id = ? AND owner = ?')
  const del = db.prepare<[string, string]>('DELETE FROM leases WHERE thread_id = ? AND owner = ?')
  const delAny = db.prepare<[string]>('DELETE FROM leases WHERE thread_id = ?')
  const revokeRow = db.prepare<[string, string]>('UPDATE leases SET owner = ? WHERE thread_id = ?')
  const all = db.prepare<[], Row>('SELECT * FROM leases ORDER BY thread_id')
  const allTokens = db.prepare<[], { thread_id: string; token: number }>('SELECT thread_id, token FROM tokens')

  // A batch's new leases and tokens in one statement each: thousands of rows (a recovery) as one
  // JSON array instead of two statement runs per thread.
  const putMany = db.prepare<[string]>(
    `INSERT INTO leases (thread_id, owner, pid, host, acquired_at, expires_at, token)
     SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6 FROM json_each(?) WHERE true
     ON CONFLICT(thread_id) DO UPDATE SET owner = excluded.owner, pid = excluded.pid, host = excluded.host,
       acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, token = excluded.token`,
  )
  const upsertTokens = db.prepare<[string]>(
    `INSERT INTO tokens (thread_id, token) SELECT value->>0, value->>6 FROM json_each(?) WHERE true
     ON CONFLICT(thread_id) DO UPDATE SET token = excluded.token`,
  )

  /** Where acquireOne reads a thread's lease and last token: one query each, or maps read in bulk. */
  interface Reads {
    lease(threadId: string): Row | undefined
    token(threadId: string): number | undefined
    /** Told what acquireOne wrote, so bulk reads stay current (an id may come twice). */
    wrote?(row: Row): void
    /** Set: new leases are collected here and written by the caller, all at once. */
    pending?: Array<[string, string, number, string, number, number, number]>
  }
  const readEach: Reads = { lease: (id) => get.get(id), token: (id) => lastToken.get(id)?.token }

  /** Reads for a batch of many threads: every lease and token at once (recovery takes thousands). */
  function readAll(): Reads {
    const leases = new Map(all.all().map((row) => [row.thread_id, row]))
    const tokens = new Map(allTokens.all().map((row) => [row.thread_id, row.token]))
    return {
      pending: [],
      lease: (id) => leases.get(id),
      token: (id) => tokens.get(id),
      wrote: (row) => {
        leases.set(row.thread_id, row)
        tokens.set(row.thread_id, Math.max(tokens.get(row.thread_id) ?? 0, row.token))
      },
    }
  }

  const guard = sqliteGuard(store)

  function acquireOne(
    threadId: string,
    owner: { id: string; pid: number; host: string },
    ttlMs: number,
    now: number,
    stale?: (lease: Lease) => boolean,
    reads: Reads = readEach,
  ): { acquired: boolean; lease: Lease } {
    const current = reads.lease(threadId)
    if (current && current.owner !== owner.id && current.expires_at > now && !stale?.(toLease(current))) return { acquired: false, lease: toLease(current) }
    if (current && current.owner === owner.id) {
      extend.run(now + ttlMs, threadId, owner.id)
      reads.wrote?.({ ...current, expires_at: now + ttlMs })
      return { acquired: true, lease: toLease({ ...current, expires_at: now + ttlMs }) }
    }
    const token = Math.max(current?.token ?? 0, reads.token(threadId) ?? 0) + 1
    const lease: Lease = { threadId, owner: owner.id, pid: owner.pid, host: owner.host, acquiredAt: now, expiresAt: now + ttlMs, token }
    if (reads.pending) reads.pending.push([threadId, owner.id, owner.pid, owner.host, now, now + ttlMs, token])
    else {
      put.run(lease)
      upsertToken.run(threadId, token)
    }
    reads.wrote?.({ thread_id: threadId, owner: owner.id, pid: owner.pid, host: owner.host, acquired_at: now, expires_at: now + ttlMs, token })
    return { acquired: true, lease }
  }

  const acquireTx = db.transaction((threadId: string, owner: { id: string; pid: number; host: string }, ttlMs: number, now: number, stale?: (lease: Lease) => boolean) =>
    acquireOne(threadId, owner, ttlMs, now, stale),
  )

  const acquireManyTx = db.transaction((threadIds: readonly string[], owner: { id: string; pid: number; host: string }, ttlMs: number, now: number, stale?: (lease: Lease) => boolean) => {
    const acquired: string[] = []
    const held: Lease[] = []
    // acquireOne, not acquireTx: a nested transaction is a savepoint per thread, and the whole
    // batch commits or rolls back together anyway.
    const reads = threadIds.length >= 64 ? readAll() : readEach
    for (const id of threadIds) {
      const result = acquireOne(id, owner, ttlMs, now, stale, reads)
      if (result.acquired) acquired.push(id)
      else held.push(result.lease)
    }
    if (reads.pending?.length) {
      // An id given twice comes twice: the later row (the higher token) is applied last and wins.
      const rows = JSON.stringify(reads.pending)
      putMany.run(rows)
      upsertTokens.run(rows)
    }
    return { acquired, held }
  })

  const renewTx = db.transaction((owner: string, threadIds: readonly string[], ttlMs: number, now: number) => {
    const lost: string[] = []
    for (const id of threadIds) {
      const current = get.get(id)
      // A lease that expired but nobody took is still ours to extend: no other process ran it.
      if (!current || current.owner !== owner) lost.push(id)
      else extend.run(now + ttlMs, id, owner)
    }
    return lost
  })

  return {
    acquire: (threadId, owner, ttlMs, now) => guard(`take the lease of ${threadId}`, () => acquireTx.immediate(threadId, owner, ttlMs, now)),
    acquireMany: (threadIds, owner, ttlMs, now, stale) => guard('take leases', () => acquireManyTx.immediate(threadIds, owner, ttlMs, now, stale)),
    renew: (owner, threadIds, ttlMs, now) => guard('renew leases', () => renewTx.immediate(owner, threadIds, ttlMs, now)),
    release: (threadId, owner) => {
      guard(`release the lease of ${threadId}`, () => del.run(threadId, owner))
    },
    get: (threadId) => guard(`read the lease of ${threadId}`, () => {
      const row = get.get(threadId)
      return row ? toLease(row) : null
    }),
    list: () => guard('list leases', () => all.all().map(toLease)),
    remove: (threadId) =>
      guard(`remove the lease of ${threadId}`, () =>
        db.transaction(() => {
          const row = get.get(threadId)
          if (row) delAny.run(threadId)
          return row ? toLease(row) : null
        }).immediate(),
      ),
    revoke: (threadId) =>
      guard(`revoke the lease of ${threadId}`, () =>
        db.transaction(() => {
          const row = get.get(threadId)
          if (!row) return null
          // Same expiry, pid and host (a dead owner still frees it at once); an owner no runtime has.
          revokeRow.run(`revoked:${row.owner}`, threadId)
          return toLease(row)
        }).immediate(),
      ),
    close: () => db.close(),
  }
}
