/**
 * Thread leases on SQLite (`leases.db` in the data directory): which runtime process runs which
 * thread, until when, with a fencing token that grows at every change of hands. Side effects.
 */
import { openSqliteFile, sqliteGuard } from './sqliteFile.js'
import type { SqliteStore } from './sqliteFile.js'
import type { Durability, Lease, LeaseStore, RecordedWait } from './types.js'

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
  // The waits in progress of every runtime sharing the directory (wait_threads): the wait-for graph
  // that refuses a wait closing a cycle spans processes. A row counts while its owner holds the
  // waiter's lease; a process that dies leaves its rows to the one that takes its threads over.
  `CREATE TABLE waits (
     id INTEGER PRIMARY KEY,
     waiter TEXT NOT NULL,
     owner TEXT NOT NULL,
     fail_fast INTEGER NOT NULL,
     -- JSON array of the thread ids waited for, as they were asked for.
     ids TEXT NOT NULL
   );
   CREATE INDEX waits_owner ON waits(owner);`,
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
  const others = db.prepare<[string], Row>('SELECT * FROM leases WHERE owner != ? ORDER BY thread_id')
  const delExact = db.prepare<[string, string, number]>('DELETE FROM leases WHERE thread_id = ? AND owner = ? AND token = ?')
  const raise = db.prepare<[number, string]>('UPDATE leases SET token = ? WHERE thread_id = ?')
  const raiseTx = db.transaction((threadId: string, owner: string, token: number): boolean => {
    const current = get.get(threadId)
    if (!current || current.owner !== owner) return false
    if (current.token < token) raise.run(token, threadId)
    upsertToken.run(threadId, Math.max(token, lastToken.get(threadId)?.token ?? 0))
    return true
  })

  // A batch (a recovery: thousands of threads) is taken with a few set-based statements instead
  // of a read and a write per thread: which other owners hold live leases among the ids (one
  // liveness verdict per owner), which leases stay held, then one INSERT … SELECT for the rest.
  const liveOwners = db.prepare<[string, string, number], Row>(
    'SELECT * FROM leases WHERE thread_id IN (SELECT value FROM json_each(?)) AND owner != ? AND expires_at > ? GROUP BY owner',
  )
  const stillHeld = db.prepare<[string, string, number, string], Row>(
    `SELECT * FROM leases WHERE thread_id IN (SELECT value FROM json_each(?)) AND owner != ? AND expires_at > ?
       AND owner NOT IN (SELECT value FROM json_each(?))`,
  )
  const extendMany = db.prepare<[number, string, string]>('UPDATE leases SET expires_at = ? WHERE owner = ? AND thread_id IN (SELECT value FROM json_each(?))')
  // A lease changing hands gets a token above both its current one and the last one handed out.
  const takeMany = db.prepare(
    `INSERT INTO leases (thread_id, owner, pid, host, acquired_at, expires_at, token)
     SELECT j.value, @owner, @pid, @host, @now, @expiresAt, MAX(COALESCE(l.token, 0), COALESCE(t.token, 0)) + 1
       FROM json_each(@ids) AS j LEFT JOIN leases AS l ON l.thread_id = j.value LEFT JOIN tokens AS t ON t.thread_id = j.value
      WHERE l.thread_id IS NULL OR (l.owner != @owner AND (l.expires_at <= @now OR l.owner IN (SELECT value FROM json_each(@stale))))
     ON CONFLICT(thread_id) DO UPDATE SET owner = excluded.owner, pid = excluded.pid, host = excluded.host,
       acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, token = excluded.token
     RETURNING thread_id, token`,
  )
  const recordTokens = db.prepare<[string, string]>(
    `INSERT INTO tokens (thread_id, token) SELECT thread_id, token FROM leases WHERE owner = ? AND thread_id IN (SELECT value FROM json_each(?)) AND true
     ON CONFLICT(thread_id) DO UPDATE SET token = excluded.token`,
  )

  // A wait counts while its owner still holds the waiter's lease: taken over or released, it is
  // over (a thread taken over runs its wait again, under its new owner, if it still waits).
  const othersWaits = db.prepare<[string], { waiter: string; fail_fast: number; ids: string }>(
    `SELECT w.waiter, w.fail_fast, w.ids FROM waits AS w JOIN leases AS l ON l.thread_id = w.waiter AND l.owner = w.owner
      WHERE w.owner != ? ORDER BY w.id`,
  )
  const putWait = db.prepare<[string, string, number, string]>('INSERT INTO waits (waiter, owner, fail_fast, ids) VALUES (?, ?, ?, ?)')
  const delWait = db.prepare<[number, string]>('DELETE FROM waits WHERE id = ? AND owner = ?')
  const delWaitsOf = db.prepare<[string]>('DELETE FROM waits WHERE owner = ?')
  const delOverWaits = db.prepare(
    'DELETE FROM waits WHERE NOT EXISTS (SELECT 1 FROM leases AS l WHERE l.thread_id = waits.waiter AND l.owner = waits.owner)',
  )
  const toWait = (row: { waiter: string; fail_fast: number; ids: string }): RecordedWait => {
    let ids: unknown = null
    try {
      ids = JSON.parse(row.ids)
    } catch {
      // A damaged row (hand edit, disk damage) names nobody: it cannot close a cycle.
    }
    return { waiter: row.waiter, failFast: row.fail_fast !== 0, ids: Array.isArray(ids) ? ids.filter((id): id is string => typeof id === 'string') : [] }
  }
  const recordWaitTx = db.transaction((owner: string, wait: RecordedWait, check: (others: RecordedWait[]) => void): { id: number } | { refused: unknown } => {
    delOverWaits.run()
    try {
      check(othersWaits.all(owner).map(toWait))
    } catch (refused) {
      return { refused }
    }
    return { id: Number(putWait.run(wait.waiter, owner, wait.failFast ? 1 : 0, JSON.stringify(wait.ids)).lastInsertRowid) }
  })

  const guard = sqliteGuard(store)

  function acquireOne(threadId: string, owner: { id: string; pid: number; host: string }, ttlMs: number, now: number): { acquired: boolean; lease: Lease } {
    const current = get.get(threadId)
    if (current && current.owner !== owner.id && current.expires_at > now) return { acquired: false, lease: toLease(current) }
    if (current && current.owner === owner.id) {
      extend.run(now + ttlMs, threadId, owner.id)
      return { acquired: true, lease: toLease({ ...current, expires_at: now + ttlMs }) }
    }
    const token = Math.max(current?.token ?? 0, lastToken.get(threadId)?.token ?? 0) + 1
    const lease: Lease = { threadId, owner: owner.id, pid: owner.pid, host: owner.host, acquiredAt: now, expiresAt: now + ttlMs, token }
    put.run(lease)
    upsertToken.run(threadId, token)
    return { acquired: true, lease }
  }

  const acquireTx = db.transaction((threadId: string, owner: { id: string; pid: number; host: string }, ttlMs: number, now: number) =>
    acquireOne(threadId, owner, ttlMs, now),
  )

  const acquireManyTx = db.transaction((threadIds: readonly string[], owner: { id: string; pid: number; host: string }, ttlMs: number, now: number, stale?: (lease: Lease) => boolean) => {
    // An id given twice is taken once: the second time it is already this owner's.
    const unique = [...new Set(threadIds)]
    const ids = JSON.stringify(unique)
    const staleOwners = JSON.stringify(stale ? liveOwners.all(ids, owner.id, now).filter((row) => stale(toLease(row))).map((row) => row.owner) : [])
    const held = new Map(stillHeld.all(ids, owner.id, now, staleOwners).map((row) => [row.thread_id, toLease(row)]))
    const expiresAt = now + ttlMs
    extendMany.run(expiresAt, owner.id, ids)
    const tokens = new Map<string, number>()
    for (const row of takeMany.iterate({ ids, owner: owner.id, pid: owner.pid, host: owner.host, now, expiresAt, stale: staleOwners }) as Iterable<{
      thread_id: string
      token: number
    }>) {
      tokens.set(row.thread_id, row.token)
    }
    recordTokens.run(owner.id, ids)
    return { acquired: unique.filter((id) => !held.has(id)), held: unique.filter((id) => held.has(id)).map((id) => held.get(id)!), tokens }
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
    // One local transaction either way: nothing to save.
    acquireFresh: (threadId, owner, ttlMs, now) => guard(`take the lease of ${threadId}`, () => acquireTx.immediate(threadId, owner, ttlMs, now)),
    acquireMany: (threadIds, owner, ttlMs, now, stale) => guard('take leases', () => acquireManyTx.immediate(threadIds, owner, ttlMs, now, stale)),
    renew: (owner, threadIds, ttlMs, now) => guard('renew leases', () => renewTx.immediate(owner, threadIds, ttlMs, now)),
    raiseToken: (threadId, owner, token) => guard(`raise the lease token of ${threadId}`, () => raiseTx.immediate(threadId, owner, token)),
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
    removeIf: (lease) =>
      guard(`remove the lease of ${lease.threadId}`, () => delExact.run(lease.threadId, lease.owner, lease.token).changes > 0),
    heldByOthers: (owner) => guard('list leases', () => others.all(owner).map(toLease)),
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
    recordWait: (owner, wait, check) => {
      // One immediate transaction: two processes each closing half of a cycle at once are
      // serialized, and the second sees the first's wait.
      const done = guard(`record the wait of ${wait.waiter}`, () => recordWaitTx.immediate(owner, wait, check))
      if ('refused' in done) throw done.refused
      return done.id
    },
    waitsOfOthers: (owner) => guard('read the waits of other processes', () => othersWaits.all(owner).map(toWait)),
    endWait: (owner, id) => {
      guard('end a wait', () => delWait.run(id, owner))
    },
    endWaitsOf: (owner) => {
      guard('end waits', () => delWaitsOf.run(owner))
    },
    close: () => db.close(),
  }
}
