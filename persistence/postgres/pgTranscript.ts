/**
 * Transcripts in PostgreSQL: one row per entry (`transcript_lines`, holding the entry's JSON line
 * exactly as the file backend writes it) and one per thread for its last entry
 * (`transcript_heads`). Same hashes, same positions (`bytes` counts the lines and newlines a file
 * would hold) and the same error codes as the file backend.
 *
 * `append` only buffers the entry in memory: it is durable once a `sync()` that began after it
 * resolves. A sync writes every buffered entry of every thread in one transaction, with one
 * multi-row INSERT (this is the group commit: one transaction per logged round, however many
 * threads it carries). Syncs run one after another: a round that failed puts its entries back
 * before the next takes them, so a thread's rows never have a gap.
 *
 * Two writers of one thread (a process that stalled past its lease and its successor) never mix
 * their lines: a round moves a thread's head only from the entry its lines chain to, and writes
 * the lines only of the threads whose head it moved. The other writer's round finds the head
 * moved, writes nothing of that thread, and is told through `fence.fenced`; with `fence.owner`,
 * a round also skips the threads another owner leases (see leaseFence.ts).
 */
import { SpindleError, isSpindleError } from '../../src/base/errors.js'
import { assertThreadId } from '../../src/base/ids.js'
import { entryHash } from '../transcriptHash.js'
import { encodeEntry } from '../transcriptLines.js'
import type { TranscriptEntry, TranscriptOpenResult, TranscriptPosition, TranscriptStore } from '../types.js'
import { EMPTY_POSITION } from '../types.js'
import type { PrefetchedTranscript } from '../prefetch.js'
import type { PgBridge, Row, Statement } from './bridge.js'
import { lockLeases, notLeasedElsewhere, type PgFence } from './leaseFence.js'

/** The connection the rounds run on (see bridge.ts): its own, so a round never holds up a synchronous statement. */
export const TRANSCRIPT_LANE = 'transcripts'

/** An entry as its row holds it. */
interface Line {
  seq: number
  /** The transcript's length up to and including this line's newline. */
  bytes: number
  /** The entry's JSON line, without its newline. */
  line: string
}

/** An appended entry not written yet. */
interface Appended extends Line {
  ts: string
  type: string
  hash: string
}

/** A thread's entries not written yet, and the entry they chain to. */
interface Run {
  from: { seq: number; hash: string }
  lines: Appended[]
}

export interface PgTranscriptStore extends TranscriptStore {
  /**
   * Bytes the thread's transcript holds — its rows and the entries this process appended and has
   * not written yet — without reading it; null when it has none.
   */
  storedBytes(threadId: string): number | null
}

function notOpen(threadId: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `The transcript of ${threadId} is not open: open it before appending to it.`, {
    details: { threadId },
  })
}

// Heads move only from the entry a thread's lines chain to (an UPDATE waits for a concurrent one
// and checks its condition again on the row it left), or are created for a thread's first lines
// (a concurrent creation makes this one do nothing). Lines are written for the threads whose head
// moved, and the statement returns those threads.
const HEADS = `unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bigint[]) AS b(thread_id, prev_seq, prev_hash, seq, hash, bytes)`
const LINES = `unnest($7::text[], $8::bigint[], $9::text[], $10::text[], $11::bigint[], $12::text[]) AS l(thread_id, seq, ts, type, bytes, line)`

function writeSql(fenced: boolean): string {
  return `WITH batch AS (SELECT * FROM ${HEADS}${fenced ? ` WHERE ${notLeasedElsewhere('b', 13)}` : ''}),
moved AS (
  UPDATE transcript_heads h SET seq = b.seq, hash = b.hash, bytes = b.bytes FROM batch b
  WHERE b.prev_seq > 0 AND h.thread_id = b.thread_id AND h.seq = b.prev_seq AND h.hash = b.prev_hash
  RETURNING h.thread_id
),
started AS (
  INSERT INTO transcript_heads (thread_id, seq, hash, bytes) SELECT thread_id, seq, hash, bytes FROM batch WHERE prev_seq = 0
  ON CONFLICT (thread_id) DO NOTHING
  RETURNING thread_id
),
won AS (SELECT thread_id FROM moved UNION ALL SELECT thread_id FROM started),
written AS (
  INSERT INTO transcript_lines (thread_id, seq, ts, type, bytes, line)
  SELECT l.thread_id, l.seq, l.ts, l.type, l.bytes, l.line FROM ${LINES} WHERE l.thread_id IN (SELECT thread_id FROM won)
)
SELECT thread_id FROM won`
}

