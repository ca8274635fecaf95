/**
 * The contract every LeaseStore backend keeps. Not collected directly (vitest.config.ts excludes
 * test/contract): each backend's spec file calls `leaseContract`, which also registers the waits
 * part (leaseWaits.contract.ts). What only a file shared by processes can show (two connections on
 * one leases.db) stays in the SQLite backend's own tests.
 * Known deviations: none. Left open on purpose: which of an owner's live leases `stale` is shown
 * (SQLite picks one per owner in no stated order), and whether a wait's id is reused once that
 * wait has ended (SQLite's rowids may be; the memory store's are not).
 */
import { describe, expect, it } from 'vitest'
import type { Lease, LeaseStore } from '../../persistence/types.js'
import { leaseWaitsContract } from './leaseWaits.contract.js'

export interface LeaseBackend {
  leases: LeaseStore
  destroy?: () => void
}

const me = { id: 'owner-me', pid: 101, host: 'h' }
const other = { id: 'owner-other', pid: 102, host: 'h' }
const third = { id: 'owner-third', pid: 103, host: 'h2' }

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'
const C = 'c-aaaaaaaaaaaa'
const D = 'd-aaaaaaaaaaaa'
const E = 'e-aaaaaaaaaaaa'
const TTL = 30_000

function threadIds(leases: Lease[]): string[] {
  return leases.map((lease) => lease.threadId)
}

