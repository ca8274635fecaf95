import { execFile } from 'node:child_process'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { migrate, PG_MIGRATIONS } from '../../persistence/postgres/schema.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

describe('the PostgreSQL bridge', () => {
  const cleanups: Array<() => Promise<void>> = []
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup()
  })
  const open = (schema = freshSchema()) => {
    const url = testDatabaseUrl()
    const db = new PgBridge({ url, schema })
    cleanups.push(async () => {
      db.close()
      await dropSchema(url, schema)
    })
    return db
  }

  it('should answer synchronously, with int8 as numbers and jsonb as objects', () => {
    const db = open()
    db.execSync('CREATE TABLE t (id bigint PRIMARY KEY, doc jsonb)')
    db.execSync('INSERT INTO t VALUES ($1, $2)', [1_700_000_000_123, JSON.stringify({ a: [1, 2] })])
    expect(db.querySync('SELECT id, doc FROM t')).toEqual([{ id: 1_700_000_000_123, doc: { a: [1, 2] } }])
    expect(db.changeSync('UPDATE t SET doc = $1', ['{}'])).toBe(1)
  })

  it('should commit a transaction whole and roll it back whole when its function throws', () => {
    const db = open()
    db.execSync('CREATE TABLE t (id int PRIMARY KEY)')
    db.transactionSync(() => {
      db.execSync('INSERT INTO t VALUES (1)')
      db.execSync('INSERT INTO t VALUES (2)')
    })
    expect(() =>
      db.transactionSync(() => {
        db.execSync('INSERT INTO t VALUES (3)')
        // A read sends the deferred write first: the row is seen inside the transaction.
        expect(db.querySync('SELECT count(*)::int AS n FROM t')[0]!.n).toBe(3)
        throw new Error('no')
      }),
    ).toThrow('no')
    expect(db.querySync('SELECT id FROM t ORDER BY id').map((r) => r.id)).toEqual([1, 2])
  })

  it('should keep asynchronous runs and synchronous calls in the order they were made', async () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int)')
    const runs = [db.run([{ sql: 'INSERT INTO t VALUES (1)' }]), db.run([{ sql: 'INSERT INTO t VALUES (2)' }, { sql: 'INSERT INTO t VALUES (3)' }], { tx: true })]
    // Posted after both runs: the worker runs it after them.
    expect(db.querySync('SELECT array_agg(n ORDER BY n) AS ns FROM t')[0]!.ns).toEqual([1, 2, 3])
    await Promise.all(runs)
  })

  it('should roll an asynchronous transaction back whole when one statement fails', async () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int PRIMARY KEY)')
    await expect(db.run([{ sql: 'INSERT INTO t VALUES (1)' }, { sql: 'INSERT INTO t VALUES (1)' }], { tx: true })).rejects.toThrow(/duplicate key/)
    expect(db.querySync('SELECT count(*)::int AS n FROM t')[0]!.n).toBe(0)
  })

  it('should fail the call that finds its connection killed by the server with DATABASE_UNAVAILABLE, and connect again for the next', async () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int)')
    const pid = Number(db.querySync('SELECT pg_backend_pid() AS pid')[0]!.pid)
    const admin = new pg.Client({ connectionString: testDatabaseUrl() })
    await admin.connect()
    await admin.query('SELECT pg_terminate_backend($1)', [pid])
    await admin.end()
    let failure: unknown = null
    try {
      db.querySync('SELECT 1')
    } catch (error) {
      failure = error
    }
    // The worker may or may not have seen the connection end before the statement went out.
    if (failure) expect((failure as { code: string }).code).toBe('DATABASE_UNAVAILABLE')
    expect(db.querySync('SELECT count(*)::int AS n FROM t')[0]!.n).toBe(0)
    expect(Number(db.querySync('SELECT pg_backend_pid() AS pid')[0]!.pid)).not.toBe(pid)
  })

  it('should fail a transaction whose connection was killed half way, commit nothing of it, and carry on after', async () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int)')
    const admin = new pg.Client({ connectionString: testDatabaseUrl() })
    await admin.connect()
    expect(() =>
      db.transactionSync(() => {
        db.execSync('INSERT INTO t VALUES (1)')
        const pid = db.querySync('SELECT pg_backend_pid() AS pid')[0]!.pid
        // Killed from another process, synchronously here: a worker of our own would need the event loop.
        const killer = new PgBridge({ url: testDatabaseUrl() })
        killer.querySync('SELECT pg_terminate_backend($1)', [pid])
        killer.close()
        db.execSync('INSERT INTO t VALUES (2)')
      }),
    ).toThrow(expect.objectContaining({ code: 'DATABASE_UNAVAILABLE' }))
    await admin.end()
    expect(db.querySync('SELECT count(*)::int AS n FROM t')[0]!.n).toBe(0)
    db.transactionSync(() => db.execSync('INSERT INTO t VALUES (3)'))
    expect(db.querySync('SELECT n FROM t')).toEqual([{ n: 3 }])
  })

  it('should say DATABASE_UNAVAILABLE, naming the server without its password, when nothing listens', () => {
    const db = new PgBridge({ url: 'postgres://someone:secret@127.0.0.1:1/nowhere', connectTimeoutMs: 1_000, timeoutMs: 3_000 })
    try {
      expect(() => db.querySync('SELECT 1')).toThrow(expect.objectContaining({ code: 'DATABASE_UNAVAILABLE' }))
      try {
        db.querySync('SELECT 1')
      } catch (error) {
        expect((error as Error).message).toContain('127.0.0.1:1')
        expect((error as Error).message).not.toContain('secret')
      }
    } finally {
      db.close()
    }
  })

  it('should deliver NOTIFY to the listener, between calls', async () => {
    const heard: string[] = []
    const url = testDatabaseUrl()
    const db = new PgBridge({ url, onNotify: (channel, payload) => heard.push(`${channel}:${payload}`) })
    cleanups.push(async () => db.close())
    db.listenSync('spindle_test_bell')
    const other = new PgBridge({ url })
    other.execSync(`SELECT pg_notify('spindle_test_bell', 'ding')`)
    other.close()
    for (let i = 0; i < 50 && heard.length === 0; i++) await new Promise((r) => setTimeout(r, 20))
    expect(heard).toEqual(['spindle_test_bell:ding'])
  })

  it('should migrate a schema exactly once when four processes open it at the same moment', async () => {
    const schema = freshSchema()
    const url = testDatabaseUrl()
    cleanups.push(() => dropSchema(url, schema))
    const root = path.resolve(import.meta.dirname, '../..')
    const script = `
      import { PgBridge } from '${pathToFileURL(path.join(root, 'dist/persistence/postgres/bridge.js')).href}'
      import { migrate } from '${pathToFileURL(path.join(root, 'dist/persistence/postgres/schema.js')).href}'
      const db = new PgBridge({ url: process.env.URL, schema: process.env.SCHEMA })
      // Start together: each waits for the same wall-clock moment.
      while (Date.now() < Number(process.env.AT)) {}
      process.stdout.write(String(migrate(db)))
      db.close()`
    const at = Date.now() + 1_500
    const found = await Promise.all(
      Array.from({ length: 4 }, () =>
        new Promise<string>((resolve, reject) =>
          execFile(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, URL: url, SCHEMA: schema, AT: String(at) } }, (error, stdout, stderr) =>
            error ? reject(new Error(stderr || String(error))) : resolve(stdout),
          ),
        ),
      ),
    )
    // One found version 0 and migrated; the others waited on its lock and found it done.
    expect(found.sort()).toEqual(['0', ...Array(3).fill(String(PG_MIGRATIONS.length))].sort())
    const db = open(schema)
    expect(db.querySync('SELECT count(*)::int AS n FROM spindle_schema')[0]!.n).toBe(PG_MIGRATIONS.length)
  })

  it('should refuse a schema migrated by a newer spindle with DATABASE_SCHEMA_NEWER, writing nothing', () => {
    const db = open()
    migrate(db)
    db.execSync('INSERT INTO spindle_schema VALUES ($1, 0)', [PG_MIGRATIONS.length + 1])
    expect(() => migrate(db)).toThrow(expect.objectContaining({ code: 'DATABASE_SCHEMA_NEWER' }))
  })
})