const WRITE = writeSql(false)
const WRITE_FENCED = writeSql(true)

/**
 * A `TranscriptStore` on a PostgreSQL schema (see the file comment).
 *
 * `read` returns the thread's rows followed by the entries this process appended and has not
 * written yet (open or closed here). `close` keeps a thread's unwritten entries for the next
 * sync; `closeAll` writes every unwritten entry before it returns (one transaction).
 *
 * Caveats: a thread opened and closed without an entry leaves no row (`read` then finds no
 * transcript, where the file backend finds an empty file). Entries of a thread fenced off are
 * dropped, with those it appends until it is closed and opened again.
 *
 * @param options.db the bridge to the schema (migrated: see schema.ts)
 * @param options.fence the lease fence (see leaseFence.ts); without it only the heads fence
 * @example
 * const transcripts = createPgTranscriptStore({ db })
 * transcripts.open('research-3f9k2m1x0q7a')
 * transcripts.append('research-3f9k2m1x0q7a', 'START', null)
 * await transcripts.sync()
 * @see createJsonlTranscriptStore for the file backend.
 */
export function createPgTranscriptStore(options: { db: PgBridge; fence?: PgFence }): PgTranscriptStore {
  const { db, fence } = options
  const schema = db.schema ?? 'public'
  const where = (threadId: string): string => `postgres:${schema}/${threadId}/transcript`
  /** Threads open here, and where each is. */
  const positions = new Map<string, TranscriptPosition>()
  /** Entries appended and not taken by a sync yet. */
  let buffered = new Map<string, Run>()
  /** Entries the sync under way is writing. */
  let writing: Map<string, Run> | null = null
  /** Threads another writer has: what this process appends to them is dropped until it opens them again. */
  const fenced = new Set<string>()
  let chain: Promise<void> = Promise.resolve()

  function corrupt(threadId: string, message: string, details: Record<string, unknown> = {}): SpindleError {
    const path = where(threadId)
    return new SpindleError('TRANSCRIPT_CORRUPT', `The transcript ${path} ${message}`, { details: { path, threadId, ...details } })
  }

  function broken(threadId: string, seq: number, reason: string): SpindleError {
    const path = where(threadId)
    return new SpindleError(
      'TRANSCRIPT_CHAIN_BROKEN',
      `The transcript ${path} is damaged at seq ${seq}: ${reason}. Entries before it are intact; ` +
        `inspect its rows (SELECT line FROM transcript_lines WHERE thread_id = '${threadId}' ORDER BY seq) or restore them from a backup.`,
      { details: { path, seq, reason } },
    )
  }

  /** The thread's rows from `fromSeq` on, then its unwritten entries past them. */
  function linesOf(threadId: string, fromSeq: number, stored?: readonly Line[]): Line[] {
    const rows = stored ? [...stored] : (db.querySync('SELECT seq, bytes, line FROM transcript_lines WHERE thread_id = $1 AND seq >= $2 ORDER BY seq', [threadId, fromSeq]) as unknown as Line[])
    // A round under way (on its own connection) may have committed before this read or not: until
    // its reply is handled its entries are in `writing` as well, and those the read found are skipped.
    const last = rows.length > 0 ? rows[rows.length - 1]!.seq : fromSeq - 1
    for (const run of [writing?.get(threadId), buffered.get(threadId)]) {
      for (const line of run?.lines ?? []) if (line.seq > last && line.seq >= fromSeq) rows.push(line)
    }
    return rows
  }

  /**
   * Verifies `lines` as the file backend verifies a transcript's bytes: the first must be the
   * entry `start` names (when it names one), then each entry the next seq, hashed over the entry
   * before it and its own seq, ts, type and data as parsed back.
   */
  function verify(threadId: string, lines: readonly Line[], start: TranscriptPosition): { entries: TranscriptEntry[]; position: TranscriptPosition } {
    let position: TranscriptPosition = { ...EMPTY_POSITION }
    let i = 0
    if (start.seq > 0) {
      const anchor = lines[0]
      if (!anchor || anchor.seq !== start.seq) {
        throw corrupt(
          threadId,
          `holds no entry ${start.seq}, but state.json says it holds ${start.seq} entries: its rows were deleted, or the database was restored from ` +
            'an older backup. Restore the rows from a backup; without them the thread cannot be rebuilt.',
          { seq: start.seq },
        )
      }
      let hash: unknown
      try {
        hash = (JSON.parse(anchor.line) as { hash?: unknown }).hash
      } catch {
        throw broken(threadId, start.seq, 'the line is not valid JSON')
      }
      if (hash !== start.hash) throw corrupt(threadId, `does not match state.json at entry ${start.seq}.`, { seq: start.seq })
      position = { seq: start.seq, hash: start.hash, bytes: Number(anchor.bytes) }
      i = 1
    }
    const entries: TranscriptEntry[] = []
    for (; i < lines.length; i++) {
      const row = lines[i]!
      const expected = position.seq + 1
      let entry: TranscriptEntry
      try {
        entry = JSON.parse(row.line) as TranscriptEntry
      } catch {
        throw broken(threadId, expected, 'the line is not valid JSON')
      }
      if (typeof entry !== 'object' || entry === null || entry.seq !== expected || Number(row.seq) !== expected) {
        throw broken(threadId, expected, `expected seq ${expected}, found ${JSON.stringify((entry as { seq?: unknown } | null)?.seq)} in row ${row.seq}`)
      }
      if (entry.hash !== entryHash(position.hash, entry.seq, entry.ts, entry.type, entry.data)) {
        throw broken(threadId, expected, 'its hash does not match its content and the entry before it')
      }
      entries.push(entry)
      position = { seq: expected, hash: entry.hash, bytes: position.bytes + Buffer.byteLength(row.line) + 1 }
    }
    return { entries, position }
  }

  /** Every buffered entry, but those of fenced threads (dropped). */
  function take(except?: ReadonlyMap<string, Run> | null): Map<string, Run> {
    const batch = new Map<string, Run>()
    for (const [id, run] of buffered) {
      if (fenced.has(id)) buffered.delete(id)
      else if (!except?.has(id)) {
        batch.set(id, run)
        buffered.delete(id)
      }
    }
    return batch
  }

  /** A round failed: its entries go back, before any appended since. */
  function putBack(batch: Map<string, Run>): void {
    for (const [id, run] of batch) {
      if (fenced.has(id)) continue
      const later = buffered.get(id)
      buffered.set(id, later ? { from: run.from, lines: run.lines.concat(later.lines) } : run)
    }
  }

  /** The round's statements: the lease rows locked (with an owner), then the write. */
  function round(batch: Map<string, Run>, owner: string | null): Statement[] {
    const ids = [...batch.keys()].sort()
    const heads: unknown[][] = [[], [], [], [], [], []]
    const lines: unknown[][] = [[], [], [], [], [], []]
    for (const id of ids) {
      const run = batch.get(id)!
      const last = run.lines[run.lines.length - 1]!
      heads[0]!.push(id)
      heads[1]!.push(run.from.seq)
      heads[2]!.push(run.from.hash)
      heads[3]!.push(last.seq)
      heads[4]!.push(last.hash)
      heads[5]!.push(last.bytes)
      for (const line of run.lines) {
        lines[0]!.push(id)
        lines[1]!.push(line.seq)
        lines[2]!.push(line.ts)
        lines[3]!.push(line.type)
        lines[4]!.push(line.bytes)
        lines[5]!.push(line.line)
      }
    }
    if (owner === null) return [{ sql: WRITE, params: [...heads, ...lines] }]
    return [lockLeases(ids), { sql: WRITE_FENCED, params: [...heads, ...lines, owner] }]
  }

  /** The round committed: the threads it did not write are another writer's now. */
  function settle(batch: Map<string, Run>, rows: readonly Row[]): void {
    const won = new Set(rows.map((row) => row.thread_id as string))
    const lost: string[] = []
    for (const id of batch.keys()) {
      if (won.has(id)) continue
      // Entries appended since chain to the ones refused: they go too.
      buffered.delete(id)
      if (!fenced.has(id)) lost.push(id)
      fenced.add(id)
    }
    for (const id of lost) fence?.fenced?.(id)
  }

  function failure(error: unknown, batch: Map<string, Run>): unknown {
    if (isSpindleError(error)) return error
    return new SpindleError(
      'STORAGE_FAILED',
      `Could not write the transcript entries of ${batch.size} thread(s) to the database: ${(error as Error)?.message ?? String(error)}. ` +
        'Nothing of the round was written; the entries are kept and the next sync writes them.',
      { cause: error, details: { threadIds: [...batch.keys()].slice(0, 20), ...((error as { code?: string })?.code ? { pgCode: (error as { code: string }).code } : {}) } },
    )
  }

  async function flush(): Promise<void> {
    const batch = take()
    if (batch.size === 0) return
    writing = batch
    let rows: Row[]
    try {
      const results = await db.run(round(batch, fence?.owner() ?? null), { tx: true, lane: TRANSCRIPT_LANE })
      rows = results[results.length - 1]!
    } catch (error) {
      putBack(batch)
      throw failure(error, batch)
    } finally {
      writing = null
    }
    settle(batch, rows)
  }

  return {
    open(threadId: string, from?: TranscriptPosition, read?: PrefetchedTranscript): TranscriptOpenResult {
      assertThreadId(threadId)
      const already = positions.get(threadId)
      if (already) return { position: { ...already }, tail: [], torn: null }
      // Opened again after it was fenced off: it goes on from what is stored.
      if (fenced.delete(threadId)) buffered.delete(threadId)
      const start = from ?? EMPTY_POSITION
      // Rows read ahead from where this open starts serve it (recovery: see pgReadAhead.ts).
      const stored = read && 'rows' in read && read.from === start.seq ? read.rows : undefined
      const { entries, position } = verify(threadId, linesOf(threadId, start.seq, stored), start)
      positions.set(threadId, position)
      return { position: { ...position }, tail: entries, torn: null }
    },

    append(threadId: string, type: string, data: unknown, ts: Date = new Date()): TranscriptEntry {
      const position = positions.get(threadId)
      if (!position) throw notOpen(threadId)
      const { entry, line } = encodeEntry(position, type, data, ts)
      const bytes = position.bytes + Buffer.byteLength(line)
      let run = buffered.get(threadId)
      if (!run) buffered.set(threadId, (run = { from: { seq: position.seq, hash: position.hash }, lines: [] }))
      run.lines.push({ seq: entry.seq, ts: entry.ts, type, hash: entry.hash, bytes, line: line.slice(0, -1) })
      position.seq = entry.seq
      position.hash = entry.hash
      position.bytes = bytes
      return entry
    },

    position(threadId: string): TranscriptPosition {
      const position = positions.get(threadId)
      if (!position) throw notOpen(threadId)
      return { ...position }
    },

    // Every buffered entry is written, whatever `files` or `threads` ask: one transaction serves all.
    sync(): Promise<void> {
      const run = chain.then(flush)
      chain = run.catch(() => {})
      return run
    },

    read(threadId: string): { entries: TranscriptEntry[]; torn: { bytes: number } | null } {
      assertThreadId(threadId)
      const lines = linesOf(threadId, 0)
      if (lines.length === 0 && !positions.has(threadId)) throw corrupt(threadId, 'does not exist. Check the thread id.')
      return { entries: verify(threadId, lines, EMPTY_POSITION).entries, torn: null }
    },

    storedBytes(threadId: string): number | null {
      const open = positions.get(threadId)
      if (open) return open.bytes
      const last = buffered.get(threadId)?.lines.at(-1) ?? writing?.get(threadId)?.lines.at(-1)
      if (last) return last.bytes
      const rows = db.querySync('SELECT bytes FROM transcript_heads WHERE thread_id = $1', [threadId])
      return rows.length > 0 ? Number(rows[0]!.bytes) : null
    },

    close(threadId: string): void {
      positions.delete(threadId)
      if (fenced.has(threadId)) buffered.delete(threadId)
    },

    closeAll(): void {
      positions.clear()
      // Threads a sync under way is writing keep their later entries for the next sync: written
      // now, they would land behind a round that may yet fail.
      const batch = take(writing)
      if (batch.size === 0) return
      let rows: Row[]
      try {
        const results = db.transactionSync(() => db.batchSync(round(batch, fence?.owner() ?? null)))
        rows = results[results.length - 1]!
      } catch (error) {
        putBack(batch)
        throw failure(error, batch)
      }
      settle(batch, rows)
    },
  }
}
