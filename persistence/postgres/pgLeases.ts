/**
 * Thread leases on PostgreSQL: which runtime process, on any host, runs which thread, until when,
 * with a fencing token that grows at every change of hands; and the waits in progress of every
 * process (the wait-for graph). The tables are in leaseTables.ts. Side effects.
 *
 * Two locks keep processes from both taking a lease. Every operation that reads and then decides
 * (acquire, acquireMany, recordWait) takes the store's advisory transaction lock first, as SQLite's
 * BEGIN IMMEDIATE did: they run one at a time across every process on the schema, and the token
 * table, rows that do not exist yet and the waits of other owners are read and written as one. And
 * they read the lease rows they may change `FOR UPDATE`, so that the single statements that run
 * without the advisory lock (renew, release, raiseToken, revoke, remove) wait for them and then see
 * the new owner: an owner renewing a lease that is being taken over finds it lost, never renewed.
 * `acquireFresh` (a new thread's lease) takes no lock: nobody else can be deciding about its id.
 */
import type { Lease, LeaseStore, RecordedWait } from '../types.js'
import type { PgBridge, Row, Statement } from './bridge.js'
import { pgGuard } from './pgStoreGuard.js'

/** Held to the commit; one per schema, so two test schemas (or tenants) never wait on each other. */
const LOCK = `SELECT pg_advisory_xact_lock(hashtext('spindle.leases:' || current_schema()))`
const COLUMNS = 'thread_id, owner, pid, host, acquired_at, expires_at, token'
const REVOKED = 'revoked:'

interface LeaseRow {
  thread_id: string
  owner: string
  pid: number
  host: string
  acquired_at: number
  expires_at: number
  token: number
}

interface WaitRow {
  waiter: string
  fail_fast: boolean
  ids: unknown
}

type Owner = { id: string; pid: number; host: string }

function toLease(row: Row): Lease {
  const r = row as unknown as LeaseRow
  return { threadId: r.thread_id, owner: r.owner, pid: r.pid, host: r.host, acquiredAt: r.acquired_at, expiresAt: r.expires_at, token: r.token }
}

function toWait(row: Row): RecordedWait {
  const r = row as unknown as WaitRow
  // A damaged row (hand edit) names nobody: it cannot close a cycle.
  return { waiter: r.waiter, failFast: r.fail_fast, ids: Array.isArray(r.ids) ? r.ids.filter((id): id is string => typeof id === 'string') : [] }
}

/** Leases changing hands to `owner`, each at its token; the last token handed out moves with them. */
const TAKE = `INSERT INTO leases (thread_id, owner, pid, host, acquired_at, expires_at, token)
  SELECT id, $3::text, $4::integer, $5::text, $6::bigint, $7::bigint, token FROM unnest($1::text[], $2::bigint[]) AS t(id, token)
  ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, pid = excluded.pid, host = excluded.host,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, token = excluded.token`
const RECORD_TOKENS = `INSERT INTO lease_tokens (thread_id, token) SELECT * FROM unnest($1::text[], $2::bigint[])
  ON CONFLICT (thread_id) DO UPDATE SET token = GREATEST(lease_tokens.token, excluded.token)`

// A wait counts while its owner still holds the waiter's lease: taken over or released, it is
// over (a thread taken over runs its wait again, under its new owner, if it still waits).
const OTHERS_WAITS = `SELECT w.waiter, w.fail_fast, w.ids FROM waits AS w JOIN leases AS l ON l.thread_id = w.waiter AND l.owner = w.owner
  WHERE w.owner <> $1 ORDER BY w.id`
const PURGE_WAITS = 'DELETE FROM waits AS w WHERE NOT EXISTS (SELECT 1 FROM leases AS l WHERE l.thread_id = w.waiter AND l.owner = w.owner)'

