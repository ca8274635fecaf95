/**
 * A test's own corner of the test database: a fresh schema per store, dropped afterwards, so test
 * files and the stores within them never see each other's rows.
 */
import { inject } from 'vitest'
import { customAlphabet } from 'nanoid'
import pg from 'pg'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { migrate } from '../../persistence/postgres/schema.js'

const suffix = customAlphabet('abcdefghijklmnopqrstuvwxyz0123456789', 12)

/** The URL of the test server (see test/setup/postgres.ts). */
export function testDatabaseUrl(): string {
  return process.env.SPINDLE_TEST_DATABASE_URL ?? inject('pgUrl')
}

/** A new, empty schema's name. */
export function freshSchema(): string {
  return `t_${suffix()}`
}

/** A bridge to a fresh, migrated schema; `destroy` drops the schema and closes the bridge (synchronously, as contract suites call it). */
export function freshDatabase(): { db: PgBridge; schema: string; url: string; destroy: () => void } {
  const url = testDatabaseUrl()
  const schema = freshSchema()
  const db = new PgBridge({ url, schema })
  migrate(db)
  return {
    db,
    schema,
    url,
    destroy: () => {
      try {
        db.execSync(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      } finally {
        db.close()
      }
    },
  }
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  } finally {
    await client.end()
  }
}