export function leaseContract(name: string, create: () => LeaseBackend): void {
  describe(`LeaseStore contract: ${name}`, () => {
    const withLeases = (fn: (leases: LeaseStore) => void) => () => {
      const backend = create()
      try {
        fn(backend.leases)
      } finally {
        backend.leases.close()
        backend.destroy?.()
      }
    }

    describe('acquire', () => {
      it('should take a free lease for the owner at token 1, from now until now + ttl', withLeases((l) => {
        const lease = { threadId: A, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 1_000, expiresAt: 1_000 + TTL, token: 1 }
        expect(l.acquire(A, me, TTL, 1_000)).toEqual({ acquired: true, lease })
        expect(l.get(A)).toEqual(lease)
      }))

      it("should renew its owner's lease: a later expiry, the same token, acquiredAt, pid and host", withLeases((l) => {
        l.acquire(A, me, TTL, 0)
        const renewed = l.acquire(A, { ...me, pid: 999, host: 'elsewhere' }, TTL, 10_000)
        const lease = { threadId: A, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 0, expiresAt: 10_000 + TTL, token: 1 }
        expect(renewed).toEqual({ acquired: true, lease })
        expect(l.get(A)).toEqual(lease)
      }))

      it("should renew its owner's expired lease that nobody took, keeping its token", withLeases((l) => {
        l.acquire(A, me, 1_000, 0)
        expect(l.acquire(A, me, TTL, 5_000)).toMatchObject({ acquired: true, lease: { owner: me.id, acquiredAt: 0, expiresAt: 5_000 + TTL, token: 1 } })
      }))

      it("should refuse another owner's live lease and return it unchanged", withLeases((l) => {
        const theirs = l.acquire(A, other, TTL, 0).lease
        expect(l.acquire(A, me, TTL, TTL - 1)).toEqual({ acquired: false, lease: theirs })
        expect(l.get(A)).toEqual(theirs)
      }))

      it('should count a lease as expired from its expiresAt on, and take it then at the next token', withLeases((l) => {
        l.acquire(A, other, 1_000, 0)
        expect(l.acquire(A, me, TTL, 999).acquired).toBe(false)
        expect(l.acquire(A, me, TTL, 1_000)).toEqual({
          acquired: true,
          lease: { threadId: A, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 1_000, expiresAt: 1_000 + TTL, token: 2 },
        })
      }))

      it('should give a thread a larger token at every change of hands, also after a release or a removal', withLeases((l) => {
        expect(l.acquire(A, me, 1_000, 0).lease.token).toBe(1)
        expect(l.acquire(A, other, 1_000, 1_000).lease.token).toBe(2)
        l.release(A, other.id)
        expect(l.acquire(A, third, 1_000, 2_000).lease.token).toBe(3)
        l.remove(A)
        expect(l.acquire(A, me, 1_000, 3_000).lease.token).toBe(4)
      }))
    })

    describe('acquireFresh', () => {
      it('should take a new id at token 1, as acquire would', withLeases((l) => {
        const lease = { threadId: A, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 1_000, expiresAt: 1_000 + TTL, token: 1 }
        expect(l.acquireFresh(A, me, TTL, 1_000)).toEqual({ acquired: true, lease })
        expect(l.get(A)).toEqual(lease)
        expect(l.acquire(B, other, TTL, 2_000).lease.token).toBe(1)
      }))

      it('should decide as acquire does about an id that has a lease after all: refused to another live owner, renewed for its own, taken when expired', withLeases((l) => {
        const theirs = l.acquire(A, other, 1_000, 0).lease
        expect(l.acquireFresh(A, me, TTL, 500)).toEqual({ acquired: false, lease: theirs })
        expect(l.acquireFresh(A, other, TTL, 600)).toEqual({ acquired: true, lease: { ...theirs, expiresAt: 600 + TTL } })
        expect(l.acquireFresh(A, me, TTL, 600 + TTL)).toMatchObject({ acquired: true, lease: { owner: me.id, token: 2 } })
      }))

      it('should hand out a token above the last one of an id whose lease was released', withLeases((l) => {
        l.acquire(A, other, TTL, 0)
        l.acquire(A, other, TTL, 10)
        l.release(A, other.id)
        expect(l.acquireFresh(A, me, TTL, 20)).toMatchObject({ acquired: true, lease: { owner: me.id, token: 2, acquiredAt: 20 } })
        expect(l.acquire(A, third, TTL, 20 + TTL).lease.token).toBe(3)
      }))
    })

    describe('acquireMany', () => {
      it("should take free and expired leases, extend the owner's own, and leave other owners' live leases held", withLeases((l) => {
        l.acquire(B, me, 1_000, 0)
        l.acquire(C, other, 1_000, 0)
        const live = l.acquire(D, other, 60_000, 0).lease
        const result = l.acquireMany([A, B, C, D], me, TTL, 5_000)
        expect(result.acquired).toEqual([A, B, C])
        expect(result.held).toEqual([live])
        // Only the leases that changed hands now: B was the owner's already and keeps its token.
        expect(result.tokens).toEqual(new Map([[A, 1], [C, 2]]))
        expect(l.get(B)).toMatchObject({ owner: me.id, acquiredAt: 0, expiresAt: 5_000 + TTL, token: 1 })
        expect(l.get(C)).toEqual({ threadId: C, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 5_000, expiresAt: 5_000 + TTL, token: 2 })
        expect(l.get(D)).toEqual(live)
      }))

      it('should list the held leases in the order their ids were given', withLeases((l) => {
        l.acquire(A, other, TTL, 0)
        l.acquire(B, third, TTL, 0)
        expect(threadIds(l.acquireMany([B, C, A], me, TTL, 0).held)).toEqual([B, A])
      }))

      it('should take an id given twice once', withLeases((l) => {
        const result = l.acquireMany([A, A], me, TTL, 0)
        expect(result.acquired).toEqual([A])
        expect(result.tokens).toEqual(new Map([[A, 1]]))
        expect(l.list()).toEqual([{ threadId: A, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 0, expiresAt: TTL, token: 1 }])
      }))

      it('should ask stale once per other owner with a live lease among the ids, showing one of those leases', withLeases((l) => {
        l.acquire(A, other, TTL, 0)
        l.acquire(B, other, TTL, 0)
        l.acquire(C, third, 1_000, 0)
        l.acquire(D, me, TTL, 0)
        // Among the ids nowhere: its owner is not asked about it.
        l.acquire(E, third, TTL, 0)
        const asked: Lease[] = []
        const result = l.acquireMany([A, B, C, D], me, TTL, 5_000, (lease) => {
          asked.push(lease)
          return false
        })
        expect(asked).toHaveLength(1)
        expect(asked[0]).toEqual(l.get(asked[0]!.threadId))
        expect([A, B]).toContain(asked[0]!.threadId)
        expect(threadIds(result.held)).toEqual([A, B])
        expect(result.acquired).toEqual([C, D])
      }))

      it('should take every live lease of an owner judged stale at the next token, and leave the others held', withLeases((l) => {
        l.acquire(A, other, TTL, 0)
        l.acquire(B, other, TTL, 0)
        l.acquire(C, third, TTL, 0)
        const result = l.acquireMany([A, B, C], me, TTL, 5_000, (lease) => lease.owner === other.id)
        expect(result.acquired).toEqual([A, B])
        expect(threadIds(result.held)).toEqual([C])
        expect(result.tokens).toEqual(new Map([[A, 2], [B, 2]]))
        expect(l.get(A)).toMatchObject({ owner: me.id, acquiredAt: 5_000, token: 2 })
      }))

      it('should take nothing and throw what stale threw', withLeases((l) => {
        const theirs = l.acquire(A, other, TTL, 0).lease
        l.acquire(C, me, 1_000, 0)
        const failure = new Error('cannot tell')
        expect(() => l.acquireMany([B, A, C], me, TTL, 5_000, () => { throw failure })).toThrow(failure)
        expect(l.list()).toEqual([theirs, { threadId: C, owner: me.id, pid: me.pid, host: me.host, acquiredAt: 0, expiresAt: 1_000, token: 1 }])
      }))

      it('should leave the same leases as acquire taken one by one', () => {
        const batch = create()
        const single = create()
        try {
          for (const { leases } of [batch, single]) {
            leases.acquire(A, other, 1_000, 0)
            leases.acquire(B, other, 60_000, 0)
            leases.acquire(C, me, 1_000, 0)
            leases.acquire(D, third, 1_000, 0)
            leases.release(D, third.id)
          }
          const ids = [A, B, C, D, E, A]
          const result = batch.leases.acquireMany(ids, me, TTL, 5_000)
          const one = ids.map((id) => single.leases.acquire(id, me, TTL, 5_000))
          expect(batch.leases.list()).toEqual(single.leases.list())
          expect(result.held).toEqual(one.filter((taken) => !taken.acquired).map((taken) => taken.lease))
        } finally {
          for (const backend of [batch, single]) {
            backend.leases.close()
            backend.destroy?.()
          }
        }
      })
    })

    describe('renew', () => {
      it('should extend every lease the owner still holds, and return the ids it no longer holds', withLeases((l) => {
        for (const id of [A, B, D]) l.acquire(id, me, 1_000, 0)
        l.release(B, me.id)
        l.acquire(D, other, TTL, 2_000)
        expect(l.renew(me.id, [A, B, C, D], TTL, 3_000)).toEqual([B, C, D])
        expect(l.get(A)).toMatchObject({ owner: me.id, expiresAt: 3_000 + TTL, token: 1 })
        expect(l.get(D)).toMatchObject({ owner: other.id, expiresAt: 2_000 + TTL })
      }))

      it('should extend a lease of its own that expired while nobody took it', withLeases((l) => {
        l.acquire(A, me, 1_000, 0)
        expect(l.renew(me.id, [A], TTL, 5_000)).toEqual([])
        expect(l.get(A)).toMatchObject({ owner: me.id, acquiredAt: 0, expiresAt: 5_000 + TTL, token: 1 })
      }))
    })

    describe('raiseToken', () => {
      it("should raise the owner's own lease, and hand out tokens above it from then on", withLeases((l) => {
        l.acquire(A, me, TTL, 0)
        // leases.db gave token 1 again while the registry holds a claim at 4 (lost commits, or a new file).
        expect(l.raiseToken(A, me.id, 5)).toBe(true)
        expect(l.get(A)).toMatchObject({ owner: me.id, token: 5 })
        l.release(A, me.id)
        expect(l.acquire(A, other, TTL, 1_000).lease.token).toBe(6)
      }))

      it('should refuse another owner and a thread without a lease, changing nothing', withLeases((l) => {
        l.acquire(A, me, TTL, 0)
        expect(l.raiseToken(A, other.id, 9)).toBe(false)
        expect(l.raiseToken(B, me.id, 9)).toBe(false)
        expect(l.get(A)).toMatchObject({ owner: me.id, token: 1 })
        expect(l.get(B)).toBeNull()
        l.release(A, me.id)
        expect(l.acquire(A, other, TTL, 0).lease.token).toBe(2)
        expect(l.acquire(B, other, TTL, 0).lease.token).toBe(1)
      }))

      it('should never lower a token', withLeases((l) => {
        l.acquire(A, me, 1_000, 0)
        l.acquire(A, other, 1_000, 1_000)
        expect(l.raiseToken(A, other.id, 1)).toBe(true)
        expect(l.get(A)?.token).toBe(2)
        l.release(A, other.id)
        expect(l.acquire(A, me, TTL, 2_000).lease.token).toBe(3)
      }))
    })

    describe('release', () => {
      it("should free the owner's lease, for anyone to take at the next token", withLeases((l) => {
        l.acquire(A, me, TTL, 0)
        l.release(A, me.id)
        expect(l.get(A)).toBeNull()
        expect(l.acquire(A, other, TTL, 1)).toMatchObject({ acquired: true, lease: { owner: other.id, token: 2 } })
      }))

      it("should leave another owner's lease in place", withLeases((l) => {
        const theirs = l.acquire(A, other, TTL, 0).lease
        l.release(A, me.id)
        expect(l.get(A)).toEqual(theirs)
      }))
    })

    describe('get and list', () => {
      it('should return null for a thread without a lease', withLeases((l) => {
        expect(l.get(A)).toBeNull()
        expect(l.list()).toEqual([])
      }))

      it('should list every lease, expired and revoked ones too, ordered by thread id', withLeases((l) => {
        l.acquire(C, me, TTL, 0)
        l.acquire(A, other, 1_000, 0)
        l.acquire(B, third, TTL, 0)
        l.revoke(B)
        const listed = l.list()
        expect(threadIds(listed)).toEqual([A, B, C])
        expect(listed).toEqual([l.get(A), l.get(B), l.get(C)])
      }))

      it('should hand out copies: changing a returned lease, or the one shown to stale, changes nothing stored', withLeases((l) => {
        const stored = { ...l.acquire(A, other, TTL, 0).lease }
        const spoil = (lease: Lease | null | undefined) => Object.assign(lease ?? {}, { owner: me.id, expiresAt: 0, token: 99 })
        spoil(l.acquire(A, other, TTL, 0).lease)
        spoil(l.get(A))
        spoil(l.list()[0])
        spoil(l.heldByOthers(me.id)[0])
        spoil(l.acquireMany([A], me, TTL, 0).held[0])
        spoil(l.acquire(A, me, TTL, 0).lease)
        l.acquireMany([A], me, TTL, 0, (lease) => {
          spoil(lease)
          return false
        })
        expect(l.get(A)).toEqual(stored)
      }))
    })

    describe('remove', () => {
      it('should remove a live lease of another owner and return it', withLeases((l) => {
        const theirs = l.acquire(A, other, TTL, 0).lease
        expect(l.remove(A)).toEqual(theirs)
        expect(l.get(A)).toBeNull()
      }))

      it('should return null when there is no lease', withLeases((l) => {
        expect(l.remove(A)).toBeNull()
      }))
    })

    describe('removeIf', () => {
      it('should remove the lease while it is still the one given, renewed or not', withLeases((l) => {
        const seen = l.acquire(A, other, TTL, 0).lease
        l.renew(other.id, [A], TTL, 5_000)
        expect(l.removeIf(seen)).toBe(true)
        expect(l.get(A)).toBeNull()
      }))

      it('should free it once when two processes both found it stale: the later removal leaves the lease the earlier one took', withLeases((l) => {
        l.acquire(A, third, TTL, 0)
        const seenByMe = l.get(A)!
        const seenByOther = l.get(A)!
        expect(l.removeIf(seenByOther)).toBe(true)
        expect(l.acquire(A, other, TTL, 1_000)).toMatchObject({ acquired: true, lease: { owner: other.id, token: 2 } })
        expect(l.removeIf(seenByMe)).toBe(false)
        expect(l.get(A)).toMatchObject({ owner: other.id, token: 2 })
      }))

      it('should leave the same owner\'s lease when it was taken again since, with a new token', withLeases((l) => {
        const seen = l.acquire(A, other, 1_000, 0).lease
        l.release(A, other.id)
        l.acquire(A, other, TTL, 1_000)
        expect(l.removeIf(seen)).toBe(false)
        expect(l.get(A)).toMatchObject({ owner: other.id, token: 2 })
      }))
    })

    describe('heldByOthers', () => {
      it('should list the leases of every other owner, expired ones too, ordered by thread id', withLeases((l) => {
        l.acquire(C, third, TTL, 0)
        l.acquire(B, me, TTL, 0)
        l.acquire(A, other, 1_000, 0)
        expect(l.heldByOthers(me.id)).toEqual([l.get(A), l.get(C)])
        expect(threadIds(l.heldByOthers(other.id))).toEqual([B, C])
        expect(l.heldByOthers('owner-nobody')).toEqual(l.list())
      }))
    })

    describe('revoke', () => {
      it('should return the lease as it was, and null when there is none', withLeases((l) => {
        const mine = l.acquire(A, me, TTL, 0).lease
        expect(l.revoke(A)).toEqual(mine)
        expect(l.revoke(B)).toBeNull()
      }))

      it("should make the owner's renewal find the lease gone, and count it as another's", withLeases((l) => {
        l.acquire(A, me, TTL, 0)
        l.acquire(B, me, TTL, 0)
        l.revoke(A)
        expect(l.renew(me.id, [A, B], TTL, 1_000)).toEqual([A])
        expect(l.acquire(A, me, TTL, 1_000).acquired).toBe(false)
        expect(threadIds(l.heldByOthers(me.id))).toEqual([A])
      }))

      it("should let nobody take the thread before the lease's expiry, not even once its owner releases it", withLeases((l) => {
        l.acquire(A, me, TTL, 0)
        l.revoke(A)
        l.release(A, me.id)
        expect(l.acquire(A, other, TTL, TTL - 1).acquired).toBe(false)
        expect(threadIds(l.acquireMany([A], other, TTL, TTL - 1).held)).toEqual([A])
        expect(l.acquire(A, other, TTL, TTL)).toMatchObject({ acquired: true, lease: { owner: other.id, token: 2 } })
      }))

      it("should keep the lease's expiry, token, pid and host, so a thread whose owner died is freed at once", withLeases((l) => {
        const mine = l.acquire(A, me, TTL, 0).lease
        l.revoke(A)
        const revoked = l.get(A)!
        expect(revoked.owner).not.toBe(me.id)
        expect(revoked).toEqual({ ...mine, owner: revoked.owner })
        const result = l.acquireMany([A], other, TTL, 1_000, (lease) => lease.pid === me.pid && lease.host === me.host)
        expect(result.tokens).toEqual(new Map([[A, 2]]))
      }))
    })

    leaseWaitsContract(create)

    describe('close', () => {
      it('should allow close to be called twice', () => {
        const backend = create()
        try {
          backend.leases.close()
          expect(() => backend.leases.close()).not.toThrow()
        } finally {
          backend.destroy?.()
        }
      })

      it('should refuse to be used once closed', () => {
        const backend = create()
        try {
          backend.leases.acquire(A, me, TTL, 0)
          backend.leases.close()
          expect(() => backend.leases.get(A)).toThrow()
          expect(() => backend.leases.acquire(B, me, TTL, 0)).toThrow()
        } finally {
          backend.destroy?.()
        }
      })
    })
  })
}
