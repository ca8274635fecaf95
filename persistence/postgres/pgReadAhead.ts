/**
 * Recovery's read-ahead on PostgreSQL: the checkpoints and transcript tails of many threads with two
 * statements a batch, rather than two a thread. A new worker taking over thousands of threads
 * otherwise waits for a round trip per read, with its event loop held.
 *
 * A batch holds what the stores would read for each thread: its checkpoint's envelope, the
 * transcript lines from the one that checkpoint points at onwards, and its approval requests
 * without a decision. The stores check them as they
 * check what they read themselves (pgCheckpoints.load, pgTranscript.open).
 */
import type { PrefetchedThread, ThreadFileReader, ThreadPrefetch } from '../prefetch.js'
import type { PgBridge, Row } from './bridge.js'

/** Threads a batch: large enough that a round trip is a small share of it, small enough to hold. */
const BATCH = 256

const STATES = 'SELECT thread_id, seq, envelope FROM checkpoints WHERE thread_id = ANY($1::text[])'
const TAILS = `SELECT l.thread_id, l.seq, l.bytes, l.line FROM transcript_lines AS l JOIN checkpoints AS c USING (thread_id)
  WHERE l.thread_id = ANY($1::text[]) AND l.seq >= c.seq ORDER BY l.thread_id, l.seq`
const UNDECIDED = 'SELECT thread_id, request_id FROM approvals WHERE thread_id = ANY($1::text[]) AND decision IS NULL ORDER BY thread_id, request_id'

/** Reads `ids` a batch at a time, as `take` reaches them. */
function prefetch(db: PgBridge, ids: readonly string[]): ThreadPrefetch {
  const order = new Map(ids.map((id, i) => [id, i]))
  let held = new Map<string, PrefetchedThread>()

  function load(from: number): void {
    const batch = ids.slice(from, from + BATCH)
    held = new Map(batch.map((id): [string, PrefetchedThread] => [id, { state: { missing: true }, undecided: [] }]))
    const [states, tails, undecided] = db.transactionSync(() =>
      db.batchSync([
        { sql: STATES, params: [batch] },
        { sql: TAILS, params: [batch] },
        { sql: UNDECIDED, params: [batch] },
      ]),
    )
    for (const row of states!) {
      held.get(row.thread_id as string)!.state = { bytes: Buffer.from(row.envelope as string) }
      held.get(row.thread_id as string)!.transcript = { rows: [], from: Number(row.seq) }
    }
    for (const row of undecided!) held.get(row.thread_id as string)?.undecided?.push(String(row.request_id))
    for (const row of tails!) {
      const read = held.get(row.thread_id as string)?.transcript
      if (read && 'rows' in read) read.rows.push(lineOf(row))
    }
  }

  return {
    take(threadId) {
      const at = order.get(threadId)
      if (at === undefined) return undefined
      // The end of a batch (or a thread taken out of order): the batch from this thread on.
      if (!held.has(threadId)) load(at)
      const read = held.get(threadId)
      held.delete(threadId)
      return read
    },
    close: async () => {
      held = new Map()
    },
  }
}

function lineOf(row: Row): { seq: number; bytes: number; line: string } {
  return { seq: Number(row.seq), bytes: Number(row.bytes), line: row.line as string }
}

/** A reader for `ThreadFolders.readAhead`: nothing to boot, it reads on the bridge's connection. */
export function pgReadAhead(db: PgBridge): ThreadFileReader {
  return { read: (ids) => prefetch(db, ids), cancel: async () => {} }
}
