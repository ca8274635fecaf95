/**
 * Tables of the registry, its event log and the recovery store (see schema.ts).
 *
 * Documents are `json`, not `jsonb`: they are stored and read whole, never queried inside, and
 * `json` keeps them as written (key order, as SQLite's text cells did; a "\u0000" escape, which
 * jsonb refuses), with no conversion on read. Thread ids collate as "C" so that `ORDER BY
 * created_at, id` is byte order, as in SQLite, whatever the database's locale.
 */

const STATUSES = `'created','running','suspended','completed','error','cancelled','continued'`
const SUSPEND_REASONS = `'limit','error','context_length','budget','crash_loop','tool_approval','waiting'`

export const REGISTRY_TABLES: readonly string[] = [
  // parent_id has no foreign key on purpose: after damage a parent row may be missing, and a
  // child must still be registrable (and listable) without it. recoveries / recovery_seq: the
  // crash-loop count, kept here because the process that would remember dies with the loop.
  `CREATE TABLE threads (
     id text COLLATE "C" PRIMARY KEY,
     directive_name text NOT NULL,
     directive json NOT NULL,
     parent_id text COLLATE "C" NULL,
     previous_thread_id text COLLATE "C" NULL,
     status text NOT NULL CHECK (status IN (${STATUSES})),
     suspend_reason text NULL CHECK (suspend_reason IN (${SUSPEND_REASONS})),
     nonce text NOT NULL,
     created_at bigint NOT NULL,
     updated_at bigint NOT NULL,
     cost json NULL,
     result json NULL,
     error json NULL,
     recoveries integer NOT NULL DEFAULT 0,
     recovery_seq bigint NULL
   )`,
  // Each in the listing order, so listing by status, children and chains read an index in order.
  `CREATE INDEX threads_status ON threads (status, created_at, id)`,
  `CREATE INDEX threads_parent ON threads (parent_id, created_at, id)`,
  `CREATE INDEX threads_previous ON threads (previous_thread_id, created_at, id)`,
  // Recovery reads the counts that are not the initial one: few rows, read at every start.
  `CREATE INDEX threads_recovering ON threads (id) WHERE recoveries <> 0 OR recovery_seq IS NOT NULL`,
  // Fencing: the largest lease token each thread was claimed with. A narrow table of its own, as in
  // SQLite (a recovery claims thousands of threads at once). Token 0 means "never claimed": every
  // registered thread has a row from its registration on, so a publishing transaction always has
  // a row to lock against a claim (see pgRegistry.ts). A thread may be claimed before its row exists.
  `CREATE TABLE lease_claims (thread_id text COLLATE "C" PRIMARY KEY, token bigint NOT NULL)`,
]

export const EVENT_TABLES: readonly string[] = [
  // Ids are handed out by event_counter, not by a sequence: see pgEventLog.ts.
  `CREATE TABLE events (
     id bigint PRIMARY KEY,
     thread_id text NOT NULL,
     type text NOT NULL,
     at bigint NOT NULL,
     data json NOT NULL
   )`,
  `CREATE INDEX events_at ON events (at)`,
  // One row: the last event id handed out. Outlives pruning, so a log pruned to nothing still says how far it had got.
  `CREATE TABLE event_counter (one boolean PRIMARY KEY DEFAULT true CHECK (one), last_id bigint NOT NULL)`,
  `INSERT INTO event_counter (last_id) VALUES (0)`,
]

export const RECOVERY_TABLES: readonly string[] = [
  `CREATE TABLE recovery_decisions (
     task_key text NOT NULL,
     reason_code text NOT NULL,
     handler text NOT NULL,
     attempt integer NOT NULL,
     action text NOT NULL CHECK (action IN ('retry','escalate','human')),
     recovery_state text NOT NULL CHECK (recovery_state IN ('recovering','escalated_to_human')),
     cooldown_until bigint NOT NULL,
     failed_thread_id text NOT NULL,
     next_thread_id text NULL,
     updated_at bigint NOT NULL,
     PRIMARY KEY (task_key, reason_code)
   )`,
  `CREATE INDEX recovery_decisions_pending ON recovery_decisions (cooldown_until) WHERE next_thread_id IS NULL AND action <> 'human'`,
  `CREATE TABLE recovery_degrade (task_key text PRIMARY KEY, step integer NOT NULL, updated_at bigint NOT NULL)`,
]
