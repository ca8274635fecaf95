/**
 * Checkpoints (the state envelopes) in PostgreSQL: one row per thread in `checkpoints`, replaced
 * by one upsert of every envelope of a round, in one transaction. The staging, `only` and
 * `discard` semantics are the memory store's (memoryCheckpointStore.ts), which the file store
 * keeps too.
 */
import { SpindleError, isSpindleError } from '../../src/base/errors.js'
import { assertThreadId } from '../../src/base/ids.js'
import { upgradeEnvelope } from '../envelope.js'
import type { CheckpointStore, StagedEnvelope, StateEnvelope } from '../types.js'
import { stagedEnvelope } from '../types.js'
import type { PgBridge, Statement } from './bridge.js'
import { lockLeases, notLeasedElsewhere, type PgFence } from './leaseFence.js'

/** Envelopes taken by one sync, by thread. */
type Batch = Map<string, StagedEnvelope>

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
  let staged: Batch = new Map()
  /** Threads this process lost (`discard`): a sync under way publishes nothing of theirs. */
  const dropped = new Set<string>()
  /** Syncs without `only`, one after another. */
  let chain: Promise<void> = Promise.resolve()
  /** The batch holding each thread's newest envelope until it has published it. */
  const owners = new Map<string, Batch>()

  /** Takes every staged envelope, or those of `only` (from a sync under way if it has them). */
  function take(only: ReadonlySet<string> | undefined): Batch {
    let batch: Batch
    if (only === undefined) {
      batch = staged
      staged = new Map()
    } else {
      batch = new Map()
      for (const id of only) {
        // Taken from a sync under way that has not published it: that one then leaves it alone.
        const envelope = staged.get(id) ?? owners.get(id)?.get(id)
        if (envelope === undefined) continue
        staged.delete(id)
        batch.set(id, envelope)
      }
    }
    for (const id of batch.keys()) owners.set(id, batch)
    return batch
  }

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

  async function publish(batch: Batch, beforePublish: (() => Promise<unknown>) | undefined): Promise<void> {
    const ours = (id: string): boolean => owners.get(id) === batch
    const lost: string[] = []
    try {
      await beforePublish?.()
      const envelopes: Array<[string, StateEnvelope]> = []
      for (const [id, envelope] of batch) if (ours(id) && !dropped.has(id)) envelopes.push([id, stagedEnvelope(envelope)])
      if (envelopes.length > 0) {
        let results
        try {
          results = await db.run(round(envelopes, fence?.owner() ?? null), { tx: true })
        } catch (error) {
          throw failure(error, envelopes.length)
        }
        const written = new Set(results[results.length - 1]!.map((row) => row.thread_id as string))
        for (const [id] of envelopes) if (!written.has(id)) lost.push(id)
      }
    } catch (error) {
      // Nothing published; the batch goes back unless a newer envelope was staged or taken meanwhile.
      for (const [id, envelope] of batch) if (ours(id) && !staged.has(id) && !dropped.has(id)) staged.set(id, envelope)
      throw error
    } finally {
      for (const id of batch.keys()) if (ours(id)) owners.delete(id)
    }
    for (const id of lost) fence?.fenced?.(id)
  }

  return {
    stage(threadId, envelope) {
      assertThreadId(threadId)
      dropped.delete(threadId)
      staged.set(threadId, envelope)
    },

    discard(threadId) {
      staged.delete(threadId)
      dropped.add(threadId)
    },

    sync(options = {}) {
      const { only } = options
      if (only) return publish(take(only), options.beforePublish)
      // A batch waiting on beforePublish is never overtaken by a later batch of everything.
      const run = chain.then(() => publish(take(undefined), options.beforePublish))
      chain = run.catch(() => {})
      return run
    },

    load(threadId) {
      assertThreadId(threadId)
      const rows = db.querySync('SELECT envelope FROM checkpoints WHERE thread_id = $1', [threadId])
      if (rows.length === 0) return null
      const text = rows[0]!.envelope as string
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
