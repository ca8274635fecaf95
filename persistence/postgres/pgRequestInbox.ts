/**
 * The request inbox in PostgreSQL, for runtime processes on many hosts that share one database and
 * no directory: cancel and resume requests and approval answers left for a thread by whoever
 * decides (the CLI, the inspector, a runtime cancelling a thread another process runs), claimed by
 * the process that runs or watches the thread; the approval requests and decisions and recovery
 * escalations the runtime leaves for people; and the request log. Tables: inboxTables.ts.
 *
 * - Leaving a request is one statement: under the inbox's advisory lock it takes the next id, writes
 *   the row (replacing a request of the same kind still waiting) and sends `NOTIFY spindle_requests`
 *   with the thread id as payload, delivered when it commits. A later part listens there to wake
 *   the right worker at once; the poll (`changed()`) stays the safety net. The channel is one per
 *   database, not per schema: a listener may hear ids of another schema's threads, which costs it
 *   one look and never acts on anything.
 * - `changed()` reads the rows past the last id it saw. The lock makes ids commit in the order they
 *   were taken (a leave takes its id only after the previous holder committed), so a request
 *   committed after a read has a larger id than any that read saw: nothing is missed, and `missed`
 *   is never said. The first call names every thread with a request waiting.
 * - A claim is `UPDATE … SET claimed_by = owner WHERE … claimed_by IS NULL RETURNING`: of two
 *   processes claiming one request, the second waits for the first's row lock, finds the row
 *   claimed on its recheck, and gets nothing.
 * - A process holding claims beats in `inbox_owners` (with each claim, and at each `changed()` once
 *   a third of the claim TTL has passed); `abandoned()` takes over the cancel and resume claims of
 *   owners silent for a TTL. A heartbeat of its own, not the `leases` table: a process can be alive
 *   holding no lease (a host process, a worker between threads, one refusing a stray cancel), so
 *   "no lease" does not mean dead; and it keeps this store free of another store's columns and
 *   clocks. Times are the database's clock, one for every host, unless `now` is given.
 */
import { randomBytes } from 'node:crypto'
import os from 'node:os'
import { SpindleError, describeError, isSpindleError } from '../../src/base/errors.js'
import { assertThreadId, isThreadId } from '../../src/base/ids.js'
import { assertRequestId } from '../requestFiles.js'
import type { ClaimedRequest, InboxRequest, RequestInbox, RequestKind } from '../types.js'
import type { PgBridge, Row } from './bridge.js'

/**
 * The NOTIFY channel a left request is announced on, `spindle_requests_<schema>` (so installations
 * in two schemas of one database do not wake each other); the payload is the thread's id.
 */
export function requestsChannel(schema: string): string {
  return `spindle_requests_${schema}`
}

/** How long a claim outlives its owner's last heartbeat before it is taken over: the lease threshold's default. */
export const DEFAULT_CLAIM_TTL_MS = 60_000

export interface PgRequestInboxOptions {
  db: PgBridge
  /** Who claims: this process. @default `<host>:<pid>:<random>`, the form the lease store gives its owners. */
  owner?: string
  /** How long a claim may go without its owner's heartbeat before another process takes it over (ms). @default DEFAULT_CLAIM_TTL_MS */
  claimTtlMs?: number
  /** The clock of requests, claims and heartbeats (ms). @default the database's: one clock for every host. */
  now?: () => number
  /** A problem that stopped no request: a heartbeat that could not be written. */
  onProblem(error: unknown, threadId?: string): void
}

/** The database's clock in ms, unless the parameter gives one. */
const at = (n: number): string => `coalesce($${n}::bigint, (extract(epoch from clock_timestamp()) * 1000)::bigint)`

/** The row a claimed or stray request is, which `honour` and `refuse` act on. */
const ROW = Symbol('inboxRow')
type Held = InboxRequest & { [ROW]?: number }

/** Where a request lies, as reports and the request log name it. */
function refOf(threadId: string, kind: RequestKind, requestId: string): string {
  return kind === 'approval' ? `(postgres)/${threadId}/approvals/${requestId}` : `(postgres)/${threadId}/${kind}`
}

/** A lost connection says so; any other failure of a statement is the store's. */
const codeOf = (error: unknown) => (isSpindleError(error) ? error.code : 'STORAGE_FAILED')

function held<T extends InboxRequest>(request: T, row: number): T & { [ROW]: number } {
  return Object.assign(request, { [ROW]: row })
}

