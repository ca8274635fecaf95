/**
 * The lease store on a real SQLite file. A batch of thousands (a recovery) is written with one
 * statement per table; it must leave exactly what taking the leases one by one leaves.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import type { LeaseStore } from '../../persistence/types.js'
import { leaseContract } from '../contract/leases.contract.js'
import { tempDir } from '../helpers/dirs.js'

leaseContract('sqlite :memory:', () => ({ leases: openSqliteLeases({ path: ':memory:', durability: 'process' }) }))
leaseContract('sqlite file', () => {
  const dir = tempDir('spindle-leases')
  return { leases: openSqliteLeases({ path: path.join(dir, 'leases.db'), durability: 'fsync' }), destroy: () => fs.rmSync(dir, { recursive: true, force: true }) }
})

const dead = { id: 'owner-dead', pid: 999_999, host: 'h' }
const me = { id: 'owner-me', pid: process.pid, host: 'h' }
const other = { id: 'owner-other', pid: 1, host: 'h' }

function store(): LeaseStore {
  return openSqliteLeases({ path: path.join(tempDir('spindle-leases'), 'leases.db'), durability: 'fsync' })
}

/** Leases as rows, without the store's own ordering. */
function rows(leases: LeaseStore) {
  return leases.list().map(({ threadId, owner, pid, host, expiresAt, token }) => ({ threadId, owner, pid, host, expiresAt, token }))
}

describe('taking many leases at once', () => {
  for (const count of [10, 500]) {
    it(`should take ${count} leases as one by one would: fresh ones at token 1, stale ones at the next token, live ones left held`, () => {
      const ids = Array.from({ length: count }, (_, i) => `t${String(i).padStart(4, '0')}-aaaaaaaaaaaa`)
      const batch = store()
      const single = store()
      for (const leases of [batch, single]) {
        // A third held by a dead owner (expired), a third by a live other process, a third by nobody.
        for (const id of ids.filter((_, i) => i % 3 === 0)) leases.acquire(id, dead, 1_000, 0)
        for (const id of ids.filter((_, i) => i % 3 === 1)) leases.acquire(id, other, 60_000, 5_000)
      }
      const stale = (lease: { owner: string }) => lease.owner === dead.id
      const result = batch.acquireMany([...ids, ids[2]!], me, 30_000, 10_000, stale)
      for (const id of [...ids, ids[2]!]) single.acquire(id, me, 30_000, 10_000)

      expect(result.held.map((l) => l.threadId)).toEqual(ids.filter((_, i) => i % 3 === 1))
      expect(result.held.every((l) => l.owner === other.id)).toBe(true)
      expect(rows(batch)).toEqual(rows(single))
      const mine = rows(batch).filter((r) => r.owner === me.id)
      expect(mine).toHaveLength(ids.length - result.held.length)
      expect(mine.every((r) => r.pid === process.pid && r.host === 'h' && r.expiresAt === 40_000)).toBe(true)
      // The dead owner's threads changed hands: their fencing token moved on.
      expect(mine.filter((r) => ids.indexOf(r.threadId) % 3 === 0).every((r) => r.token === 2)).toBe(true)
      expect(mine.filter((r) => ids.indexOf(r.threadId) % 3 === 2).every((r) => r.token === 1)).toBe(true)
      // It says the token of every lease that changed hands to it (what their registry rows are claimed with), and no other.
      expect(result.tokens).toEqual(new Map(mine.map((r) => [r.threadId, r.token])))
      expect(batch.acquireMany(ids.slice(0, 3), me, 30_000, 11_000).tokens).toEqual(new Map())

      // Released and taken again: tokens only ever grow.
      batch.release(ids[0]!, me.id)
      expect(batch.acquireMany([ids[0]!], me, 30_000, 20_000).tokens).toEqual(new Map([[ids[0]!, 3]]))
      expect(batch.get(ids[0]!)!.token).toBe(3)
      batch.close()
      single.close()
    })
  }
})

describe('raising a lease token past a claim the registry holds', () => {
  it("should raise only the owner's own lease, and hand out tokens above it from then on", () => {
    const leases = store()
    const id = 'raise-aaaaaaaaaaaa'
    expect(leases.acquire(id, me, 30_000, 0).lease.token).toBe(1)
    // leases.db gave token 1 again while the registry holds a claim at 4 (lost commits, or a new file).
    expect(leases.raiseToken(id, me.id, 5)).toBe(true)
    expect(leases.get(id)!.token).toBe(5)
    expect(leases.raiseToken(id, other.id, 9)).toBe(false)
    expect(leases.get(id)).toMatchObject({ owner: me.id, token: 5 })
    leases.release(id, me.id)
    expect(leases.acquire(id, other, 30_000, 1_000).lease.token).toBe(6)
    leases.close()
  })
})

