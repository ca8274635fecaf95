/**
 * The contract of every Registry backend's event log (`registry.events`, rt.events): appended in
 * order, numbered by ids that only grow and are never handed out twice (a reader's cursor), read
 * back after an id page by page, committed and rolled back with the registry transaction it is
 * appended in, and pruned by age and by count. Called by `registryContract` for each backend.
 * Known deviations: none.
 */
import { describe, expect, it } from 'vitest'
import type { NewEvent } from '../../persistence/eventLog.js'
import type { RegistryBackend } from './registry.contract.js'

function event(threadId: string, type: string, at: number, data: Record<string, unknown> = {}): NewEvent {
  return { threadId, type, at, data }
}

export function eventLogContract(name: string, create: () => RegistryBackend): void {
  describe(`Registry event log contract: ${name}`, () => {
    const withLog = (fn: (backend: RegistryBackend) => void) => () => {
      const backend = create()
      try {
        fn(backend)
      } finally {
        backend.registry.close()
        backend.destroy?.()
      }
    }

    it('should start empty, at id 0', withLog(({ registry }) => {
      expect(registry.events.lastId()).toBe(0)
      expect(registry.events.after(0, 10)).toEqual([])
    }))

    it('should read back every field of appended events, in order, with growing ids', withLog(({ registry }) => {
      registry.events.append([event('t-1', 'thread.spawned', 5, { directive: 'ship', parentId: null }), event('t-2', 'thread.started', 6)])
      registry.events.append([event('t-1', 'thread.approved', 7, { input: { env: 'staging' }, by: 'ops' })])
      const rows = registry.events.after(0, 10)
      expect(rows).toEqual([
        { id: rows[0]!.id, threadId: 't-1', type: 'thread.spawned', at: 5, data: { directive: 'ship', parentId: null } },
        { id: rows[1]!.id, threadId: 't-2', type: 'thread.started', at: 6, data: {} },
        { id: rows[2]!.id, threadId: 't-1', type: 'thread.approved', at: 7, data: { input: { env: 'staging' }, by: 'ops' } },
      ])
      expect(rows[0]!.id).toBeGreaterThan(0)
      expect(rows[1]!.id).toBeGreaterThan(rows[0]!.id)
      expect(rows[2]!.id).toBeGreaterThan(rows[1]!.id)
      expect(registry.events.lastId()).toBe(rows[2]!.id)
    }))

    it('should give exactly the events after an id, a page at a time', withLog(({ registry }) => {
      registry.events.append(Array.from({ length: 5 }, (_, i) => event('t-1', 'thread.retrying', i, { attempt: i })))
      const all = registry.events.after(0, 10)
      const first = registry.events.after(all[1]!.id, 2)
      expect(first.map((e) => e.data['attempt'])).toEqual([2, 3])
      expect(registry.events.after(first[1]!.id, 2).map((e) => e.data['attempt'])).toEqual([4])
      expect(registry.events.after(all[4]!.id, 2)).toEqual([])
    }))

    it('should keep what it stored when the caller changes its objects afterwards', withLog(({ registry }) => {
      const data = { input: { env: 'staging' } }
      registry.events.append([event('t-1', 'thread.approved', 1, data)])
      data.input.env = 'production'
      const [read] = registry.events.after(0, 1)
      read!.data['input'] = null
      expect(registry.events.after(0, 1)[0]!.data).toEqual({ input: { env: 'staging' } })
    }))

    it('should drop the events appended in a registry transaction that rolls back, and keep their ids unused', withLog(({ registry }) => {
      registry.events.append([event('t-1', 'thread.started', 1)])
      const before = registry.events.lastId()
      expect(() =>
        registry.transaction(() => {
          registry.events.append([event('t-1', 'thread.completed', 2)])
          throw new Error('fault inside the transaction')
        }),
      ).toThrow('fault inside the transaction')
      expect(registry.events.lastId()).toBe(before)
      registry.transaction(() => registry.events.append([event('t-1', 'thread.error', 3)]))
      expect(registry.events.after(before, 10).map((e) => e.type)).toEqual(['thread.error'])
    }))

    it('should prune events older than a time, and all but the newest N, never reusing an id', withLog(({ registry }) => {
      registry.events.append(Array.from({ length: 6 }, (_, i) => event('t-1', 'thread.retrying', 100 + i, { attempt: i })))
      const last = registry.events.lastId()
      expect(registry.events.prune({ before: 102, keep: 1_000 })).toBe(2)
      expect(registry.events.after(0, 10).map((e) => e.data['attempt'])).toEqual([2, 3, 4, 5])
      expect(registry.events.prune({ before: 0, keep: 2 })).toBe(2)
      expect(registry.events.after(0, 10).map((e) => e.data['attempt'])).toEqual([4, 5])
      expect(registry.events.prune({ before: 1_000, keep: 2 })).toBe(2)
      expect(registry.events.after(0, 10)).toEqual([])
      expect(registry.events.lastId()).toBe(last)
      registry.events.append([event('t-1', 'thread.started', 200)])
      expect(registry.events.after(last, 10).map((e) => e.type)).toEqual(['thread.started'])
      expect(registry.events.after(0, 10)[0]!.id).toBeGreaterThan(last)
    }))

    it('should restore another log\'s events with their own ids, and number new events past the last id it gives', withLog(({ registry }) => {
      registry.events.restore(
        [
          { id: 7, threadId: 't-1', type: 'thread.spawned', at: 5, data: { directive: 'ship' } },
          { id: 9, threadId: 't-2', type: 'thread.started', at: 6, data: {} },
        ],
        9,
      )
      // The other log had handed out ids up to 12 and pruned the last ones: a cursor at 12 stays valid.
      registry.events.restore([], 12)
      expect(registry.events.after(0, 10)).toEqual([
        { id: 7, threadId: 't-1', type: 'thread.spawned', at: 5, data: { directive: 'ship' } },
        { id: 9, threadId: 't-2', type: 'thread.started', at: 6, data: {} },
      ])
      expect(registry.events.lastId()).toBe(12)
      registry.events.append([event('t-1', 'thread.completed', 8)])
      expect(registry.events.after(12, 10)).toEqual([{ id: 13, threadId: 't-1', type: 'thread.completed', at: 8, data: {} }])
    }))

    it('should refuse to restore an id it handed out already, writing none of the events', withLog(({ registry }) => {
      registry.events.append([event('t-1', 'thread.started', 1), event('t-1', 'thread.completed', 2)])
      const last = registry.events.lastId()
      expect(() => registry.events.restore([{ id: last + 1, threadId: 't-2', type: 'thread.started', at: 3, data: {} }, { id: last, threadId: 't-2', type: 'thread.completed', at: 4, data: {} }], last + 1)).toThrow(
        expect.objectContaining({ code: 'REGISTRY_FAILED' }),
      )
      expect(registry.events.after(0, 10).map((e) => e.threadId)).toEqual(['t-1', 't-1'])
      expect(registry.events.lastId()).toBe(last)
    }))

    it('should refuse reads and appends once closed', () => {
      const backend = create()
      try {
        backend.registry.close()
        expect(() => backend.registry.events.after(0, 1)).toThrow()
        expect(() => backend.registry.events.append([event('t-1', 'thread.started', 1)])).toThrow()
      } finally {
        backend.destroy?.()
      }
    })
  })
}
