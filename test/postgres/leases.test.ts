/**
 * The lease store on PostgreSQL: the LeaseStore contract (leases and waits), then what only
 * processes sharing a database can show — two of them racing for the same leases and closing a
 * wait cycle from both ends at once, a writer's FOR SHARE read fencing a take-over, and leases,
 * tokens and waits outliving a connection. The races run in child processes (sides.ts): compile
 * first (`npx tsc -p tsconfig.json`).
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { openPgLeases } from '../../persistence/postgres/pgLeases.js'
import type { Lease } from '../../persistence/types.js'
import { leaseContract } from '../contract/leases.contract.js'
import { tempDir } from '../helpers/dirs.js'
import { dropSchema, freshDatabase } from '../helpers/postgres.js'
import { race, startSide } from './sides.js'

leaseContract('postgres', () => {
  const d = freshDatabase()
  return { leases: openPgLeases({ db: d.db }), destroy: d.destroy }
})

const dead = { id: 'owner-dead', pid: 999_999, host: 'gone' }
const TTL = 30_000
const ids = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}${String(i).padStart(3, '0')}-aaaaaaaaaaaa`)

describe('PostgreSQL leases shared by processes', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup()
  })
  const open = () => {
    const d = freshDatabase()
    const leases = openPgLeases({ db: d.db })
    cleanups.push(() => {
      leases.close()
      d.destroy()
    })
    return { ...d, leases }
  }

  it('should let exactly one of two processes take each expired lease they both reach for at once, at a larger token', async () => {
    const { url, schema, leases } = open()
    const threads = ids('t', 40)
    // The dead owner held them at token 3 (its lease changed hands twice before).
    for (const id of threads) {
      leases.acquire(id, dead, 1_000, 0)
      leases.raiseToken(id, dead.id, 3)
    }
    const steps = threads.map((id) => ({ op: 'acquire' as const, id, ttl: TTL, now: 5_000 }))
    const [first, second] = (await race(url, schema, [
      { owner: 'owner-one', steps },
      { owner: 'owner-two', steps },
    ])) as Array<Array<{ acquired: boolean; lease: Lease }>>
    threads.forEach((id, i) => {
      const [one, two] = [first![i]!, second![i]!]
      expect([one.acquired, two.acquired].sort()).toEqual([false, true])
      const winner = one.acquired ? one : two
      const loser = one.acquired ? two : one
      expect(winner.lease).toMatchObject({ threadId: id, acquiredAt: 5_000, expiresAt: 5_000 + TTL, token: 4 })
      // The loser was shown the winner's lease, which is the one stored.
      expect(loser.lease).toEqual(winner.lease)
      expect(leases.get(id)).toEqual(winner.lease)
    })
  })

  it('should split overlapping batches of two processes taking leases at once: each thread to one of them, as if one batch ran first', async () => {
    const { url, schema, leases } = open()
    const rounds = Array.from({ length: 20 }, (_, r) => ids(`r${r}-`, 30))
    // Every other thread was held by a dead owner whose lease expired: it changes hands at token 2.
    for (const round of rounds) round.forEach((id, i) => i % 2 === 0 && leases.acquire(id, dead, 1_000, 0))
    const [first, second] = (await race(url, schema, [
      { owner: 'owner-one', steps: rounds.map((round) => ({ op: 'acquireMany' as const, ids: round.slice(0, 20), ttl: TTL, now: 5_000 })) },
      { owner: 'owner-two', steps: rounds.map((round) => ({ op: 'acquireMany' as const, ids: round.slice(10), ttl: TTL, now: 5_000 })) },
    ])) as Array<Array<{ acquired: string[]; held: Lease[]; tokens: Array<[string, number]> }>>
    rounds.forEach((round, r) => {
      const [one, two] = [first![r]!, second![r]!]
      const overlap = round.slice(10, 20)
      // The batch that ran first took all of its threads; the other took all but the overlap, held by the first.
      const oneFirst = one.acquired.length === 20
      const [winner, loser, loserIds, winnerOwner] = oneFirst ? [one, two, round.slice(10), 'owner-one'] : [two, one, round.slice(0, 20), 'owner-two']
      expect(winner.held).toEqual([])
      expect(loser.acquired).toEqual(loserIds.filter((id) => !overlap.includes(id)))
      expect(loser.held.map((lease) => [lease.threadId, lease.owner])).toEqual(overlap.map((id) => [id, winnerOwner]))
      for (const [id, token] of [...one.tokens, ...two.tokens]) expect(token).toBe(round.indexOf(id) % 2 === 0 ? 2 : 1)
      for (const id of round) expect(leases.get(id)!.owner).toBe(one.acquired.includes(id) ? 'owner-one' : 'owner-two')
      expect(one.acquired.filter((id) => two.acquired.includes(id))).toEqual([])
    })
  })

  it('should refuse one of two waits recorded at once by two processes when together they close a cycle', async () => {
    const { url, schema, leases } = open()
    const pairs = Array.from({ length: 30 }, (_, i) => [`a${i}-aaaaaaaaaaaa`, `b${i}-aaaaaaaaaaaa`] as const)
    for (const [a, b] of pairs) {
      leases.acquire(a, { id: 'owner-one', pid: 1, host: 'h' }, TTL, Date.now())
      leases.acquire(b, { id: 'owner-two', pid: 2, host: 'h' }, TTL, Date.now())
    }
    const [first, second] = await race(url, schema, [
      // a waits for b on one process while b waits for a on the other.
      { owner: 'owner-one', steps: pairs.map(([a, b]) => ({ op: 'wait' as const, waiter: a, ids: [b] })) },
      { owner: 'owner-two', steps: pairs.map(([a, b]) => ({ op: 'wait' as const, waiter: b, ids: [a] })) },
    ])
    pairs.forEach(([a, b], i) => {
      const outcomes = [first![i], second![i]]
      const refused = outcomes.filter((got) => typeof got === 'object' && (got as { refused: string }).refused === 'would close a cycle')
      expect(refused).toHaveLength(1)
      expect(outcomes.filter((got) => typeof got === 'number')).toHaveLength(1)
      // What stays recorded is the wait that was let through, seen by the other owner.
      const kept = typeof first![i] === 'number' ? { owner: 'owner-one', wait: { waiter: a, failFast: false, ids: [b] } } : { owner: 'owner-two', wait: { waiter: b, failFast: false, ids: [a] } }
      expect(leases.waitsOfOthers(kept.owner === 'owner-one' ? 'owner-two' : 'owner-one')).toContainEqual(kept.wait)
    })
    expect(leases.waitsOfOthers('owner-nobody')).toHaveLength(pairs.length)
  })

  it("should make a take-over wait for a writer holding the lease row FOR SHARE, so the writer's check and commit see the old owner throughout", async () => {
    const { url, schema, db, leases } = open()
    const id = 'fenced-aaaaaaaaaaaa'
    leases.acquire(id, dead, 1_000, 0)
    const dir = tempDir('spindle-pg-fence')
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }))
    const go = path.join(dir, 'go')
    const taker = startSide({ url, schema, go, owner: 'owner-taker', steps: [{ op: 'acquire', id, ttl: TTL, now: 5_000 }] })
    await taker.ready
    const observer = new PgBridge({ url })
    cleanups.push(() => observer.close())
    const fence = `SELECT owner, token FROM leases WHERE thread_id = ANY($1) ORDER BY thread_id FOR SHARE`
    db.transactionSync(() => {
      // The stale writer's transaction: it reads its lease, then (here) lets the taker go.
      expect(db.querySync(fence, [[id]])).toEqual([{ owner: dead.id, token: 1 }])
      const writer = db.querySync('SELECT pg_backend_pid() AS pid')[0]!.pid
      fs.writeFileSync(go, '')
      const pause = new Int32Array(new SharedArrayBuffer(4))
      let blocked = 0
      for (let i = 0; i < 20_000 && blocked === 0; i++) {
        blocked = observer.querySync('SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [writer])[0]!.n as number
        if (blocked === 0) Atomics.wait(pause, 0, 0, 5)
      }
      // The taker is stuck behind this transaction's row lock: the lease has not changed hands.
      expect(blocked).toBe(1)
      expect(db.querySync(fence, [[id]])).toEqual([{ owner: dead.id, token: 1 }])
    })
    const [taken] = (await taker.results) as Array<{ acquired: boolean; lease: Lease }>
    expect(taken).toMatchObject({ acquired: true, lease: { owner: 'owner-taker', token: 2 } })
  })

  it('should keep leases, the last tokens handed out and waits when the connection closes and another opens', async () => {
    const { url, schema, db } = freshDatabase()
    const leases = openPgLeases({ db })
    const me = { id: 'owner-me', pid: 1, host: 'h' }
    leases.acquire('kept-aaaaaaaaaaaa', me, TTL, 0)
    leases.acquire('gone-aaaaaaaaaaaa', me, TTL, 0)
    leases.raiseToken('gone-aaaaaaaaaaaa', me.id, 7)
    leases.release('gone-aaaaaaaaaaaa', me.id)
    leases.recordWait(me.id, { waiter: 'kept-aaaaaaaaaaaa', failFast: true, ids: ['gone-aaaaaaaaaaaa'] }, () => {})
    leases.close()
    db.close()

    const again = new PgBridge({ url, schema })
    try {
      const reopened = openPgLeases({ db: again })
      expect(reopened.list()).toEqual([{ threadId: 'kept-aaaaaaaaaaaa', owner: me.id, pid: 1, host: 'h', acquiredAt: 0, expiresAt: TTL, token: 1 }])
      expect(reopened.waitsOfOthers('owner-other')).toEqual([{ waiter: 'kept-aaaaaaaaaaaa', failFast: true, ids: ['gone-aaaaaaaaaaaa'] }])
      // Released at token 7: the next owner gets 8, not 1.
      expect(reopened.acquire('gone-aaaaaaaaaaaa', { id: 'owner-other', pid: 2, host: 'h' }, TTL, 1_000).lease.token).toBe(8)
    } finally {
      again.close()
      await dropSchema(url, schema)
    }
  })

  it('should refuse a closed store with REGISTRY_FAILED, and leave the connection open for the other stores', () => {
    const { db, leases } = open()
    leases.close()
    expect(() => leases.list()).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
    expect(db.querySync('SELECT count(*)::int AS n FROM leases')).toEqual([{ n: 0 }])
  })
})