describe('removing a stale lease', () => {
  it('should free it once when two processes both found it stale: the later removal leaves the lease the earlier one took', () => {
    const leases = store()
    leases.acquire('t-aaaaaaaaaaaa', dead, 60_000, 0)
    // Both read the dead owner's lease and judge it stale.
    const seenByMe = leases.get('t-aaaaaaaaaaaa')!
    const seenByOther = leases.get('t-aaaaaaaaaaaa')!
    expect(leases.removeIf(seenByOther)).toBe(true)
    const taken = leases.acquire('t-aaaaaaaaaaaa', other, 60_000, 1_000)
    expect(taken).toMatchObject({ acquired: true, lease: { owner: other.id, token: 2 } })
    // The slower one must not remove what the other process holds now.
    expect(leases.removeIf(seenByMe)).toBe(false)
    expect(leases.get('t-aaaaaaaaaaaa')).toMatchObject({ owner: other.id, token: 2 })
    expect(leases.acquire('t-aaaaaaaaaaaa', me, 60_000, 1_000)).toMatchObject({ acquired: false, lease: { owner: other.id } })
    expect(leases.heldByOthers(me.id).map((l) => l.owner)).toEqual([other.id])
    expect(leases.heldByOthers(other.id)).toEqual([])
    leases.close()
  })
})

describe('waits in progress, shared by every process on the directory', () => {
  const a = 'a-aaaaaaaaaaaa'
  const b = 'b-aaaaaaaaaaaa'
  const c = 'c-aaaaaaaaaaaa'

  it("should show a check the waits of other owners that still hold their waiter's lease, and never its own", () => {
    const leases = store()
    leases.acquire(a, other, 60_000, 0)
    leases.acquire(b, me, 60_000, 0)
    leases.recordWait(other.id, { waiter: a, failFast: true, ids: [b] }, () => {})
    const seen: unknown[] = []
    leases.recordWait(me.id, { waiter: b, failFast: false, ids: [c] }, (others) => seen.push(others))
    expect(seen).toEqual([[{ waiter: a, failFast: true, ids: [b] }]])
    // The other side sees this owner's wait, not its own.
    leases.recordWait(other.id, { waiter: a, failFast: false, ids: [c] }, (others) => seen.push(others))
    expect(seen[1]).toEqual([{ waiter: b, failFast: false, ids: [c] }])
    // Read outside a recording (a fail-fast wait checked again as its way out closes): the same view.
    expect(leases.waitsOfOthers(me.id)).toEqual([
      { waiter: a, failFast: true, ids: [b] },
      { waiter: a, failFast: false, ids: [c] },
    ])
    expect(leases.waitsOfOthers(other.id)).toEqual([{ waiter: b, failFast: false, ids: [c] }])
  })

  it('should drop a wait once its owner no longer holds the waiter (taken over after a crash, or released)', () => {
    const leases = store()
    leases.acquire(a, dead, 1_000, 0)
    leases.acquire(c, me, 60_000, 0)
    leases.recordWait(dead.id, { waiter: a, failFast: false, ids: [b] }, () => {})
    const seen: unknown[] = []
    leases.recordWait(me.id, { waiter: c, failFast: false, ids: [] }, (others) => seen.push(others))
    expect(seen.pop()).toEqual([{ waiter: a, failFast: false, ids: [b] }])
    // The dead owner's thread is taken over: its wait is over (the new owner runs it again if it still waits).
    leases.acquire(a, me, 60_000, 5_000)
    leases.recordWait(other.id, { waiter: c, failFast: false, ids: [] }, (others) => seen.push(others))
    expect(seen.pop()).toEqual([{ waiter: c, failFast: false, ids: [] }])
    // Released (the thread stopped here): over too.
    leases.release(c, me.id)
    leases.recordWait(other.id, { waiter: b, failFast: false, ids: [] }, (others) => seen.push(others))
    expect(seen.pop()).toEqual([])
  })

  it('should record nothing when the check refuses, and throw what the check threw', () => {
    const leases = store()
    leases.acquire(a, other, 60_000, 0)
    leases.acquire(b, me, 60_000, 0)
    leases.recordWait(other.id, { waiter: a, failFast: false, ids: [b] }, () => {})
    const refusal = new Error('would close a cycle')
    expect(() => leases.recordWait(me.id, { waiter: b, failFast: false, ids: [a] }, () => { throw refusal })).toThrow(refusal)
    const seen: unknown[] = []
    leases.recordWait(other.id, { waiter: a, failFast: false, ids: [c] }, (others) => seen.push(others))
    expect(seen).toEqual([[]])
  })

  it('should forget a wait that ended, and every wait of an owner that closed', () => {
    const leases = store()
    for (const id of [a, b]) leases.acquire(id, me, 60_000, 0)
    const first = leases.recordWait(me.id, { waiter: a, failFast: false, ids: [c] }, () => {})
    leases.recordWait(me.id, { waiter: b, failFast: false, ids: [c] }, () => {})
    const seen: unknown[] = []
    const look = () => leases.recordWait(other.id, { waiter: c, failFast: false, ids: [] }, (others) => seen.push(others))
    look()
    expect(seen.pop()).toHaveLength(2)
    // Another owner cannot end this owner's wait.
    leases.endWait(other.id, first)
    look()
    expect(seen.pop()).toHaveLength(2)
    leases.endWait(me.id, first)
    look()
    expect(seen.pop()).toEqual([{ waiter: b, failFast: false, ids: [c] }])
    leases.endWaitsOf(me.id)
    look()
    expect(seen.pop()).toEqual([])
  })
})
