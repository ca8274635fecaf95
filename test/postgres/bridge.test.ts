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

  it("should write a transaction's deferred writes exactly as given, whatever their values hold", () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int PRIMARY KEY, s text, j jsonb, a text[], big bigint, b boolean)')
    const values: Array<[number, string | null, unknown, string[] | null, number | null, boolean | null]> = [
      [1, "it's", { q: "a'b", back: 'c\\d', dollar: '$1 $$ $2' }, ['x', "y'z", 'w\\v', '$3'], 1_700_000_000_123, true],
      [2, 'line\nbreak\ttab', [1, 'two', null], [], -5, false],
      [3, null, null, null, null, null],
      [4, '"double" $4 ;DROP TABLE t; --', 'just text', ['{braces}', 'a,b', ''], 0, true],
      [5, 'ünïcödé ✓ 🧵', { nested: { deep: [true, false] } }, ['NULL', 'null'], Number.MAX_SAFE_INTEGER, false],
    ]
    db.transactionSync(() => {
      for (const [n, s, j, a, big, b] of values) {
        db.execSync('INSERT INTO t (n, s, j, a, big, b) VALUES ($1, $2, $3, $4::text[], $5, $6)', [n, s, j === null ? null : JSON.stringify(j), a, big, b])
      }
      db.execSync('UPDATE t SET s = s || $1 WHERE n = $2', ["'", 1])
    })
    const rows = db.querySync('SELECT n, s, j, a, big, b FROM t ORDER BY n')
    expect(rows).toEqual(values.map(([n, s, j, a, big, b]) => ({ n, s: n === 1 ? `${s}'` : s, j, a, big, b })))
  })

  it('should fail the commit of a transaction whose deferred write fails, and write none of it', () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int PRIMARY KEY)')
    expect(() =>
      db.transactionSync(() => {
        db.execSync('INSERT INTO t VALUES ($1)', [1])
        db.execSync('INSERT INTO t VALUES ($1)', [2])
        db.execSync('INSERT INTO t VALUES ($1)', [1])
      }),
    ).toThrow(/duplicate key/)
    expect(db.querySync('SELECT count(*)::int AS n FROM t')[0]!.n).toBe(0)
    db.transactionSync(() => db.execSync('INSERT INTO t VALUES ($1), ($2)', [3, 4]))
    expect(db.querySync('SELECT array_agg(n ORDER BY n) AS ns FROM t')[0]!.ns).toEqual([3, 4])
  })

  it('should keep the runs of one lane in the order they were posted, on a connection of their own', async () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int, pid int)')
    const mainPid = db.querySync('SELECT pg_backend_pid() AS pid')[0]!.pid
    const runs = Array.from({ length: 40 }, (_, n) => db.run([{ sql: 'INSERT INTO t VALUES ($1, pg_backend_pid())', params: [n] }], { tx: n % 2 === 0, lane: 'rounds' }))
    await Promise.all(runs)
    const rows = db.querySync('SELECT n, pid FROM t ORDER BY ctid')
    expect(rows.map((row) => row.n)).toEqual(Array.from({ length: 40 }, (_, n) => n))
    expect(new Set(rows.map((row) => row.pid)).size).toBe(1)
    expect(rows[0]!.pid).not.toBe(mainPid)
  })

  it('should answer a synchronous call while a lane holds a transaction open, and not wait for it', async () => {
    const db = open()
    await db.run([{ sql: 'SELECT 1' }], { lane: 'rounds' })
    const held = db.run([{ sql: 'SELECT pg_advisory_xact_lock(4242)' }, { sql: 'SELECT pg_sleep(2)' }], { tx: true, lane: 'rounds' })
    // The lane has taken the lock once its first statement has run; the main connection then finds it taken.
    let taken = false
    for (let i = 0; i < 5_000 && !taken; i++) taken = db.querySync("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND granted")[0]!.n === 1
    expect(taken).toBe(true)
    expect(db.querySync('SELECT pg_try_advisory_xact_lock(4242) AS got')[0]!.got).toBe(false)
    await held
    expect(db.querySync('SELECT pg_try_advisory_xact_lock(4242) AS got')[0]!.got).toBe(true)
  })

  it('should run every lane on the one connection, in the order posted, when it is given connections: 1', async () => {
    const url = testDatabaseUrl()
    const schema = freshSchema()
    const db = new PgBridge({ url, schema, connections: 1 })
    cleanups.push(async () => {
      db.close()
      await dropSchema(url, schema)
    })
    db.execSync('CREATE TABLE t (n int, pid int)')
    const runs = [db.run([{ sql: 'INSERT INTO t VALUES (1, pg_backend_pid())' }], { lane: 'a' }), db.run([{ sql: 'INSERT INTO t VALUES (2, pg_backend_pid())' }], { lane: 'b' })]
    expect(db.querySync('SELECT array_agg(n ORDER BY n) AS ns, count(DISTINCT pid)::int AS pids, max(pid) = pg_backend_pid() AS here FROM t')[0]).toEqual({ ns: [1, 2], pids: 1, here: true })
    await Promise.all(runs)
  })

  it("should connect a lane again after the server killed its connection, failing at most the run that found it gone", async () => {
    const db = open()
    db.execSync('CREATE TABLE t (n int)')
    const first = (await db.run([{ sql: 'SELECT pg_backend_pid() AS pid' }], { lane: 'rounds' }))[0]![0]
    expect(db.querySync('SELECT pg_terminate_backend($1) AS killed', [first!.pid])[0]!.killed).toBe(true)
    const outcome = await db.run([{ sql: 'INSERT INTO t VALUES (1)' }], { lane: 'rounds' }).then(
      () => 'written',
      (error: { code?: string }) => error.code,
    )
    expect(['written', 'DATABASE_UNAVAILABLE']).toContain(outcome)
    const again = (await db.run([{ sql: 'INSERT INTO t VALUES (2)' }, { sql: 'SELECT pg_backend_pid() AS pid' }], { tx: true, lane: 'rounds' }))[1]![0]
    expect(again!.pid).not.toBe(first!.pid)
    expect(db.querySync('SELECT array_agg(n ORDER BY n) AS ns FROM t')[0]!.ns).toEqual(outcome === 'written' ? [1, 2] : [2])
  })

  it('should move every lane to the schema useSchema names', async () => {
    const db = open()
    await db.run([{ sql: 'CREATE TABLE t (n int)' }], { lane: 'rounds' })
    const other = freshSchema()
    cleanups.push(() => dropSchema(testDatabaseUrl(), other))
    db.useSchema(other)
    await db.run([{ sql: 'CREATE TABLE t (n int)' }, { sql: 'INSERT INTO t VALUES (7)' }], { tx: true, lane: 'rounds' })
    expect(db.querySync('SELECT current_schema() AS s, (SELECT array_agg(n) FROM t) AS ns')[0]).toEqual({ s: other, ns: [7] })
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

  it('should deliver a NOTIFY that arrives during a synchronous call, its own included, after the call and outside its transaction', async () => {
    const heard: Array<{ payload: string; depth: number }> = []
    const url = testDatabaseUrl()
    let depth = 0
    const db = new PgBridge({ url, onNotify: (_channel, payload) => heard.push({ payload, depth }) })
    cleanups.push(async () => db.close())
    db.listenSync('spindle_test_during')
    const other = new PgBridge({ url })
    cleanups.push(async () => other.close())
    // Its own notification, committed with the transaction, reaches it during the next call.
    db.transactionSync(() => {
      depth++
      db.execSync(`SELECT pg_notify('spindle_test_during', 'own')`)
      depth--
    })
    // Another connection's, sent while this one waits in a statement.
    const waiting = db.querySync(`SELECT pg_sleep(0.3), 1 AS one`)
    expect(waiting[0]!.one).toBe(1)
    other.execSync(`SELECT pg_notify('spindle_test_during', 'other')`)
    db.transactionSync(() => {
      depth++
      db.querySync('SELECT pg_sleep(0.3)')
      depth--
    })
    for (let i = 0; i < 100 && heard.length < 2; i++) await new Promise((r) => setTimeout(r, 20))
    expect(heard.map((h) => h.payload).sort()).toEqual(['other', 'own'])
    expect(heard.every((h) => h.depth === 0)).toBe(true)
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
