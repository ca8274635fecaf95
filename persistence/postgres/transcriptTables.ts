/**
 * Tables of the transcript and checkpoint stores (see schema.ts).
 *
 * Transcript lines and checkpoint envelopes are kept as text, not jsonb: a line's hash covers its
 * JSON exactly as written, which jsonb would not give back (it reorders keys), and jsonb refuses
 * the escape \u0000, which a tool's output can hold — one such line would fail every round of
 * every thread. The columns beside them are for queries and for the chain's bookkeeping.
 */
export const TRANSCRIPT_TABLES: readonly string[] = [
  // One row per entry. `line` is the entry's JSON line without its newline, byte for byte what
  // the file backend writes; `bytes` is the length of the transcript up to and including this
  // line's newline, so positions mean what they mean on files.
  `CREATE TABLE transcript_lines (
    thread_id text NOT NULL,
    seq bigint NOT NULL,
    ts text NOT NULL,
    type text NOT NULL,
    bytes bigint NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (thread_id, seq)
  )`,
  // The last entry of each thread. A write moves it only from the position it chains to, so two
  // writers of one thread (a stalled process and its successor) serialise on this row and the
  // second finds it moved: its lines are refused whole, never interleaved with the first's.
  `CREATE TABLE transcript_heads (
    thread_id text PRIMARY KEY,
    seq bigint NOT NULL,
    hash text NOT NULL,
    bytes bigint NOT NULL
  )`,
]

export const CHECKPOINT_TABLES: readonly string[] = [
  // `envelope` is the state envelope's JSON; status and seq repeat what it says, for queries.
  `CREATE TABLE checkpoints (
    thread_id text PRIMARY KEY,
    status text NOT NULL,
    seq bigint NOT NULL,
    saved_at text NOT NULL,
    envelope text NOT NULL
  )`,
]
