/**
 * The contract every Registry backend keeps. Not collected directly (vitest.config.ts excludes
 * test/contract): each backend's spec file calls `registryContract`.
 * Known deviations: none. The event log's contract (eventLog.contract.ts) runs with it.
 */
import { describe, expect, it } from 'vitest'
import type { Cost, RegisterThread, Registry, ThreadStatus } from '../../persistence/types.js'
import { eventLogContract } from './eventLog.contract.js'

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
  eventLogContract(name, create)
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
          suspendReason: null,
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

      it('should refuse a registration without a directive, writing nothing', withRegistry((r) => {
        expect(() => r.register(thread(A, { directive: undefined }))).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
        expect(r.get(A)).toBeNull()
      }))

      it('should store what JSON carries: a Date as its ISO string, NaN as null, undefined members left out', withRegistry((r) => {
        r.register(thread(A, { directive: { at: new Date(0), n: NaN, gone: undefined } }))
        r.setResult(A, { result: { list: [undefined, 1] } })
        expect(r.get(A)).toMatchObject({ directive: { at: '1970-01-01T00:00:00.000Z', n: null }, result: { list: [null, 1] } })
        expect(r.get(A)?.directive).not.toHaveProperty('gone')
      }))

      it('should keep its rows as stored when a caller mutates what it passed in or read back', withRegistry((r) => {
        const registration = thread(A)
        r.register(registration)
        ;(registration.directive as { prompt: string }).prompt = 'changed'
        const cost = { ...COST }
        r.updateCostSnapshot(A, cost)
        cost.turns = 99
        const outcome = { result: { answer: 1 } }
        r.setResult(A, outcome)
        outcome.result.answer = 2
        const read = r.get(A)!
        ;(read.directive as { prompt: string }).prompt = 'mutated'
        read.cost!.spend = 99
        read.status = 'error'
        r.list()[0]!.directiveName = 'mutated'
        r.listActive()[0]!.nonce = 'mutated'
        r.activeStatuses()[0]!.status = 'error'
        r.recoveryCount(A)!.count = 5
        expect(r.get(A)).toMatchObject({ directiveName: 'a', directive: { prompt: 'p' }, status: 'created', nonce: `nonce-${A}`, cost: COST, result: { answer: 1 } })
        expect(r.recoveryCount(A)).toEqual({ count: 0, seq: null })
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

      it('should refuse a status that is not a thread status, leaving the row as it was', withRegistry((r) => {
        r.register(thread(A))
        expect(() => r.updateStatus(A, 'paused' as ThreadStatus, 2_000)).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
        expect(r.get(A)).toMatchObject({ status: 'created', updatedAt: 1_000 })
      }))

      it('should keep why a suspended thread waits with its status, telling a limit from a crash-loop quarantine', withRegistry((r) => {
        r.register(thread(A))
        r.register(thread(B))
        r.updateStatus(A, 'suspended', 2_000, 'limit')
        r.updateStatus(B, 'suspended', 2_000, 'crash_loop')
        expect(r.get(A)).toMatchObject({ status: 'suspended', suspendReason: 'limit' })
        expect(r.list({ status: 'suspended' }).map((t) => [t.id, t.suspendReason])).toEqual([[A, 'limit'], [B, 'crash_loop']])
      }))

      it('should clear the suspend reason with any status but suspended, and store none when none is given', withRegistry((r) => {
        r.register(thread(A))
        r.updateStatus(A, 'suspended', 2_000, 'error')
        r.updateStatus(A, 'running', 3_000)
        expect(r.get(A)?.suspendReason).toBeNull()
        r.updateStatus(A, 'cancelled', 4_000, 'error')
        expect(r.get(A)?.suspendReason).toBeNull()
        r.register(thread(B))
        r.updateStatus(B, 'suspended', 2_000)
        expect(r.get(B)).toMatchObject({ status: 'suspended', suspendReason: null })
      }))

      it('should refuse a suspend reason that is none, leaving the row as it was', withRegistry((r) => {
        r.register(thread(A))
        expect(() => r.updateStatus(A, 'suspended', 2_000, 'bored' as never)).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
        expect(r.get(A)).toMatchObject({ status: 'created', suspendReason: null, updatedAt: 1_000 })
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

      it('should list nothing for a limit of 0 or an empty set of statuses, and everything for a negative limit', withRegistry((r) => {
        onePerStatus(r)
        expect(r.list({ limit: 0 })).toEqual([])
        expect(r.list({ status: [] })).toEqual([])
        expect(r.list({ limit: -1 })).toHaveLength(ALL.length)
      }))

      it('should refuse a limit that is not an integer', withRegistry((r) => {
        expect(() => r.list({ limit: 1.5 })).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
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

      it('should roll back every kind of write, and the indexes behind chains and children', withRegistry((r) => {
        r.register(thread(A))
        r.setRecoveryCounts([{ id: A, count: 2, seq: 4 }])
        r.claim([{ id: A, token: 2 }])
        const before = { record: r.get(A), counts: r.recoveryCounts(), token: r.leaseToken(A) }
        expect(() =>
          r.transaction(() => {
            r.updateStatus(A, 'suspended', 5)
            r.setResult(A, { result: 'x', error: { code: 'E', message: 'm' } })
            r.updateCostSnapshot(A, COST)
            r.resetRecoveryCounts([A])
            r.setRecoveryCounts([{ id: A, count: 7, seq: 9 }])
            r.claim([{ id: A, token: 5 }, { id: GHOST, token: 3 }])
            r.register(thread(B, { parentId: A, previousThreadId: A }))
            throw new Error('abort')
          }),
        ).toThrow('abort')
        expect({ record: r.get(A), counts: r.recoveryCounts(), token: r.leaseToken(A) }).toEqual(before)
        expect(r.leaseToken(GHOST)).toBeNull()
        expect([r.get(B), r.successorOf(A), r.listChildren(A), ids(r.chain(A))]).toEqual([null, null, [], [A]])
      }))

      it('should see its own writes inside fn', withRegistry((r) => {
        r.transaction(() => {
          r.register(thread(A))
          r.updateStatus(A, 'running', 2)
          expect(r.get(A)?.status).toBe('running')
          expect(ids(r.listActive())).toEqual([A])
        })
      }))

      it('should keep the other writes when one write fails inside fn and fn carries on', withRegistry((r) => {
        r.register(thread(A))
        r.transaction(() => {
          r.register(thread(B))
          expect(() => r.register(thread(A))).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
          expect(() => r.updateStatus(GHOST, 'running', 2)).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
          r.updateStatus(A, 'running', 3)
        })
        expect(r.get(A)).toMatchObject({ status: 'running', createdAt: 1_000 })
        expect(r.get(B)?.status).toBe('created')
      }))

      it('should roll back only a nested transaction that throws when the outer one catches it', withRegistry((r) => {
        r.register(thread(A))
        r.transaction(() => {
          r.updateStatus(A, 'running', 2)
          expect(() =>
            r.transaction(() => {
              r.updateStatus(A, 'error', 3)
              r.register(thread(B))
              throw new Error('inner')
            }),
          ).toThrow('inner')
          expect(r.get(A)?.status).toBe('running')
        })
        expect(r.get(A)).toMatchObject({ status: 'running', updatedAt: 2 })
        expect(r.get(B)).toBeNull()
      }))

      it('should roll back a committed nested transaction when the outer one throws', withRegistry((r) => {
        expect(() =>
          r.transaction(() => {
            r.transaction(() => r.register(thread(A)))
            throw new Error('outer')
          }),
        ).toThrow('outer')
        expect(r.get(A)).toBeNull()
      }))

      it('should refuse a fn that returns a promise, and roll back what it wrote', withRegistry((r) => {
        r.register(thread(A))
        expect(() =>
          r.transaction(() => {
            r.updateStatus(A, 'running', 2)
            return Promise.resolve()
          }),
        ).toThrow(TypeError)
        expect(r.get(A)?.status).toBe('created')
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

      it('should read in one map every recovery count that is not the initial one, including a count reset to 0 that keeps its seq', withRegistry((r) => {
        for (const name of ['a', 'b', 'c', 'd']) r.register(thread(`${name}-aaaaaaaaaaaa`))
        r.setRecoveryCounts([
          { id: 'a-aaaaaaaaaaaa', count: 2, seq: 9 },
          { id: 'b-aaaaaaaaaaaa', count: 1, seq: 4 },
          { id: 'nobody-aaaaaaaaaaaa', count: 1, seq: 1 },
        ])
        r.resetRecoveryCounts(['b-aaaaaaaaaaaa'])
        expect(r.recoveryCounts()).toEqual(
          new Map([
            ['a-aaaaaaaaaaaa', { count: 2, seq: 9 }],
            ['b-aaaaaaaaaaaa', { count: 0, seq: 4 }],
          ]),
        )
      }))

      it('should take the last count given for a thread named twice in one call', withRegistry((r) => {
        r.register(thread(A))
        r.setRecoveryCounts([{ id: A, count: 1, seq: 1 }, { id: A, count: 2, seq: 2 }])
        expect(r.recoveryCount(A)).toEqual({ count: 2, seq: 2 })
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

      it('should record a first lease (token 1) when a later lease is claimed in the same call', withRegistry((r) => {
        expect(r.claim([{ id: A, token: 1 }, { id: B, token: 2 }])).toEqual([])
        expect([r.leaseToken(A), r.leaseToken(B)]).toEqual([1, 2])
      }))

      it('should keep the largest token offered for a thread named several times, and report each offer a claim is ahead of', withRegistry((r) => {
        expect(r.claim([{ id: A, token: 5 }, { id: A, token: 3 }, { id: A, token: 7 }])).toEqual([])
        expect(r.leaseToken(A)).toBe(7)
        // Read before the call writes anything: the 8 offered in it is not ahead of the 7 offered after it.
        expect(r.claim([{ id: A, token: 2 }, { id: A, token: 8 }, { id: A, token: 7 }])).toEqual([
          { id: A, token: 7 },
          { id: A, token: 7 },
        ])
        expect(r.leaseToken(A)).toBe(8)
      }))
    })

    it('should refuse reads and writes once closed', () => {
      const backend = create()
      try {
        backend.registry.register(thread(A))
        backend.registry.close()
        expect(() => backend.registry.get(A)).toThrow()
        expect(() => backend.registry.register(thread(B))).toThrow()
      } finally {
        backend.destroy?.()
      }
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