export function createPgRequestInbox(options: PgRequestInboxOptions): RequestInbox {
  const { db } = options
  const owner = options.owner ?? `${os.hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`
  const ttl = options.claimTtlMs ?? DEFAULT_CLAIM_TTL_MS
  if (!Number.isInteger(ttl) || ttl <= 0) {
    throw new SpindleError('INVALID_OPTIONS', `claimTtlMs must be a positive integer of ms (got ${String(ttl)}).`, { details: { field: 'claimTtlMs' } })
  }
  const clockParam = (): number | null => (options.now ? options.now() : null)
  const localNow = options.now ?? Date.now
  /** Rows this inbox claimed and has not honoured or refused: while there are any, it beats. */
  const claims = new Set<number>()
  let lastBeat = -Infinity
  /** The largest request id `changed()` has seen; null before its first call. */
  let seen: number | null = null

  function beat(): void {
    lastBeat = localNow()
    try {
      db.execSync(`INSERT INTO inbox_owners (owner, seen_at) VALUES ($1, ${at(2)}) ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at`, [owner, clockParam()])
    } catch (error) {
      options.onProblem(
        new SpindleError(codeOf(error), `Could not record that this process (${owner}) still holds its ${claims.size} claimed request(s): ${describeError(error).message}. Past ${ttl} ms without one, another process takes them over.`, {
          cause: error,
          details: { owner },
        }),
      )
    }
  }

  function leave(threadId: string, kind: RequestKind, body: unknown, requestId?: string): string {
    assertThreadId(threadId)
    const rid = keyOf(kind, requestId)
    db.querySync(
      `WITH turn AS (SELECT pg_advisory_xact_lock(hashtext('spindle.inbox:' || current_schema()))),
            left_request AS (
              INSERT INTO inbox_requests (id, thread_id, kind, request_id, body, left_at)
              SELECT nextval('inbox_request_ids'), $1, $2, $3, $4::jsonb, ${at(5)} FROM turn
              ON CONFLICT (thread_id, kind, request_id) WHERE claimed_by IS NULL AND refused_at IS NULL
              DO UPDATE SET id = excluded.id, body = excluded.body, left_at = excluded.left_at
              RETURNING thread_id)
       SELECT pg_notify('spindle_requests_' || current_schema(), thread_id) FROM left_request`,
      [threadId, kind, rid, JSON.stringify(body ?? null), clockParam()],
    )
    return refOf(threadId, kind, rid)
  }

  /** The request id column of a request of `kind`: the answered request's id, or '' for a cancel or resume. */
  function keyOf(kind: RequestKind, requestId: string | undefined): string {
    if (kind !== 'approval') return ''
    if (requestId === undefined) throw new SpindleError('INVALID_OPTIONS', 'An approval answer names the request it answers (requestId).', { details: { field: 'requestId' } })
    assertRequestId(requestId)
    return requestId
  }

  function claimedFrom(row: Row): ClaimedRequest {
    const threadId = String(row.thread_id)
    const kind = row.kind as RequestKind
    const requestId = String(row.request_id)
    const request: ClaimedRequest = {
      kind,
      threadId,
      ...(kind === 'approval' ? { requestId } : {}),
      ref: refOf(threadId, kind, requestId),
      body: { ok: true, value: row.body },
    }
    claims.add(Number(row.id))
    return held(request, Number(row.id))
  }

  return {
    // Every request comes through leaveRequest, which `changed` reads after: it names them all.
    complete: true,
    hasApproval(threadId, requestId) {
      return db.querySync(`SELECT 1 FROM approvals WHERE thread_id = $1 AND request_id = $2`, [threadId, requestId]).length > 0
    },

    putApprovalRequest(threadId, requestId, request) {
      assertThreadId(threadId)
      assertRequestId(requestId)
      // DO NOTHING: a request is kept as first written, and not written again once decided.
      db.execSync(`INSERT INTO approvals (thread_id, request_id, request, asked_at) VALUES ($1, $2, $3::jsonb, ${at(4)}) ON CONFLICT DO NOTHING`, [
        threadId,
        requestId,
        JSON.stringify(request ?? null),
        clockParam(),
      ])
    },

    putDecision(threadId, requestId, decision) {
      db.execSync(`UPDATE approvals SET decision = $3::jsonb, decided_at = ${at(4)} WHERE thread_id = $1 AND request_id = $2`, [threadId, requestId, JSON.stringify(decision ?? null), clockParam()])
    },

    undecided(threadId) {
      return db.querySync(`SELECT request_id FROM approvals WHERE thread_id = $1 AND decision IS NULL ORDER BY request_id`, [threadId]).map((row) => String(row.request_id))
    },

    putEscalation(threadId, escalation) {
      db.execSync(
        `INSERT INTO inbox_escalations (thread_id, escalation, at) VALUES ($1, $2::jsonb, ${at(3)})
         ON CONFLICT (thread_id) DO UPDATE SET escalation = excluded.escalation, at = excluded.at`,
        [threadId, JSON.stringify(escalation ?? null), clockParam()],
      )
    },

    answerAt(threadId, requestId) {
      assertRequestId(requestId)
      return refOf(threadId, 'approval', requestId)
    },

    askCancel(threadId, request) {
      return leave(threadId, 'cancel', {
        nonce: request.nonce,
        ...(request.reason !== undefined ? { reason: request.reason } : {}),
        ...(request.by !== undefined ? { by: request.by } : {}),
        requestedAt: new Date().toISOString(),
      })
    },

    leaveRequest: leave,

    changed() {
      if (claims.size > 0 && localNow() - lastBeat >= ttl / 3) beat()
      const ids = new Set<string>()
      if (seen === null) {
        // One statement, one snapshot: the largest id, and every thread with a request waiting at it.
        const row = db.querySync(
          `SELECT (SELECT max(id) FROM inbox_requests) AS top,
                  ARRAY(SELECT DISTINCT thread_id FROM inbox_requests WHERE claimed_by IS NULL AND refused_at IS NULL) AS ids`,
        )[0]!
        seen = Number(row.top ?? 0)
        for (const id of row.ids as string[]) ids.add(id)
        return { ids, missed: false }
      }
      const row = db.querySync(
        `SELECT max(id) AS top, array_agg(DISTINCT thread_id) FILTER (WHERE claimed_by IS NULL AND refused_at IS NULL) AS ids
         FROM inbox_requests WHERE id > $1`,
        [seen],
      )[0]!
      if (row.top !== null && row.top !== undefined) seen = Number(row.top)
      for (const id of (row.ids as string[] | null) ?? []) ids.add(id)
      return { ids, missed: false }
    },

    waiting(threadId, kind, requestId) {
      const rid = kind === 'approval' ? (requestId ?? '') : ''
      return db.querySync(`SELECT 1 FROM inbox_requests WHERE thread_id = $1 AND kind = $2 AND request_id = $3 AND claimed_by IS NULL AND refused_at IS NULL`, [threadId, kind, rid]).length > 0
    },

    claim(threadId, kind, requestId) {
      if (kind === 'approval' && requestId === undefined) return null
      const rid = kind === 'approval' ? requestId! : ''
      lastBeat = localNow()
      const rows = db.querySync(
        `WITH clock AS (SELECT ${at(5)} AS now),
              beat AS (INSERT INTO inbox_owners (owner, seen_at) SELECT $4, now FROM clock ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at)
         UPDATE inbox_requests SET claimed_by = $4, claimed_at = (SELECT now FROM clock)
         WHERE thread_id = $1 AND kind = $2 AND request_id = $3 AND claimed_by IS NULL AND refused_at IS NULL
         RETURNING id, thread_id, kind, request_id, body`,
        [threadId, kind, rid, owner, clockParam()],
      )
      return rows.length === 0 ? null : claimedFrom(rows[0]!)
    },

    abandoned() {
      lastBeat = localNow()
      const [taken] = db.batchSync([
        {
          // SKIP LOCKED: of two processes looking at once, each takes over the claims the other is not.
          sql: `WITH clock AS (SELECT ${at(2)} AS now),
                     beat AS (INSERT INTO inbox_owners (owner, seen_at) SELECT $1, now FROM clock ON CONFLICT (owner) DO UPDATE SET seen_at = excluded.seen_at),
                     gone AS (
                       SELECT r.id FROM inbox_requests r, clock
                       WHERE r.kind IN ('cancel', 'resume') AND r.claimed_by IS NOT NULL AND r.claimed_by <> $1 AND r.refused_at IS NULL
                         AND r.claimed_at < clock.now - $3
                         AND NOT EXISTS (SELECT 1 FROM inbox_owners o WHERE o.owner = r.claimed_by AND o.seen_at >= clock.now - $3)
                       FOR UPDATE OF r SKIP LOCKED)
                UPDATE inbox_requests r SET claimed_by = $1, claimed_at = (SELECT now FROM clock)
                FROM gone WHERE r.id = gone.id
                RETURNING r.id, r.thread_id, r.kind, r.request_id, r.body`,
          params: [owner, clockParam(), ttl],
        },
        {
          // Heartbeats of owners long gone and holding nothing: one row per process that ever claimed would pile up.
          sql: `DELETE FROM inbox_owners o WHERE o.seen_at < ${at(1)} - $2 AND NOT EXISTS (SELECT 1 FROM inbox_requests r WHERE r.claimed_by = o.owner)`,
          params: [clockParam(), ttl * 10],
        },
      ])
      // Approval answers are not taken over, as with files: the transcript has the decision if one was made.
      return taken!.sort((a, b) => Number(a.id) - Number(b.id)).map(claimedFrom)
    },

    honour(request) {
      const row = (request as Held)[ROW]
      if (row === undefined) return
      claims.delete(row)
      // Only while it is this process's: a claim taken over while this one stalled is its new owner's.
      db.execSync(`DELETE FROM inbox_requests WHERE id = $1 AND claimed_by = $2`, [row, owner])
    },

    refuse(request) {
      const row = (request as Held)[ROW]
      if (row === undefined) return null
      claims.delete(row)
      // Kept, with whoever claimed it, as a refused file is; a stray is refused only while it still waits.
      const rows = db.querySync(
        `UPDATE inbox_requests SET refused_at = ${at(3)}
         WHERE id = $1 AND refused_at IS NULL AND (claimed_by = $2 OR claimed_by IS NULL) RETURNING id`,
        [row, owner, clockParam()],
      )
      return rows.length === 0 ? null : `${request.ref}.refused-${row}`
    },

    strayCancels(passOver) {
      const found: InboxRequest[] = []
      for (const row of db.querySync(`SELECT id, thread_id FROM inbox_requests WHERE kind = 'cancel' AND claimed_by IS NULL AND refused_at IS NULL ORDER BY thread_id`)) {
        const threadId = String(row.thread_id)
        if (passOver(threadId)) continue
        // A row put there by hand may name no thread spindle could have made: refused as naming none.
        found.push(held({ kind: 'cancel', threadId: isThreadId(threadId) ? threadId : null, ref: refOf(threadId, 'cancel', '') }, Number(row.id)))
      }
      return found
    },

    strayAnswers(threadId, openRequest) {
      const rows = db.querySync(
        `SELECT r.id, r.request_id, a.decision IS NOT NULL AS decided, a.request_id IS NOT NULL AS asked
         FROM inbox_requests r LEFT JOIN approvals a ON a.thread_id = r.thread_id AND a.request_id = r.request_id
         WHERE r.thread_id = $1 AND r.kind = 'approval' AND r.claimed_by IS NULL AND r.refused_at IS NULL AND r.request_id <> coalesce($2::text, '')
         ORDER BY r.request_id`,
        [threadId, openRequest],
      )
      const found: Array<InboxRequest & { decided: boolean }> = []
      for (const row of rows) {
        // An open request this process does not know of (another process watches it): its answer is that one's.
        if (!row.decided && row.asked) continue
        const requestId = String(row.request_id)
        found.push(held({ kind: 'approval', threadId, requestId, ref: refOf(threadId, 'approval', requestId), decided: Boolean(row.decided) }, Number(row.id)))
      }
      return found
    },

    log(line) {
      const when = Date.parse(line.at)
      try {
        db.execSync(`INSERT INTO inbox_log (at, kind, thread_id, ref, outcome, reason, kept_as) VALUES (${at(1)}, $2, $3, $4, $5, $6, $7)`, [
          Number.isFinite(when) ? when : null,
          line.kind,
          line.threadId,
          line.file,
          line.outcome,
          line.reason,
          line.keptAs ?? null,
        ])
        return null
      } catch (error) {
        return new SpindleError(codeOf(error), `Did not log the ${line.outcome} ${line.kind} request ${line.file}: ${describeError(error).message}. The request itself was ${line.outcome}.`, {
          cause: error,
          details: { threadId: line.threadId },
        })
      }
    },

    approvals(threadId) {
      return db
        .querySync(`SELECT request_id, request, decision FROM approvals WHERE thread_id = $1 ORDER BY request_id`, [threadId])
        .map((row) => ({ requestId: String(row.request_id), request: row.request ?? null, decision: row.decision ?? null }))
    },

    unclaimed(threadId) {
      return db
        .querySync(`SELECT kind, request_id, body FROM inbox_requests WHERE thread_id = $1 AND claimed_by IS NULL AND refused_at IS NULL ORDER BY id`, [threadId])
        .map((row) => {
          const kind = row.kind as RequestKind
          const requestId = String(row.request_id)
          return { kind, threadId, ...(kind === 'approval' ? { requestId } : {}), ref: refOf(threadId, kind, requestId), body: { ok: true as const, value: row.body } }
        })
    },
  }
}
