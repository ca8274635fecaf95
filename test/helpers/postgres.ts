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

/**
 * Bridges given back by `destroy`, reused by the next `freshDatabase` of this test file: booting a
 * worker and connecting costs far more than the schema itself.
 */
const idle: PgBridge[] = []

/** A bridge to a fresh, migrated schema; `destroy` drops the schema (synchronously, as contract suites call it). */
export function freshDatabase(): { db: PgBridge; schema: string; url: string; destroy: () => void } {
  const url = testDatabaseUrl()
  const schema = freshSchema()
  let db = idle.pop()
  if (db) db.useSchema(schema)
  else db = new PgBridge({ url, schema })
  migrate(db)
  const bridge = db
  return {
    db,
    schema,
    url,
    destroy: () => {
      if (bridge.isClosed) return void dropSchemaSync(url, schema)
      try {
        bridge.execSync(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
        bridge.useSchema('public')
        idle.push(bridge)
      } catch {
        bridge.close()
        dropSchemaSync(url, schema)
      }
    },
  }
}

function dropSchemaSync(url: string, schema: string): void {
  const other = new PgBridge({ url })
  try {
    other.execSync(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  } finally {
    other.close()
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
