/**
 * Checkpoints (the state envelopes) in PostgreSQL: one row per thread in `checkpoints`, replaced
 * by one upsert of every envelope of a round, in one transaction. Staging, `only` and `discard`
 * are the memory store's (checkpointStaging.ts).
 */
import { SpindleError, isSpindleError } from '../../src/base/errors.js'
import { assertThreadId } from '../../src/base/ids.js'
import { CheckpointStaging } from '../checkpointStaging.js'
import { upgradeEnvelope } from '../envelope.js'
import type { CheckpointStore, StagedEnvelope, StateEnvelope } from '../types.js'
import { stagedEnvelope } from '../types.js'
import type { PgBridge, Statement } from './bridge.js'
import { lockLeases, notLeasedElsewhere, type PgFence } from './leaseFence.js'

/** The connection the writes run on; a read follows them there. */
const LANE = 'checkpoints'

const ROWS = `unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[]) AS c(thread_id, status, seq, saved_at, envelope)`

function upsertSql(fenced: boolean): string {
  return `INSERT INTO checkpoints (thread_id, status, seq, saved_at, envelope)
SELECT c.thread_id, c.status, c.seq, c.saved_at, c.envelope FROM ${ROWS}${fenced ? ` WHERE ${notLeasedElsewhere('c', 6)}` : ''}
ON CONFLICT (thread_id) DO UPDATE SET status = EXCLUDED.status, seq = EXCLUDED.seq, saved_at = EXCLUDED.saved_at, envelope = EXCLUDED.envelope
RETURNING thread_id`
}

const UPSERT = upsertSql(false)
const UPSERT_FENCED = upsertSql(true)

/**
 * A `CheckpointStore` on a PostgreSQL schema. A sync awaits `beforePublish` (group commit passes
 * the transcript sync) before its transaction begins, so a checkpoint never points past entries
 * that are not durable; it resolves once the transaction committed.
 *
 * Caveats: `discard` keeps a round from writing a thread only until the round's statement is
 * sent (it cannot be taken back from the database connection); from then on the lease fence is
 * what keeps a stale envelope out. A thread whose lease another owner holds is not written, its
 * envelope dropped, and `fence.fenced` told.
 *
 * @param options.db the bridge to the schema (migrated: see schema.ts)
 * @param options.fence the lease fence (see leaseFence.ts)
 * @example
 * const checkpoints = createPgCheckpointStore({ db })
 * checkpoints.stage(id, envelope)
 * await checkpoints.sync()
 * checkpoints.load(id) // a copy of envelope
 */
export function createPgCheckpointStore(options: { db: PgBridge; fence?: PgFence }): CheckpointStore {
  const { db, fence } = options
  const schema = db.schema ?? 'public'
  const where = (threadId: string): string => `postgres:${schema}/${threadId}/checkpoint`
  const staging = new CheckpointStaging()

  function round(envelopes: Array<[string, StateEnvelope]>, owner: string | null): Statement[] {
    envelopes.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    const columns: unknown[][] = [[], [], [], [], []]
    for (const [id, envelope] of envelopes) {
      columns[0]!.push(id)
      columns[1]!.push(envelope.status)
      columns[2]!.push(envelope.transcript.seq)
      columns[3]!.push(envelope.savedAt)
      columns[4]!.push(JSON.stringify(envelope))
    }
    if (owner === null) return [{ sql: UPSERT, params: columns }]
    return [lockLeases(columns[0] as string[]), { sql: UPSERT_FENCED, params: [...columns, owner] }]
  }

  function failure(error: unknown, count: number): unknown {
    if (isSpindleError(error)) return error
    return new SpindleError(
      'STORAGE_FAILED',
      `Could not write the checkpoints of ${count} thread(s) to the database: ${(error as Error)?.message ?? String(error)}. ` +
        'Each keeps its previous checkpoint; the next sync writes them.',
      { cause: error, details: (error as { code?: string })?.code ? { pgCode: (error as { code: string }).code } : {} },
    )
  }

  /** Writes a round's envelopes in one transaction; tells the fence of threads another owner holds. */
  async function write(staged: Array<[string, StagedEnvelope]>): Promise<void> {
    const envelopes = staged.map(([id, envelope]): [string, StateEnvelope] => [id, stagedEnvelope(envelope)])
    let results
    try {
      results = await db.run(round(envelopes, fence?.owner() ?? null), { tx: true, lane: LANE })
    } catch (error) {
      throw failure(error, envelopes.length)
    }
    const written = new Set(results[results.length - 1]!.map((row) => row.thread_id as string))
    for (const [id] of envelopes) if (!written.has(id)) fence?.fenced?.(id)
  }

  return {
    stage(threadId, envelope) {
      assertThreadId(threadId)
      staging.stage(threadId, envelope)
    },

    discard(threadId) {
      staging.discard(threadId)
    },

    sync(options = {}) {
      return staging.sync(options, write)
    },

    load(threadId, read) {
      assertThreadId(threadId)
      let text: string
      if (read) {
        if ('missing' in read) return null
        text = read.bytes.toString('utf8')
      } else {
        // On the lane of the writes: a write under way commits before this reads.
        const rows = db.querySync('SELECT envelope FROM checkpoints WHERE thread_id = $1', [threadId], { lane: LANE })
        if (rows.length === 0) return null
        text = rows[0]!.envelope as string
      }
      let raw: unknown
      try {
        raw = JSON.parse(text)
      } catch (error) {
        throw new SpindleError(
          'STATE_CORRUPT',
          `${where(threadId)} is not valid JSON (${text.length} characters). The thread's transcript still holds its history: ` +
            'a runtime opening the database rebuilds the checkpoint from it.',
          { cause: error, details: { path: where(threadId), threadId } },
        )
      }
      return upgradeEnvelope(raw, where(threadId), threadId)
    },

    list() {
      return db.querySync('SELECT thread_id FROM checkpoints ORDER BY thread_id').map((row) => row.thread_id as string)
    },
  }
}
