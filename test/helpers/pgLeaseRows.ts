/**
 * Lease rows for the tests of the stores that a lease fences (transcripts, checkpoints). The
 * lease store makes the `leases` table; where it has not (yet), a minimal one is made here. A row
 * is written whatever other columns the real table requires: they are given plausible values.
 */
import type { PgBridge } from '../../persistence/postgres/bridge.js'

export function ensureLeasesTable(db: PgBridge): void {
  db.execSync('CREATE TABLE IF NOT EXISTS leases (thread_id text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL DEFAULT 1)')
}

/** Gives the lease of `threadId` to `owner` (taken over, when another held it). */
export function setLease(db: PgBridge, threadId: string, owner: string): void {
  const required = db.querySync(
    `SELECT column_name AS name, data_type AS type FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = 'leases' AND is_nullable = 'NO' AND column_default IS NULL
       AND column_name NOT IN ('thread_id', 'owner')`,
  ) as Array<{ name: string; type: string }>
  const names = ['thread_id', 'owner', ...required.map((c) => c.name)]
  const values: unknown[] = [threadId, owner]
  for (const column of required) {
    if (/int|numeric|double|real/.test(column.type)) values.push(/expire/.test(column.name) ? Date.now() + 3_600_000 : 1)
    else values.push('test')
  }
  const placeholders = names.map((_, i) => `$${i + 1}`).join(', ')
  db.execSync(
    `INSERT INTO leases (${names.map((n) => `"${n}"`).join(', ')}) VALUES (${placeholders}) ON CONFLICT (thread_id) DO UPDATE SET owner = EXCLUDED.owner`,
    values,
  )
}
