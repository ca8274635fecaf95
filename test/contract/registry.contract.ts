/**
 * The contract every Registry backend keeps. Not collected directly: backends' spec files call it.
 */
import { describe, expect, it } from 'vitest'
import type { Registry } from '../../persistence/types.js'

export interface RegistryBackend {
  registry: Registry
  destroy?: () => void
}

const thread = (id: string, extra: Partial<Parameters<Registry['register']>[0]> = {}) => ({
  id,
  directiveName: id.split('-')[0]!,
  directive: { name: id.split('-')[0]!, prompt: 'p' },
  nonce: `nonce-${id}`,
  createdAt: 1_000,
  ...extra,
})

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

    it('should return every field of a registered thread', withRegistry((r) => {
      r.register(thread('a-aaaaaaaaaaaa', { parentId: 'p-aaaaaaaaaaaa', previousThreadId: null, createdAt: 5 }))
      expect(r.get('a-aaaaaaaaaaaa')).toEqual({
        id: 'a-aaaaaaaaaaaa',
        directiveName: 'a',
        directive: { name: 'a', prompt: 'p' },
        parentId: 'p-aaaaaaaaaaaa',
        previousThreadId: null,
        status: 'created',
        nonce: 'nonce-a-aaaaaaaaaaaa',
        createdAt: 5,
        updatedAt: 5,
        cost: null,
        result: null,
        error: null,
      })
    }))

    it('should return null for an unknown id', withRegistry((r) => {
      expect(r.get('nobody-aaaaaaaaaaaa')).toBeNull()
    }))

    it('should refuse to register an id twice', withRegistry((r) => {
      r.register(thread('a-aaaaaaaaaaaa'))
      expect(() => r.register(thread('a-aaaaaaaaaaaa'))).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
    }))

    it('should update status and updatedAt', withRegistry((r) => {
      r.register(thread('a-aaaaaaaaaaaa'))
      r.updateStatus('a-aaaaaaaaaaaa', 'running', 2_000)
      expect(r.get('a-aaaaaaaaaaaa')).toMatchObject({ status: 'running', updatedAt: 2_000, createdAt: 1_000 })
    }))

    it('should name the id when updating an unknown thread', withRegistry((r) => {
      expect(() => r.updateStatus('ghost-aaaaaaaaaaaa', 'running', 1)).toThrow(
        expect.objectContaining({ code: 'THREAD_NOT_FOUND', message: expect.stringContaining('ghost-aaaaaaaaaaaa') }),
      )
      expect(() => r.setResult('ghost-aaaaaaaaaaaa', { result: 1 })).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
      expect(() => r.updateCostSnapshot('ghost-aaaaaaaaaaaa', { turns: 0, inputTokens: 0, outputTokens: 0, spend: 0 })).toThrow(
        expect.objectContaining({ code: 'THREAD_NOT_FOUND' }),
      )
    }))

    it('should store a result, an error, and a cost snapshot', withRegistry((r) => {
      r.register(thread('a-aaaaaaaaaaaa'))
      r.register(thread('b-aaaaaaaaaaaa'))
      r.setResult('a-aaaaaaaaaaaa', { result: { answer: 42 } })
      r.setResult('b-aaaaaaaaaaaa', { error: { code: 'X', message: 'failed' } })
      r.updateCostSnapshot('a-aaaaaaaaaaaa', { turns: 3, inputTokens: 10, outputTokens: 5, spend: 0.5 })
      expect(r.get('a-aaaaaaaaaaaa')).toMatchObject({ result: { answer: 42 }, error: null, cost: { turns: 3, spend: 0.5 } })
      expect(r.get('b-aaaaaaaaaaaa')).toMatchObject({ result: null, error: { code: 'X', message: 'failed' } })
    }))

    it('should list active threads (created, running) only', withRegistry((r) => {
      const statuses = ['created', 'running', 'suspended', 'completed', 'error', 'cancelled', 'continued'] as const
      statuses.forEach((status, i) => {
        const id = `t${i}-aaaaaaaaaaaa`
        r.register(thread(id, { createdAt: i }))
        r.updateStatus(id, status, i)
      })
      expect(r.listActive().map((t) => t.status)).toEqual(['created', 'running'])
      expect(r.activeStatuses()).toEqual([
        { id: 't0-aaaaaaaaaaaa', status: 'created' },
        { id: 't1-aaaaaaaaaaaa', status: 'running' },
      ])
    }))

    it('should list by one status, by several, and with a limit', withRegistry((r) => {
      for (let i = 0; i < 4; i++) r.register(thread(`t${i}-aaaaaaaaaaaa`, { createdAt: i }))
      r.updateStatus('t1-aaaaaaaaaaaa', 'completed', 9)
      r.updateStatus('t2-aaaaaaaaaaaa', 'error', 9)
      expect(r.list({ status: 'completed' }).map((t) => t.id)).toEqual(['t1-aaaaaaaaaaaa'])
      expect(r.list({ status: ['completed', 'error'] }).map((t) => t.id)).toEqual(['t1-aaaaaaaaaaaa', 't2-aaaaaaaaaaaa'])
      expect(r.list({ limit: 2 }).map((t) => t.id)).toEqual(['t0-aaaaaaaaaaaa', 't1-aaaaaaaaaaaa'])
    }))

    it('should list the children of a thread', withRegistry((r) => {
      r.register(thread('parent-aaaaaaaaaaaa'))
      r.register(thread('c1-aaaaaaaaaaaa', { parentId: 'parent-aaaaaaaaaaaa', createdAt: 2 }))
      r.register(thread('c2-aaaaaaaaaaaa', { parentId: 'parent-aaaaaaaaaaaa', createdAt: 3 }))
      r.register(thread('other-aaaaaaaaaaaa'))
      expect(r.listChildren('parent-aaaaaaaaaaaa').map((t) => t.id)).toEqual(['c1-aaaaaaaaaaaa', 'c2-aaaaaaaaaaaa'])
    }))

    it('should return a continuation chain oldest first from any member', withRegistry((r) => {
      r.register(thread('v1-aaaaaaaaaaaa', { createdAt: 1 }))
      r.register(thread('v2-aaaaaaaaaaaa', { previousThreadId: 'v1-aaaaaaaaaaaa', createdAt: 2 }))
      r.register(thread('v3-aaaaaaaaaaaa', { previousThreadId: 'v2-aaaaaaaaaaaa', createdAt: 3 }))
      expect(r.chain('v2-aaaaaaaaaaaa').map((t) => t.id)).toEqual(['v1-aaaaaaaaaaaa', 'v2-aaaaaaaaaaaa', 'v3-aaaaaaaaaaaa'])
      expect(r.chain('v3-aaaaaaaaaaaa')).toHaveLength(3)
      expect(r.chain('none-aaaaaaaaaaaa')).toEqual([])
    }))

    it('should roll a transaction back when it throws', withRegistry((r) => {
      r.register(thread('a-aaaaaaaaaaaa'))
      expect(() =>
        r.transaction(() => {
          r.updateStatus('a-aaaaaaaaaaaa', 'running', 5)
          throw new Error('abort')
        }),
      ).toThrow('abort')
      expect(r.get('a-aaaaaaaaaaaa')?.status).toBe('created')
    }))
  })
}
