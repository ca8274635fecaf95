/**
 * The lease store on a real SQLite file. A batch of thousands (a recovery) is written with one
 * statement per table; it must leave exactly what taking the leases one by one leaves.
 */
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import type { LeaseStore } from '../../persistence/types.js'
import { tempDir } from '../helpers/dirs.js'

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

      // Released and taken again: tokens only ever grow.
      batch.release(ids[0]!, me.id)
      batch.acquireMany([ids[0]!], me, 30_000, 20_000)
      expect(batch.get(ids[0]!)!.token).toBe(3)
      batch.close()
      single.close()
    })
  }
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
