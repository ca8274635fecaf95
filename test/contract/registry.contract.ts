/**
 * The contract every Registry backend keeps. Not collected directly (vitest.config.ts excludes
 * test/contract): each backend's spec file calls `registryContract`.
 * Known deviations: none.
 */
import { describe, expect, it } from 'vitest'
import type { Cost, RegisterThread, Registry, ThreadStatus } from '../../persistence/types.js'

export interface RegistryBackend {
  registry: Registry
  destroy?: () => void
}

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'
const GHOST = 'ghost-aaaaaaaaaaaa'
const COST: Cost = { turns: 3, inputTokens: 10, outputTokens: 5, spend: 0.5 }

/** A registration whose directive name is the id's prefix ('a' for 'a-…'). */
function thread(id: string, extra: Partial<RegisterThread> = {}): RegisterThread {
  const name = id.split('-')[0]!
  return { id, directiveName: name, directive: { name, prompt: 'p' }, nonce: `nonce-${id}`, createdAt: 1_000, ...extra }
}

function ids(records: Array<{ id: string }>): string[] {
  return records.map((record) => record.id)
}

export function registryContract(name: string, create: () => RegistryBackend): void {
  describe(`Registry contract: ${name}`, () => {
    const withRegistry = (fn: (registry: Registry) => void) => () => {
      const backend = create()
      try {
        fn(backend.registry)
      } finally {
        backend.registry.close()
        backend.destroy?.()
      }
    }

    describe('register and get', () => {
      it('should return every field of a registered thread', withRegistry((r) => {
        r.register(thread(A, { parentId: 'p-aaaaaaaaaaaa', previousThreadId: 'v0-aaaaaaaaaaaa', createdAt: 5 }))
        expect(r.get(A)).toEqual({
          id: A,
          directiveName: 'a',
          directive: { name: 'a', prompt: 'p' },
          parentId: 'p-aaaaaaaaaaaa',
          previousThreadId: 'v0-aaaaaaaaaaaa',
          status: 'created',
          nonce: `nonce-${A}`,
          createdAt: 5,
          updatedAt: 5,
          cost: null,
          result: null,
          error: null,
        })
      }))

      it('should store a missing parent and predecessor as null', withRegistry((r) => {
        r.register(thread(A))
        expect(r.get(A)).toMatchObject({ parentId: null, previousThreadId: null })
      }))

      it('should return null for an unknown id', withRegistry((r) => {
        expect(r.get(GHOST)).toBeNull()
      }))

      it('should refuse to register an id twice, naming it', withRegistry((r) => {
        r.register(thread(A))
        expect(() => r.register(thread(A, { createdAt: 2_000 }))).toThrow(
          expect.objectContaining({ code: 'REGISTRY_FAILED', message: expect.stringContaining(A) }),
        )
        expect(r.get(A)?.createdAt).toBe(1_000)
      }))
    })

    describe('updates', () => {
      it('should change status and updatedAt, keeping createdAt', withRegistry((r) => {
        r.register(thread(A))
        r.updateStatus(A, 'running', 2_000)
        expect(r.get(A)).toMatchObject({ status: 'running', updatedAt: 2_000, createdAt: 1_000 })
      }))

      it('should throw THREAD_NOT_FOUND naming the id when updating the status of an unknown thread', withRegistry((r) => {
        expect(() => r.updateStatus(GHOST, 'running', 1)).toThrow(
          expect.objectContaining({ code: 'THREAD_NOT_FOUND', message: expect.stringContaining(GHOST) }),
        )
      }))

      it('should throw THREAD_NOT_FOUND naming the id when storing a result for an unknown thread', withRegistry((r) => {
        expect(() => r.setResult(GHOST, { result: 1 })).toThrow(
          expect.objectContaining({ code: 'THREAD_NOT_FOUND', message: expect.stringContaining(GHOST) }),
        )
      }))

      it('should throw THREAD_NOT_FOUND naming the id when storing a cost for an unknown thread', withRegistry((r) => {
        expect(() => r.updateCostSnapshot(GHOST, COST)).toThrow(
          expect.objectContaining({ code: 'THREAD_NOT_FOUND', message: expect.stringContaining(GHOST) }),
        )
      }))

      it('should store a result', withRegistry((r) => {
        r.register(thread(A))
        r.setResult(A, { result: { answer: 42, parts: ['x', null] } })
        expect(r.get(A)).toMatchObject({ result: { answer: 42, parts: ['x', null] }, error: null })
      }))

      it('should store an error', withRegistry((r) => {
        r.register(thread(A))
        r.setResult(A, { error: { code: 'MODEL_FAILED', message: 'failed' } })
        expect(r.get(A)).toMatchObject({ result: null, error: { code: 'MODEL_FAILED', message: 'failed' } })
      }))

      it('should read an undefined result back as null', withRegistry((r) => {
        r.register(thread(A))
        r.setResult(A, { result: undefined, error: null })
        expect(r.get(A)).toMatchObject({ result: null, error: null })
      }))

      it('should replace the cost snapshot', withRegistry((r) => {
        r.register(thread(A))
        r.updateCostSnapshot(A, { turns: 1, inputTokens: 1, outputTokens: 1, spend: 0 })
        r.updateCostSnapshot(A, COST)
        expect(r.get(A)?.cost).toEqual(COST)
      }))
    })

    describe('listing', () => {
      const ALL: readonly ThreadStatus[] = ['created', 'running', 'suspended', 'completed', 'error', 'cancelled', 'continued']
      /** One thread per status, t0 (created) … t6 (continued), created in that order. */
      const onePerStatus = (r: Registry) =>
        ALL.forEach((status, i) => {
          const id = `t${i}-aaaaaaaaaaaa`
          r.register(thread(id, { createdAt: i }))
          if (status !== 'created') r.updateStatus(id, status, 100 + i)
        })

      it('should list only created and running threads as active, oldest first', withRegistry((r) => {
        onePerStatus(r)
        expect(r.listActive().map((t) => [t.id, t.status])).toEqual([
          ['t0-aaaaaaaaaaaa', 'created'],
          ['t1-aaaaaaaaaaaa', 'running'],
        ])
      }))

      it('should give the same active threads as id and status only', withRegistry((r) => {
        onePerStatus(r)
        expect(r.activeStatuses()).toEqual([
          { id: 't0-aaaaaaaaaaaa', status: 'created', parentId: null },
          { id: 't1-aaaaaaaaaaaa', status: 'running', parentId: null },
        ])
      }))

      it('should give the threads in any of the given statuses as id, status and parent only', withRegistry((r) => {
        onePerStatus(r)
        const suspended = r.list({ status: 'suspended' }).map((t) => ({ id: t.id, status: t.status, parentId: t.parentId ?? null }))
        expect(suspended).toHaveLength(1)
        expect(r.statuses(['suspended'])).toEqual(suspended)
        expect(r.statuses(['created', 'running'])).toEqual(r.activeStatuses())
        expect(r.statuses([])).toEqual([])
      }))

      it('should list every thread ordered by creation time, then id', withRegistry((r) => {
        r.register(thread('b-aaaaaaaaaaaa', { createdAt: 2 }))
        r.register(thread('c-aaaaaaaaaaaa', { createdAt: 1 }))
        r.register(thread('a-aaaaaaaaaaaa', { createdAt: 2 }))
        expect(ids(r.list())).toEqual(['c-aaaaaaaaaaaa', 'a-aaaaaaaaaaaa', 'b-aaaaaaaaaaaa'])
      }))

      it('should list by one status', withRegistry((r) => {
        onePerStatus(r)
        expect(ids(r.list({ status: 'completed' }))).toEqual(['t3-aaaaaaaaaaaa'])
      }))

      it('should list by several statuses', withRegistry((r) => {
        onePerStatus(r)
        expect(ids(r.list({ status: ['error', 'suspended'] }))).toEqual(['t2-aaaaaaaaaaaa', 't4-aaaaaaaaaaaa'])
      }))

      it('should list at most `limit` threads, oldest first', withRegistry((r) => {
        onePerStatus(r)
        expect(ids(r.list({ limit: 2 }))).toEqual(['t0-aaaaaaaaaaaa', 't1-aaaaaaaaaaaa'])
        expect(ids(r.list({ status: ['completed', 'error', 'cancelled'], limit: 2 }))).toEqual(['t3-aaaaaaaaaaaa', 't4-aaaaaaaaaaaa'])
      }))

      it('should list the children of a thread', withRegistry((r) => {
        r.register(thread('parent-aaaaaaaaaaaa'))
        r.register(thread('c2-aaaaaaaaaaaa', { parentId: 'parent-aaaaaaaaaaaa', createdAt: 3 }))
        r.register(thread('c1-aaaaaaaaaaaa', { parentId: 'parent-aaaaaaaaaaaa', createdAt: 2 }))
        r.register(thread('other-aaaaaaaaaaaa', { parentId: 'elsewhere-aaaaaaaaaaaa' }))
        expect(ids(r.listChildren('parent-aaaaaaaaaaaa'))).toEqual(['c1-aaaaaaaaaaaa', 'c2-aaaaaaaaaaaa'])
        expect(r.listChildren('c1-aaaaaaaaaaaa')).toEqual([])
      }))
    })

    describe('continuation chain', () => {
      const V1 = 'v1-aaaaaaaaaaaa'
      const V2 = 'v2-aaaaaaaaaaaa'
      const V3 = 'v3-aaaaaaaaaaaa'

      it('should return the whole chain oldest first when asked from the middle', withRegistry((r) => {
        r.register(thread(V1, { createdAt: 1 }))
        r.register(thread(V2, { previousThreadId: V1, createdAt: 2 }))
        r.register(thread(V3, { previousThreadId: V2, createdAt: 3 }))
        expect(ids(r.chain(V2))).toEqual([V1, V2, V3])
      }))

      it('should return the same chain from either end', withRegistry((r) => {
        r.register(thread(V1, { createdAt: 1 }))
        r.register(thread(V2, { previousThreadId: V1, createdAt: 2 }))
        r.register(thread(V3, { previousThreadId: V2, createdAt: 3 }))
        expect(ids(r.chain(V1))).toEqual([V1, V2, V3])
        expect(ids(r.chain(V3))).toEqual([V1, V2, V3])
      }))

      it("should name a thread's successor, the oldest when damage forked the chain, and none at its end", withRegistry((r) => {
        r.register(thread(V1, { createdAt: 1 }))
        r.register(thread(V2, { previousThreadId: V1, createdAt: 2 }))
        r.register(thread(V3, { previousThreadId: V1, createdAt: 3 }))
        expect(r.successorOf(V1)).toBe(V2)
        expect(r.successorOf(V2)).toBeNull()
        expect(r.successorOf(GHOST)).toBeNull()
      }))

      it('should return an empty chain for an unknown id', withRegistry((r) => {
        expect(r.chain(GHOST)).toEqual([])
      }))

      it('should start the chain at a thread whose predecessor is missing', withRegistry((r) => {
        r.register(thread(V2, { previousThreadId: V1, createdAt: 2 }))
        r.register(thread(V3, { previousThreadId: V2, createdAt: 3 }))
        expect(ids(r.chain(V3))).toEqual([V2, V3])
      }))

      it('should visit each thread once when predecessors form a cycle', withRegistry((r) => {
        r.register(thread(V1, { previousThreadId: V2, createdAt: 1 }))
        r.register(thread(V2, { previousThreadId: V1, createdAt: 2 }))
        expect(ids(r.chain(V1)).sort()).toEqual([V1, V2])
      }))
    })

    describe('transaction', () => {
      it('should commit every write and return the value of fn', withRegistry((r) => {
        const value = r.transaction(() => {
          r.register(thread(A))
          r.register(thread(B))
          return 'done'
        })
        expect(value).toBe('done')
        expect(ids(r.list())).toEqual([A, B])
      }))

      it('should roll every write back and rethrow when fn throws', withRegistry((r) => {
        r.register(thread(A))
        const abort = new Error('abort')
        expect(() =>
          r.transaction(() => {
            r.updateStatus(A, 'running', 5)
            r.register(thread(B))
            throw abort
          }),
        ).toThrow(abort)
        expect(r.get(A)?.status).toBe('created')
        expect(r.get(B)).toBeNull()
      }))
    })

    describe('recovery counts', () => {
      it('should start at 0 with no seq, and null for an unknown id', withRegistry((r) => {
        r.register(thread(A))
        expect(r.recoveryCount(A)).toEqual({ count: 0, seq: null })
        expect(r.recoveryCount(GHOST)).toBeNull()
      }))

      it('should set several at once, skip unknown ids, and reset the count keeping the seq', withRegistry((r) => {
        r.register(thread(A))
        r.register(thread(B))
        r.setRecoveryCounts([{ id: A, count: 2, seq: 7 }, { id: GHOST, count: 1, seq: 1 }, { id: B, count: 1, seq: 3 }])
        expect(r.recoveryCount(A)).toEqual({ count: 2, seq: 7 })
        expect(r.recoveryCount(B)).toEqual({ count: 1, seq: 3 })
        expect(r.recoveryCount(GHOST)).toBeNull()
        r.resetRecoveryCounts([A, GHOST])
        expect(r.recoveryCount(A)).toEqual({ count: 0, seq: 7 })
        expect(r.recoveryCount(B)).toEqual({ count: 1, seq: 3 })
        // Not part of the thread's record: listing and reading rows is unchanged.
        expect(r.get(A)).not.toHaveProperty('recoveries')
      }))
    })

    describe('lease tokens', () => {
      it('should be null until claimed, and only ever grow, registered or not', withRegistry((r) => {
        r.register(thread(A))
        r.register(thread(B))
        expect([r.leaseToken(A), r.leaseToken(GHOST)]).toEqual([null, null])
        // A first lease (token 1) is no change of hands: nothing to record.
        expect(r.claim([{ id: A, token: 1 }])).toEqual([])
        expect(r.leaseToken(A)).toBeNull()
        // GHOST: a thread is leased (and claimed) before the round that registers it.
        expect(r.claim([{ id: A, token: 3 }, { id: B, token: 1 }, { id: GHOST, token: 9 }])).toEqual([])
        expect([r.leaseToken(A), r.leaseToken(B), r.leaseToken(GHOST)]).toEqual([3, 1, 9])
        // A process that took A over earlier (token 2) claims after the one that took it last: it
        // is told the claim ahead of it (so is one offered the same token again), and nothing changes.
        expect(r.claim([{ id: A, token: 2 }, { id: B, token: 1 }, { id: GHOST, token: 10 }])).toEqual([
          { id: A, token: 3 },
          { id: B, token: 1 },
        ])
        expect([r.leaseToken(A), r.leaseToken(B), r.leaseToken(GHOST)]).toEqual([3, 1, 10])
        expect(r.claim([])).toEqual([])
      }))
    })

    it('should allow close to be called twice', () => {
      const backend = create()
      try {
        backend.registry.close()
        expect(() => backend.registry.close()).not.toThrow()
      } finally {
        backend.destroy?.()
      }
    })
  })
}