/**
 * A `LeaseStore` on PostgreSQL, for runtime processes on many hosts sharing one database. A lease
 * is live while `expiresAt > now`; a token grows at every change of hands and never goes back
 * (`lease_tokens` keeps the last one handed out after the lease row goes); a revoked lease stays
 * under an owner no runtime has. `stale` and `check` run inside the transaction, holding the lock:
 * one that throws leaves every lease as it was (a `check` that throws records nothing, and the
 * waits found over are dropped all the same).
 *
 * `db` stays the caller's: `close()` only makes this store refuse further calls.
 *
 * @example
 * const leases = openPgLeases({ db: new PgBridge({ url: 'postgres://…', schema: 'spindle' }) })
 * leases.acquire('research-3f9k2m1x0q7a', { id: 'h:1:x', pid: 1, host: 'h' }, 30_000, Date.now()) // { acquired: true, lease: { token: 1, … } }
 * @see createMemoryLeases for the reference semantics, openSqliteLeases for one host's.
 */
export function openPgLeases(options: { db: PgBridge }): LeaseStore {
  const { db } = options
  const guard = pgGuard({ code: 'REGISTRY_FAILED', what: 'the lease store', db })

  /** `decide` in one transaction behind the store's lock, given the rows of `reads` (read after the lock is held). */
  function locked<T>(reads: Statement[], decide: (rows: Row[][]) => T): T {
    return db.transactionSync(() => decide(db.batchSync([{ sql: LOCK }, ...reads]).slice(1)))
  }

  /** The current leases of `ids`, locked in thread id order (see leaseTables.ts), and their last tokens handed out. */
  function readForTaking(ids: readonly string[]): Statement[] {
    return [
      { sql: `SELECT ${COLUMNS} FROM leases WHERE thread_id = ANY($1) ORDER BY thread_id FOR UPDATE`, params: [ids] },
      { sql: 'SELECT thread_id, token FROM lease_tokens WHERE thread_id = ANY($1)', params: [ids] },
    ]
  }

  function take(ids: string[], tokens: number[], owner: Owner, now: number, expiresAt: number): void {
    db.execSync(TAKE, [ids, tokens, owner.id, owner.pid, owner.host, now, expiresAt])
    db.execSync(RECORD_TOKENS, [ids, tokens])
  }

  function extend(ids: string[], owner: string, expiresAt: number): void {
    db.execSync('UPDATE leases SET expires_at = $1 WHERE owner = $2 AND thread_id = ANY($3)', [expiresAt, owner, ids])
  }

  /** Another owner's lease that has not expired: only its owner (or a verdict that it died) frees it. */
  const liveOther = (row: LeaseRow, owner: string, now: number): boolean => row.owner !== owner && row.expires_at > now

  return {
    acquire: (threadId, owner, ttlMs, now) =>
      guard(`take the lease of ${threadId}`, () =>
        locked(readForTaking([threadId]), ([leases, lasts]) => {
          const current = leases![0] as LeaseRow | undefined
          if (current && liveOther(current, owner.id, now)) return { acquired: false, lease: toLease(current as unknown as Row) }
          if (current?.owner === owner.id) {
            // Renewed, expired or not: a lease nobody took since is still this owner's, with its token.
            extend([threadId], owner.id, now + ttlMs)
            return { acquired: true, lease: { ...toLease(current as unknown as Row), expiresAt: now + ttlMs } }
          }
          const token = Math.max(current?.token ?? 0, Number(lasts![0]?.token ?? 0)) + 1
          take([threadId], [token], owner, now, now + ttlMs)
          return { acquired: true, lease: { threadId, owner: owner.id, pid: owner.pid, host: owner.host, acquiredAt: now, expiresAt: now + ttlMs, token } }
        }),
      ),

    acquireFresh(threadId, owner, ttlMs, now) {
      // One statement, without the store's lock: no other process can be deciding about an id
      // nobody else knows (takers under the lock only consider ids they found in the registry or
      // were given). Should a row be there after all, the insert takes nothing and `acquire` decides.
      const taken = guard(`take the lease of ${threadId}`, () =>
        db.querySync(
          `WITH next AS (SELECT coalesce((SELECT token FROM lease_tokens WHERE thread_id = $1), 0) + 1 AS token),
           taken AS (
             INSERT INTO leases (thread_id, owner, pid, host, acquired_at, expires_at, token)
             SELECT $1, $2::text, $3::integer, $4::text, $5::bigint, $6::bigint, token FROM next
             ON CONFLICT (thread_id) DO NOTHING RETURNING token)
           INSERT INTO lease_tokens (thread_id, token) SELECT $1, token FROM taken
           ON CONFLICT (thread_id) DO UPDATE SET token = GREATEST(lease_tokens.token, excluded.token)
           RETURNING token`,
          [threadId, owner.id, owner.pid, owner.host, now, now + ttlMs],
        ),
      )
      if (taken.length === 0) return this.acquire(threadId, owner, ttlMs, now)
      const token = Number(taken[0]!.token)
      return { acquired: true, lease: { threadId, owner: owner.id, pid: owner.pid, host: owner.host, acquiredAt: now, expiresAt: now + ttlMs, token } }
    },

    acquireMany: (threadIds, owner, ttlMs, now, stale) =>
      guard('take leases', () => {
        // An id given twice is taken once: the second time it is already this owner's.
        const unique = [...new Set(threadIds)]
        const isStale = stale ? guard.callerOf(stale) : undefined
        return locked(readForTaking(unique), ([leases, lasts]) => {
          const current = new Map(leases!.map((row) => [row.thread_id as string, row as unknown as LeaseRow]))
          const last = new Map(lasts!.map((row) => [row.thread_id as string, Number(row.token)]))
          // Asked once per other owner with a live lease among the ids, before anything is written.
          const staleOwners = new Set<string>()
          if (isStale) {
            const asked = new Set<string>()
            for (const id of unique) {
              const row = current.get(id)
              if (!row || !liveOther(row, owner.id, now) || asked.has(row.owner)) continue
              asked.add(row.owner)
              if (isStale(toLease(row as unknown as Row))) staleOwners.add(row.owner)
            }
          }
          const acquired: string[] = []
          const held: Lease[] = []
          const tokens = new Map<string, number>()
          const mine: string[] = []
          for (const id of unique) {
            const row = current.get(id)
            if (row && liveOther(row, owner.id, now) && !staleOwners.has(row.owner)) {
              held.push(toLease(row as unknown as Row))
              continue
            }
            acquired.push(id)
            // Already this owner's: extended, and its token (the last handed out) stays.
            if (row?.owner === owner.id) mine.push(id)
            else tokens.set(id, Math.max(row?.token ?? 0, last.get(id) ?? 0) + 1)
          }
          if (mine.length > 0) extend(mine, owner.id, now + ttlMs)
          if (tokens.size > 0) take([...tokens.keys()], [...tokens.values()], owner, now, now + ttlMs)
          return { acquired, held, tokens }
        })
      }),

    renew: (owner, threadIds, ttlMs, now) =>
      guard('renew leases', () => {
        // The rows are locked in thread id order before they are changed, as the takers lock them,
        // so a renewal and a take-over never wait on each other in a circle. A lease that expired
        // but nobody took is still ours to extend: no other process ran it.
        const renewed = db.querySync(
          `WITH mine AS (SELECT thread_id FROM leases WHERE owner = $2 AND thread_id = ANY($3) ORDER BY thread_id FOR UPDATE)
           UPDATE leases AS l SET expires_at = $1 FROM mine WHERE l.thread_id = mine.thread_id RETURNING l.thread_id`,
          [now + ttlMs, owner, [...new Set(threadIds)]],
        )
        const still = new Set(renewed.map((row) => row.thread_id as string))
        return threadIds.filter((id) => !still.has(id))
      }),

    raiseToken: (threadId, owner, token) =>
      guard(`raise the lease token of ${threadId}`, () => {
        // One statement: the lease row's lock orders it with a take-over, which then reads the raised last token.
        const raised = db.querySync(
          `WITH raised AS (UPDATE leases SET token = GREATEST(token, $3::bigint) WHERE thread_id = $1 AND owner = $2 RETURNING thread_id)
           INSERT INTO lease_tokens (thread_id, token) SELECT thread_id, $3::bigint FROM raised
           ON CONFLICT (thread_id) DO UPDATE SET token = GREATEST(lease_tokens.token, excluded.token)
           RETURNING thread_id`,
          [threadId, owner, token],
        )
        return raised.length > 0
      }),

    release: (threadId, owner) => {
      guard(`release the lease of ${threadId}`, () => db.changeSync('DELETE FROM leases WHERE thread_id = $1 AND owner = $2', [threadId, owner]))
    },

    get: (threadId) =>
      guard(`read the lease of ${threadId}`, () => {
        const row = db.querySync(`SELECT ${COLUMNS} FROM leases WHERE thread_id = $1`, [threadId])[0]
        return row ? toLease(row) : null
      }),

    list: () => guard('list leases', () => db.querySync(`SELECT ${COLUMNS} FROM leases ORDER BY thread_id`).map(toLease)),

    remove: (threadId) =>
      guard(`remove the lease of ${threadId}`, () => {
        const row = db.querySync(`DELETE FROM leases WHERE thread_id = $1 RETURNING ${COLUMNS}`, [threadId])[0]
        return row ? toLease(row) : null
      }),

    removeIf: (lease) =>
      guard(`remove the lease of ${lease.threadId}`, () =>
        db.changeSync('DELETE FROM leases WHERE thread_id = $1 AND owner = $2 AND token = $3', [lease.threadId, lease.owner, lease.token]) > 0,
      ),

    heldByOthers: (owner) => guard('list leases', () => db.querySync(`SELECT ${COLUMNS} FROM leases WHERE owner <> $1 ORDER BY thread_id`, [owner]).map(toLease)),

    revoke: (threadId) =>
      guard(`revoke the lease of ${threadId}`, () => {
        // Same expiry, pid and host (a dead owner still frees it at once); an owner no runtime has.
        // The lease as it was is the one returned, its owner without the prefix just added.
        const row = db.querySync(
          `UPDATE leases SET owner = $2 || owner WHERE thread_id = $1
           RETURNING thread_id, substr(owner, length($2) + 1) AS owner, pid, host, acquired_at, expires_at, token`,
          [threadId, REVOKED],
        )[0]
        return row ? toLease(row) : null
      }),

    recordWait: (owner, wait, check) => {
      // Behind the store's lock: two processes each closing half of a cycle at once take turns,
      // and the second one's check sees the first one's wait.
      const done = guard(`record the wait of ${wait.waiter}`, () =>
        locked(
          [{ sql: PURGE_WAITS }, { sql: OTHERS_WAITS, params: [owner] }, { sql: `SELECT nextval(pg_get_serial_sequence('waits', 'id')) AS id` }],
          ([, others, nextId]): { id: number } | { refused: unknown } => {
            try {
              check(others!.map(toWait))
            } catch (refused) {
              // Returned, not thrown: the purge of the waits that were over commits all the same.
              return { refused }
            }
            const id = Number(nextId![0]!.id)
            db.execSync('INSERT INTO waits (id, waiter, owner, fail_fast, ids) VALUES ($1, $2, $3, $4, $5)', [
              id,
              wait.waiter,
              owner,
              Boolean(wait.failFast),
              JSON.stringify(wait.ids),
            ])
            return { id }
          },
        ),
      )
      if ('refused' in done) throw done.refused
      return done.id
    },

    waitsOfOthers: (owner) => guard('read the waits of other processes', () => db.querySync(OTHERS_WAITS, [owner]).map(toWait)),

    endWait: (owner, id) => {
      guard('end a wait', () => db.changeSync('DELETE FROM waits WHERE id = $1 AND owner = $2', [id, owner]))
    },

    endWaitsOf: (owner) => {
      guard('end waits', () => db.changeSync('DELETE FROM waits WHERE owner = $1', [owner]))
    },

    close: () => guard.close(),
  }
}
