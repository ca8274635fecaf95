/**
 * The PostgreSQL schema, in versioned migrations. Every process that opens a database runs them
 * first; several starting at once take turns behind one advisory lock, so each migration runs
 * exactly once. A database migrated by a newer spindle is refused rather than written to.
 */
import { SpindleError } from '../../src/base/errors.js'
import type { PgBridge } from './bridge.js'
import { CHECKPOINT_TABLES, TRANSCRIPT_TABLES } from './transcriptTables.js'
import { EVENT_TABLES, RECOVERY_TABLES, REGISTRY_TABLES } from './registryTables.js'
import { LEASE_TABLES, LEDGER_TABLES } from './leaseTables.js'
import { INBOX_TABLES } from './inboxTables.js'

/** Each entry is one version: its statements run in one transaction. Append only; never edit one that shipped. */
export const PG_MIGRATIONS: ReadonlyArray<readonly string[]> = [
  [...REGISTRY_TABLES, ...EVENT_TABLES, ...RECOVERY_TABLES, ...LEASE_TABLES, ...LEDGER_TABLES, ...TRANSCRIPT_TABLES, ...CHECKPOINT_TABLES, ...INBOX_TABLES],
]

/** Brings the bridge's schema up to the newest version; returns the version it found. */
export function migrate(db: PgBridge): number {
  return db.transactionSync(() => {
    // One lock per schema, held to the commit: a second process waits here, then finds the work done.
    db.querySync(`SELECT pg_advisory_xact_lock(hashtext('spindle.migrate:' || current_schema()))`)
    db.querySync(`CREATE TABLE IF NOT EXISTS spindle_schema (version integer PRIMARY KEY, applied_at bigint NOT NULL)`)
    const found = Number(db.querySync(`SELECT coalesce(max(version), 0) AS v FROM spindle_schema`)[0]!.v)
    if (found > PG_MIGRATIONS.length) {
      throw new SpindleError(
        'DATABASE_SCHEMA_NEWER',
        `The database's spindle schema is at version ${found}, newer than this spindle knows (${PG_MIGRATIONS.length}): a newer spindle migrated it. Upgrade spindle on this host; nothing was written.`,
        { details: { found, known: PG_MIGRATIONS.length } },
      )
    }
    for (let version = found + 1; version <= PG_MIGRATIONS.length; version++) {
      for (const sql of PG_MIGRATIONS[version - 1]!) db.execSync(sql)
      db.execSync(`INSERT INTO spindle_schema (version, applied_at) VALUES ($1, $2)`, [version, Date.now()])
    }
    return found
  })
}
