/**
 * The PostgreSQL transcript store: the contract suite, then what it cannot see — two processes
 * (two connections) writing one thread, the group commit's one transaction, a connection killed
 * in the middle of a round, and rows read back by another connection.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { createPgTranscriptStore, TRANSCRIPT_LANE } from '../../persistence/postgres/pgTranscript.js'
import { createPgThreadFolders } from '../../persistence/postgres/pgThreadFolders.js'
import { entryHash } from '../../persistence/transcriptHash.js'
import type { TranscriptEntry } from '../../persistence/types.js'
import { transcriptContract } from '../contract/transcript.contract.js'
import { ensureLeasesTable, setLease } from '../helpers/pgLeaseRows.js'
import { freshDatabase } from '../helpers/postgres.js'

const T = 'thread-aaaaaaaaaaaa'
const U = 'thread-bbbbbbbbbbbb'
const T0 = Date.parse('2025-01-01T00:00:00.000Z')
const at = (n: number): Date => new Date(T0 + n * 1000)

transcriptContract('postgres', () => {
  const d = freshDatabase()
  return { store: createPgTranscriptStore({ db: d.db }), destroy: d.destroy }
})

describe('the PostgreSQL transcript store', () => {
  const cleanups: Array<() => void | Promise<void>> = []
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
  })

  function database() {
    const d = freshDatabase()
    cleanups.push(d.destroy)
    return d
  }

  /** Another connection to the same schema: another process, as far as the database can tell. */
  function connection(d: { url: string; schema: string }): PgBridge {
    const db = new PgBridge({ url: d.url, schema: d.schema })
    cleanups.push(() => db.close())
    return db
  }

  const count = (db: PgBridge, table: string): number => db.querySync(`SELECT count(*)::int AS n FROM ${table}`)[0]!.n as number

  it('should write nothing of a stale writer whose thread another owner leases now, and the successor goes on from the chain', async () => {
    const d = database()
    ensureLeasesTable(d.db)
    setLease(d.db, T, 'stale')
    setLease(d.db, U, 'stale')
    const told: string[] = []
    const stale = createPgTranscriptStore({ db: d.db, fence: { owner: () => 'stale', fenced: (id) => told.push(id) } })
    stale.open(T)
    stale.open(U)
    stale.append(T, 'spawn', { input: 'hello' }, at(0))
    stale.append(T, 'START', null, at(1))
    await stale.sync()
    const handedOver = stale.position(T)

    // The stale process stalls; another takes the thread over and opens it where it was left.
    const other = connection(d)
    setLease(other, T, 'successor')
    const successor = createPgTranscriptStore({ db: other, fence: { owner: () => 'successor' } })
    successor.open(T, handedOver)
    // The stale process wakes with a round in hand: its line of T, and one of U, still its own.
    stale.append(T, 'NOTE', 'stale line', at(2))
    const stillOwn = stale.append(U, 'NOTE', 'own line', at(2))
    await stale.sync()
    const next = successor.append(T, 'NOTE', 'successor line', at(3))
    await successor.sync()

    expect(told).toEqual([T])
    const reader = createPgTranscriptStore({ db: connection(d) })
    const entries = reader.read(T).entries
    expect(entries.map((e) => e.data)).toEqual([{ input: 'hello' }, null, 'successor line'])
    expect(entries[2]).toEqual(next)
    expect(reader.read(U).entries).toEqual([stillOwn])
  })

  it('should fence only the thread whose lines another writer wrote first, and write the rest of the round', async () => {
    const d = database()
    const told: string[] = []
    const first = createPgTranscriptStore({ db: d.db, fence: { owner: () => null, fenced: (id) => told.push(id) } })
    first.open(T)
    first.append(T, 'spawn', null, at(0))
    await first.sync()
    const position = first.position(T)
    const second = createPgTranscriptStore({ db: connection(d) })
    second.open(T, position)
    const winner = second.append(T, 'NOTE', 'first to the database', at(1))
    await second.sync()

    first.open(U)
    first.append(T, 'NOTE', 'too late', at(2))
    const other = first.append(U, 'NOTE', 'another thread', at(2))
    await first.sync()
    // What it appends to the thread from here on is dropped too, and not told again.
    first.append(T, 'NOTE', 'later still', at(3))
    await first.sync()

    expect(told).toEqual([T])
    const reader = createPgTranscriptStore({ db: connection(d) })
    expect(reader.read(T).entries.map((e) => e.data)).toEqual([null, 'first to the database'])
    expect(reader.read(T).entries[1]).toEqual(winner)
    expect(reader.read(U).entries).toEqual([other])
  })

  it('should write the entries of 1,000 threads in one transaction, with leases of no thread', async () => {
    const d = database()
    ensureLeasesTable(d.db)
    // Every statement that writes a transcript table logs its transaction's id.
    d.db.execSync('CREATE TABLE tx_log (xid bigint NOT NULL)')
    d.db.execSync(`CREATE FUNCTION log_tx() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO tx_log VALUES (txid_current()); RETURN NULL; END $$`)
    d.db.execSync('CREATE TRIGGER lines_tx AFTER INSERT ON transcript_lines FOR EACH STATEMENT EXECUTE FUNCTION log_tx()')
    d.db.execSync('CREATE TRIGGER heads_tx AFTER INSERT OR UPDATE ON transcript_heads FOR EACH STATEMENT EXECUTE FUNCTION log_tx()')
    const store = createPgTranscriptStore({ db: d.db, fence: { owner: () => 'me' } })
    const ids = Array.from({ length: 1000 }, (_, i) => `many-${String(i).padStart(8, '0')}`)
    for (const id of ids) {
      store.open(id)
      store.append(id, 'spawn', { id }, at(0))
      store.append(id, 'START', null, at(1))
    }
    await store.sync()
    expect(d.db.querySync('SELECT count(DISTINCT xid)::int AS n FROM tx_log')[0]!.n).toBe(1)
    expect(count(d.db, 'transcript_lines')).toBe(2000)

    // The next round moves every head (the other path of the statement): one more transaction.
    for (const id of ids) store.append(id, 'NOTE', 'again', at(2))
    await store.sync()
    expect(d.db.querySync('SELECT count(DISTINCT xid)::int AS n FROM tx_log')[0]!.n).toBe(2)
    expect(count(d.db, 'transcript_lines')).toBe(3000)
    expect(d.db.querySync('SELECT count(*)::int AS n FROM transcript_heads WHERE seq = 3')[0]!.n).toBe(1000)
  })

  it('should read the chain back on another connection after the store is closed, from the start or from a position', async () => {
    const d = database()
    const db = connection(d)
    const writer = createPgTranscriptStore({ db })
    writer.open(T)
    const appended = [writer.append(T, 'spawn', { input: 'hello' }, at(0)), writer.append(T, 'START', null, at(1))]
    await writer.sync()
    const checkpoint = writer.position(T)
    // Not synced: closeAll writes it before it returns.
    appended.push(writer.append(T, 'NOTE', { text: 'ünïcødé ✓' }, at(2)))
    const end = writer.position(T)
    writer.closeAll()
    db.close()

    const reader = createPgTranscriptStore({ db: connection(d) })
    expect(reader.read(T)).toEqual({ entries: appended, torn: null })
    expect(reader.open(T, checkpoint)).toEqual({ position: end, tail: appended.slice(2), torn: null })
    const again = createPgTranscriptStore({ db: connection(d) })
    expect(again.open(T)).toEqual({ position: end, tail: appended, torn: null })
    const next = again.append(T, 'NOTE', 'after', at(3))
    expect(next.hash).toBe(entryHash(end.hash, 4, next.ts, 'NOTE', 'after'))
  })

  it('should keep each line byte for byte, so the chain verifies whatever jsonb would make of it', async () => {
    const d = database()
    const writer = createPgTranscriptStore({ db: d.db })
    writer.open(T)
    // Keys out of jsonb's order, a NUL that jsonb refuses, a number jsonb would write otherwise.
    const data = { zeta: 1, a: { y: [3, 2, 1], b: 'x' }, nul: 'before\u0000after', big: 1e21, quote: '"\\\n', '': 'empty key' }
    const entry = writer.append(T, 'MODEL_REPLIED', data, at(0))
    await writer.sync()
    const line = d.db.querySync('SELECT line FROM transcript_lines WHERE thread_id = $1', [T])[0]!.line
    expect(`${line}\n`).toBe(`${JSON.stringify(entry)}\n`)
    const read = createPgTranscriptStore({ db: connection(d) }).read(T).entries
    expect(read).toEqual([entry])
    expect(Object.keys(read[0]!.data as object)).toEqual(Object.keys(data))
  })

  it('should count positions in the bytes the file backend holds for the same entries', async () => {
    const d = database()
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-pg-bytes-'))
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }))
    const paths = dataPaths(dir)
    fs.mkdirSync(paths.threads, { recursive: true })
    const file = createJsonlTranscriptStore({ paths, durability: 'process' })
    const rows = createPgTranscriptStore({ db: d.db })
    const written: TranscriptEntry[] = []
    for (const store of [file, rows]) {
      store.open(T)
      for (let n = 0; n < 4; n++) written.push(store.append(T, 'NOTE', { n, text: 'ünïcødé ✓ '.repeat(n) }, at(n)))
    }
    await rows.sync()
    expect(rows.position(T)).toEqual(file.position(T))
    file.closeAll()
    expect(fs.statSync(path.join(paths.threads, T, 'transcript.jsonl')).size).toBe(rows.position(T).bytes)
    // Another process finds the same length without opening the thread.
    const folders = createPgThreadFolders({ db: d.db, transcripts: createPgTranscriptStore({ db: connection(d) }) })
    expect(folders.transcriptBytes(T)).toBe(rows.position(T).bytes)
    expect(written.slice(0, 4)).toEqual(written.slice(4))
  })

  it('should refuse a transcript one of whose rows was altered, naming its seq', async () => {
    const d = database()
    const writer = createPgTranscriptStore({ db: d.db })
    writer.open(T)
    for (let n = 0; n < 3; n++) writer.append(T, 'NOTE', { n }, at(n))
    await writer.sync()
    d.db.execSync(`UPDATE transcript_lines SET line = replace(line, '"n":1', '"n":7') WHERE thread_id = $1 AND seq = 2`, [T])
    const reader = createPgTranscriptStore({ db: connection(d) })
    expect(() => reader.open(T)).toThrow(expect.objectContaining({ code: 'TRANSCRIPT_CHAIN_BROKEN', details: expect.objectContaining({ seq: 2 }) }))
  })

  /** Holds an exclusive lock on the heads until released: a round waits at it inside its transaction. */
  async function lockHeads(d: { url: string; schema: string }): Promise<{ release: () => Promise<void> }> {
    const locker = new pg.Client({ connectionString: d.url })
    await locker.connect()
    await locker.query('BEGIN')
    await locker.query(`LOCK TABLE "${d.schema}".transcript_heads IN ACCESS EXCLUSIVE MODE`)
    let released = false
    const release = async () => {
      if (released) return
      released = true
      await locker.query('ROLLBACK')
      await locker.end()
    }
    cleanups.push(release)
    return { release }
  }

  /** The backend a store's rounds run on (the bridge's transcript lane). */
  const pidOf = (db: PgBridge): number => db.querySync('SELECT pg_backend_pid() AS pid', undefined, { lane: TRANSCRIPT_LANE })[0]!.pid as number

  /** Resolves once every backend of `pids` waits for a lock. */
  async function waitingForLock(admin: PgBridge, pids: number[]): Promise<void> {
    const waiting = () => admin.querySync(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1) AND wait_event_type = 'Lock'`, [pids])[0]!.n as number
    while (waiting() < pids.length) await new Promise((resolve) => setTimeout(resolve, 10))
  }

  it('should reject a round whose connection is killed with DATABASE_UNAVAILABLE, write nothing of it, and write its entries at the next sync', async () => {
    const d = database()
    const store = createPgTranscriptStore({ db: d.db })
    store.open(T)
    store.open(U)
    const appended = [store.append(T, 'spawn', null, at(0)), store.append(T, 'START', null, at(1))]
    const other = store.append(U, 'spawn', null, at(0))
    const pid = pidOf(d.db)
    const lock = await lockHeads(d)
    const round = store.sync()
    const admin = connection(d)
    await waitingForLock(admin, [pid])
    // Appended while the round waits: not its entries, the next round's.
    appended.push(store.append(T, 'NOTE', 'meanwhile', at(2)))
    admin.querySync('SELECT pg_terminate_backend($1)', [pid])
    await expect(round).rejects.toMatchObject({ code: 'DATABASE_UNAVAILABLE' })
    await lock.release()
    expect([count(admin, 'transcript_lines'), count(admin, 'transcript_heads')]).toEqual([0, 0])

    await store.sync()
    const reader = createPgTranscriptStore({ db: admin })
    expect(reader.read(T).entries).toEqual(appended)
    expect(reader.read(U).entries).toEqual([other])
  })

  it('should let one of two writers racing for a thread write its lines, whole, and fence the other', async () => {
    const d = database()
    const told: string[] = []
    const fence = { owner: () => null, fenced: (id: string) => told.push(id) }
    const x = createPgTranscriptStore({ db: d.db, fence })
    x.open(T)
    x.append(T, 'spawn', null, at(0))
    await x.sync()
    const other = connection(d)
    const y = createPgTranscriptStore({ db: other, fence })
    y.open(T, x.position(T))
    const fromX = [x.append(T, 'NOTE', 'x', at(1)), x.append(T, 'NOTE', 'x again', at(2))]
    const fromY = [y.append(T, 'NOTE', 'y', at(1))]
    // Both rounds reach the database and wait at the same lock, then race for the thread's head.
    const pids = [pidOf(d.db), pidOf(other)]
    const lock = await lockHeads(d)
    const rounds = [x.sync(), y.sync()]
    const admin = connection(d)
    await waitingForLock(admin, pids)
    await lock.release()
    await Promise.all(rounds)

    expect(told).toEqual([T])
    const tail = createPgTranscriptStore({ db: admin }).read(T).entries.slice(1)
    expect([fromX, fromY]).toContainEqual(tail)
  })

  it('should write what was appended while a round was under way in the round after it', async () => {
    const d = database()
    const store = createPgTranscriptStore({ db: d.db })
    store.open(T)
    const appended = [store.append(T, 'spawn', null, at(0))]
    const pid = pidOf(d.db)
    const lock = await lockHeads(d)
    const first = store.sync()
    const admin = connection(d)
    await waitingForLock(admin, [pid])
    appended.push(store.append(T, 'START', null, at(1)))
    const second = store.sync()
    await lock.release()
    await Promise.all([first, second])
    expect(createPgTranscriptStore({ db: admin }).read(T).entries).toEqual(appended)
  })
})
