/**
 * The PostgreSQL checkpoint store: the contract suite, then what it cannot see — the lease fence
 * between two processes, one transaction per round, and rows read back by another connection.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { createPgCheckpointStore } from '../../persistence/postgres/pgCheckpoints.js'
import { checkpointContract, envelope } from '../contract/checkpoints.contract.js'
import { ensureLeasesTable, setLease } from '../helpers/pgLeaseRows.js'
import { freshDatabase } from '../helpers/postgres.js'

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'
const C = 'c-aaaaaaaaaaaa'

checkpointContract('postgres', () => {
  const d = freshDatabase()
  return { store: createPgCheckpointStore({ db: d.db }), destroy: d.destroy }
})

describe('the PostgreSQL checkpoint store', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => {
    for (const cleanup of cleanups.splice(0).reverse()) cleanup()
  })

  function database() {
    const d = freshDatabase()
    cleanups.push(d.destroy)
    return d
  }

  function connection(d: { url: string; schema: string }): PgBridge {
    const db = new PgBridge({ url: d.url, schema: d.schema })
    cleanups.push(() => db.close())
    return db
  }

  it("should not write the checkpoint of a thread another owner leases now, and write the rest of the round", async () => {
    const d = database()
    ensureLeasesTable(d.db)
    setLease(d.db, A, 'stale')
    setLease(d.db, B, 'stale')
    const told: string[] = []
    const stale = createPgCheckpointStore({ db: d.db, fence: { owner: () => 'stale', fenced: (id) => told.push(id) } })
    stale.stage(A, envelope(A, 1))
    await stale.sync()
    // Taken over while the stale process was stopped; it wakes with a round in hand.
    setLease(connection(d), A, 'successor')
    stale.stage(A, envelope(A, 2))
    stale.stage(B, envelope(B, 2))
    stale.stage(C, envelope(C, 2))
    await stale.sync()

    expect(told).toEqual([A])
    const reader = createPgCheckpointStore({ db: connection(d) })
    expect([reader.load(A), reader.load(B), reader.load(C)]).toEqual([envelope(A, 1), envelope(B, 2), envelope(C, 2)])
    // Nothing of it is staged again for a later round.
    await stale.sync()
    expect(reader.load(A)).toEqual(envelope(A, 1))
  })

  it('should write every checkpoint of a round in one transaction', async () => {
    const d = database()
    d.db.execSync('CREATE TABLE tx_log (xid bigint NOT NULL)')
    d.db.execSync(`CREATE FUNCTION log_tx() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO tx_log VALUES (txid_current()); RETURN NULL; END $$`)
    d.db.execSync('CREATE TRIGGER checkpoints_tx AFTER INSERT OR UPDATE ON checkpoints FOR EACH STATEMENT EXECUTE FUNCTION log_tx()')
    const store = createPgCheckpointStore({ db: d.db })
    const ids = Array.from({ length: 500 }, (_, i) => `many-${String(i).padStart(8, '0')}`)
    for (const id of ids) store.stage(id, envelope(id, 1))
    await store.sync()
    for (const id of ids) store.stage(id, envelope(id, 2))
    await store.sync()
    expect(d.db.querySync('SELECT count(DISTINCT xid)::int AS n FROM tx_log')[0]!.n).toBe(2)
    expect(d.db.querySync('SELECT count(*)::int AS n FROM checkpoints WHERE seq = 2')[0]!.n).toBe(500)
  })

  it('should load and list the checkpoints on another connection after the writer has gone', async () => {
    const d = database()
    const db = connection(d)
    const writer = createPgCheckpointStore({ db })
    writer.stage(A, envelope(A, 1))
    writer.stage(B, () => envelope(B, 4))
    await writer.sync()
    db.close()
    const reader = createPgCheckpointStore({ db: connection(d) })
    expect(reader.list()).toEqual([A, B])
    expect(reader.load(B)).toEqual(envelope(B, 4))
  })

  it('should keep an envelope whose snapshot holds a NUL character, which jsonb refuses', async () => {
    const d = database()
    const store = createPgCheckpointStore({ db: d.db })
    const stored = envelope(A, 1)
    ;(stored.snapshot as { context: Record<string, unknown> }).context.lastToolOutput = 'binary\u0000bytes'
    store.stage(A, stored)
    await store.sync()
    expect(createPgCheckpointStore({ db: connection(d) }).load(A)).toEqual(stored)
  })

  it('should say STATE_CORRUPT, naming the thread, of a checkpoint row that is not an envelope', () => {
    const d = database()
    d.db.execSync(`INSERT INTO checkpoints VALUES ($1, 'running', 0, '', '{"v":3,'), ($2, 'running', 0, '', '{"v":3}')`, [A, B])
    const store = createPgCheckpointStore({ db: d.db })
    for (const id of [A, B]) {
      expect(() => store.load(id)).toThrow(expect.objectContaining({ code: 'STATE_CORRUPT', details: expect.objectContaining({ threadId: id }) }))
    }
  })
})
