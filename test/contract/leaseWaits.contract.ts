/**
 * The part of the LeaseStore contract about waits in progress (`recordWait`, `waitsOfOthers`,
 * `endWait`, `endWaitsOf`): the wait-for graph every process on a data directory shares, where a
 * wait counts while its owner holds its waiter's lease. Registered by `leaseContract`.
 */
import { describe, expect, it } from 'vitest'
import type { LeaseStore } from '../../persistence/types.js'
import type { LeaseBackend } from './leases.contract.js'

const me = { id: 'owner-me', pid: 101, host: 'h' }
const other = { id: 'owner-other', pid: 102, host: 'h' }
const third = { id: 'owner-third', pid: 103, host: 'h2' }

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'
const C = 'c-aaaaaaaaaaaa'
const D = 'd-aaaaaaaaaaaa'
const E = 'e-aaaaaaaaaaaa'
const TTL = 30_000

export function leaseWaitsContract(create: () => LeaseBackend): void {
  describe('waits', () => {
    const withLeases = (fn: (leases: LeaseStore) => void) => () => {
      const backend = create()
      try {
        fn(backend.leases)
      } finally {
        backend.leases.close()
        backend.destroy?.()
      }
    }

    it("should show a check the waits of other owners that still hold their waiter's lease, and never its own", withLeases((l) => {
      l.acquire(A, other, TTL, 0)
      l.acquire(B, me, TTL, 0)
      l.recordWait(other.id, { waiter: A, failFast: true, ids: [B] }, () => {})
      const seen: unknown[] = []
      l.recordWait(me.id, { waiter: B, failFast: false, ids: [C] }, (others) => seen.push(others))
      l.recordWait(other.id, { waiter: A, failFast: false, ids: [C] }, (others) => seen.push(others))
      expect(seen).toEqual([[{ waiter: A, failFast: true, ids: [B] }], [{ waiter: B, failFast: false, ids: [C] }]])
    }))

    it('should give the same view outside a recording, in the order the waits were recorded', withLeases((l) => {
      l.acquire(A, other, TTL, 0)
      l.acquire(B, me, TTL, 0)
      l.acquire(C, third, TTL, 0)
      l.recordWait(other.id, { waiter: A, failFast: true, ids: [B] }, () => {})
      l.recordWait(third.id, { waiter: C, failFast: false, ids: [] }, () => {})
      l.recordWait(other.id, { waiter: A, failFast: false, ids: [C, D] }, () => {})
      l.recordWait(me.id, { waiter: B, failFast: false, ids: [C] }, () => {})
      expect(l.waitsOfOthers(me.id)).toEqual([
        { waiter: A, failFast: true, ids: [B] },
        { waiter: C, failFast: false, ids: [] },
        { waiter: A, failFast: false, ids: [C, D] },
      ])
      expect(l.waitsOfOthers(other.id)).toEqual([
        { waiter: C, failFast: false, ids: [] },
        { waiter: B, failFast: false, ids: [C] },
      ])
    }))

    it('should record nothing when the check throws, and throw what it threw', withLeases((l) => {
      l.acquire(A, other, TTL, 0)
      l.acquire(B, me, TTL, 0)
      l.recordWait(other.id, { waiter: A, failFast: false, ids: [B] }, () => {})
      const refusal = new Error('would close a cycle')
      expect(() => l.recordWait(me.id, { waiter: B, failFast: false, ids: [A] }, () => { throw refusal })).toThrow(refusal)
      expect(l.waitsOfOthers(other.id)).toEqual([])
    }))

    it('should drop a wait once its owner no longer holds the waiter: taken over, released or revoked', withLeases((l) => {
      l.acquire(A, other, 1_000, 0)
      l.acquire(B, other, TTL, 0)
      l.acquire(C, other, TTL, 0)
      for (const waiter of [A, B, C]) l.recordWait(other.id, { waiter, failFast: false, ids: [D] }, () => {})
      expect(l.waitsOfOthers(me.id)).toHaveLength(3)
      // Taken over after a crash: the new owner runs the wait again if the thread still waits.
      l.acquire(A, me, TTL, 5_000)
      l.release(B, other.id)
      l.revoke(C)
      expect(l.waitsOfOthers(me.id)).toEqual([])
      const seen: unknown[] = []
      l.recordWait(me.id, { waiter: A, failFast: false, ids: [] }, (others) => seen.push(others))
      expect(seen).toEqual([[]])
    }))

    it('should not bring a dropped wait back when its owner takes the waiter again', withLeases((l) => {
      l.acquire(A, other, TTL, 0)
      l.recordWait(other.id, { waiter: A, failFast: false, ids: [B] }, () => {})
      l.release(A, other.id)
      // The next recording drops the waits that are over.
      l.recordWait(me.id, { waiter: C, failFast: false, ids: [] }, () => {})
      l.acquire(A, other, TTL, 1_000)
      expect(l.waitsOfOthers(me.id)).toEqual([])
    }))

    it("should not count a wait whose owner never held its waiter's lease", withLeases((l) => {
      l.acquire(A, third, TTL, 0)
      l.recordWait(other.id, { waiter: A, failFast: false, ids: [B] }, () => {})
      l.recordWait(other.id, { waiter: B, failFast: false, ids: [A] }, () => {})
      expect(l.waitsOfOthers(me.id)).toEqual([])
    }))

    it('should keep counting a wait whose lease expired while nobody took it (its owner still holds it)', withLeases((l) => {
      l.acquire(A, other, 1_000, 0)
      l.recordWait(other.id, { waiter: A, failFast: false, ids: [B] }, () => {})
      l.acquire(B, me, TTL, 5_000)
      const seen: unknown[] = []
      l.recordWait(me.id, { waiter: B, failFast: false, ids: [] }, (others) => seen.push(others))
      expect(seen).toEqual([[{ waiter: A, failFast: false, ids: [B] }]])
    }))

    it('should give every wait in progress its own id', withLeases((l) => {
      l.acquire(A, me, TTL, 0)
      l.acquire(B, other, TTL, 0)
      const ids = [
        l.recordWait(me.id, { waiter: A, failFast: false, ids: [C] }, () => {}),
        l.recordWait(me.id, { waiter: A, failFast: true, ids: [D] }, () => {}),
        l.recordWait(other.id, { waiter: B, failFast: false, ids: [C] }, () => {}),
      ]
      expect(new Set(ids).size).toBe(3)
      expect(ids.every((id) => Number.isInteger(id))).toBe(true)
    }))

    it('should end a wait only for its owner, and every wait of an owner that closed', withLeases((l) => {
      for (const id of [A, B]) l.acquire(id, me, TTL, 0)
      const first = l.recordWait(me.id, { waiter: A, failFast: false, ids: [C] }, () => {})
      l.recordWait(me.id, { waiter: B, failFast: false, ids: [C] }, () => {})
      l.endWait(other.id, first)
      expect(l.waitsOfOthers(other.id)).toHaveLength(2)
      l.endWait(me.id, first)
      expect(l.waitsOfOthers(other.id)).toEqual([{ waiter: B, failFast: false, ids: [C] }])
      l.endWaitsOf(me.id)
      expect(l.waitsOfOthers(other.id)).toEqual([])
    }))

    it('should keep what was recorded, whatever the caller or a check does to the arrays afterwards', withLeases((l) => {
      l.acquire(A, other, TTL, 0)
      l.acquire(B, me, TTL, 0)
      const wait = { waiter: A, failFast: false, ids: [B] }
      l.recordWait(other.id, wait, () => {})
      wait.ids.push(C)
      l.recordWait(me.id, { waiter: B, failFast: false, ids: [] }, (others) => {
        others[0]?.ids.push(D)
        others.pop()
      })
      l.waitsOfOthers(me.id)[0]?.ids.push(E)
      expect(l.waitsOfOthers(me.id)).toEqual([{ waiter: A, failFast: false, ids: [B] }])
    }))
  })
}
