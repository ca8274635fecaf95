/**
 * Tables of the request inbox (see schema.ts and pgRequestInbox.ts). Thread ids are `COLLATE "C"`,
 * as in the other stores' tables: lists come back in byte order whatever the database's collation.
 *
 * `inbox_requests` — requests left for a thread from outside the process that runs it (cancel,
 * resume, an approval answer), one row per request:
 *   - `id bigint`: from `inbox_request_ids`, taken under the inbox's advisory lock when the request
 *     is left (again when a waiting one is replaced), so ids commit in increasing order and
 *     `changed()` reads "everything past the last id seen" without missing a late commit
 *   - `request_id`: the approval request an answer answers; '' for a cancel or a resume
 *   - `body jsonb`: what the writer left (`{ nonce, reason?, by? }`, `{ approved, … }`)
 *   - waiting while `claimed_by` and `refused_at` are null; claimed: `claimed_by` is the claiming
 *     process (an inbox `owner`), `claimed_at` when (ms, the database's clock); carried out: the
 *     row is deleted; refused: `refused_at` is set and the row stays, as a refused file is kept
 *   - at most one waiting row per thread, kind and request id: a new one replaces it
 * `inbox_owners` — the heartbeat of each process holding claims (`seen_at`, ms): a claim whose
 *   owner has not beaten for a claim TTL is abandoned, and another process takes it over.
 * `approvals` — approval requests the runtime left for people, and their decisions.
 * `inbox_escalations` — the last recovery escalation of each thread.
 * `inbox_log` — the request log: what happened to each request (honoured or refused, why).
 */
export const INBOX_TABLES: readonly string[] = [
  `CREATE SEQUENCE inbox_request_ids`,
  `CREATE TABLE inbox_requests (
     id bigint PRIMARY KEY,
     thread_id text COLLATE "C" NOT NULL,
     kind text NOT NULL CHECK (kind IN ('cancel', 'resume', 'approval')),
     request_id text COLLATE "C" NOT NULL DEFAULT '' CHECK ((kind = 'approval') = (request_id <> '')),
     body jsonb NOT NULL,
     left_at bigint NOT NULL,
     claimed_by text,
     claimed_at bigint,
     refused_at bigint
   )`,
  `CREATE UNIQUE INDEX inbox_requests_waiting ON inbox_requests (thread_id, kind, request_id) WHERE claimed_by IS NULL AND refused_at IS NULL`,
  `CREATE INDEX inbox_requests_claimed ON inbox_requests (claimed_at) WHERE claimed_by IS NOT NULL AND refused_at IS NULL`,
  `CREATE TABLE inbox_owners (
     owner text PRIMARY KEY,
     seen_at bigint NOT NULL
   )`,
  `CREATE TABLE approvals (
     thread_id text COLLATE "C" NOT NULL,
     request_id text COLLATE "C" NOT NULL,
     request jsonb NOT NULL,
     asked_at bigint NOT NULL,
     decision jsonb,
     decided_at bigint,
     PRIMARY KEY (thread_id, request_id)
   )`,
  `CREATE TABLE inbox_escalations (
     thread_id text COLLATE "C" PRIMARY KEY,
     escalation jsonb NOT NULL,
     at bigint NOT NULL
   )`,
  `CREATE TABLE inbox_log (
     id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     at bigint NOT NULL,
     kind text NOT NULL,
     thread_id text COLLATE "C",
     ref text NOT NULL,
     outcome text NOT NULL,
     reason text NOT NULL,
     kept_as text
   )`,
  `CREATE INDEX inbox_log_thread ON inbox_log (thread_id, id)`,
]
