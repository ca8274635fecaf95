/**
 * The contract every CheckpointStore backend keeps. Not collected directly (vitest.config.ts
 * excludes test/contract): each backend's spec file calls `checkpointContract`.
 * Known deviations: none.
 */
import { describe, expect, it } from 'vitest'
import type { CheckpointStore, StateEnvelope } from '../../persistence/types.js'

export interface CheckpointBackend {
  store: CheckpointStore
  destroy?: () => void
}

/** A plausible envelope of the current version; `turns` varies the content so tests can tell versions apart. */
export function envelope(threadId: string, turns = 0): StateEnvelope {
  return {
    v: 3,
    threadId,
    status: 'running',
    savedAt: '2026-11-22T00:00:00.000Z',
    transcript: { seq: turns, hash: turns ? 'h'.repeat(64) : '', bytes: turns * 100 },
    snapshot: { status: 'active', value: { running: 'callingModel' }, context: { threadId, usage: { turns, spend: 0 }, limits: { turns: null }, toolCalls: [], toolsDone: [] } },
  }
}

/** A promise the test resolves or rejects by hand. */
function gate(): { promise: Promise<void>; open: () => void; fail: (error: Error) => void } {
  let open!: () => void
  let fail!: (error: Error) => void
  const promise = new Promise<void>((resolve, reject) => {
    open = resolve
    fail = reject
  })
  return { promise, open, fail }
}

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'

export function checkpointContract(name: string, create: () => CheckpointBackend): void {
  describe(`CheckpointStore contract: ${name}`, () => {
    const withStore = (fn: (store: CheckpointStore) => Promise<void> | void) => async () => {
      const backend = create()
      try {
        await fn(backend.store)
      } finally {
        backend.destroy?.()
      }
    }

    it('should load null for a thread without a checkpoint', withStore((store) => {
      expect(store.load('none-aaaaaaaaaaaa')).toBeNull()
    }))

    // Staged is not stored, in every backend (the memory store too): only sync() publishes.
    it('should not store a staged envelope before sync', withStore((store) => {
      store.stage(A, envelope(A))
      expect(store.load(A)).toBeNull()
    }))

    it('should round-trip an envelope through stage and sync', withStore(async (store) => {
      store.stage(A, envelope(A, 3))
      await store.sync()
      expect(store.load(A)).toEqual(envelope(A, 3))
    }))

    it('should keep only the newest of two stages before a sync', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      store.stage(A, envelope(A, 2))
      await store.sync()
      expect(store.load(A)).toEqual(envelope(A, 2))
    }))

    it('should list the synced threads and not the ones only staged', withStore(async (store) => {
      store.stage(A, envelope(A))
      store.stage(B, envelope(B))
      await store.sync()
      store.stage('c-aaaaaaaaaaaa', envelope('c-aaaaaaaaaaaa'))
      expect(store.list().sort()).toEqual([A, B])
    }))

    it('should give a fresh copy on every load', withStore(async (store) => {
      store.stage(A, envelope(A))
      await store.sync()
      const first = store.load(A)!
      ;(first.snapshot as { value: unknown }).value = 'mutated'
      expect(store.load(A)).toEqual(envelope(A))
    }))

    it('should publish a batch only once beforePublish resolves', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      const transcriptSynced = gate()
      const syncing = store.sync({ beforePublish: () => transcriptSynced.promise })
      expect(store.load(A)).toBeNull()
      transcriptSynced.open()
      await syncing
      expect(store.load(A)).toEqual(envelope(A, 1))
    }))

    // beforePublish is the transcript sync: if it fails, a state.json must not point past it.
    it('should publish nothing when beforePublish rejects, and publish the batch on the next sync', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      await store.sync()
      store.stage(A, envelope(A, 2))
      const transcriptSynced = gate()
      const syncing = store.sync({ beforePublish: () => transcriptSynced.promise })
      transcriptSynced.fail(new Error('transcript fsync failed'))
      await expect(syncing).rejects.toThrow('transcript fsync failed')
      expect(store.load(A)).toEqual(envelope(A, 1))
      await store.sync()
      expect(store.load(A)).toEqual(envelope(A, 2))
    }))

    it('should not let a retried batch overwrite a newer stage', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      await expect(store.sync({ beforePublish: () => Promise.reject(new Error('transcript fsync failed')) })).rejects.toThrow()
      store.stage(A, envelope(A, 2))
      await store.sync()
      expect(store.load(A)).toEqual(envelope(A, 2))
    }))

    it('should start a sync only after the previous one has published', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      const slow = gate()
      const first = store.sync({
        beforePublish: () => {
          // Staged once the first batch was taken: it belongs to the next one.
          store.stage(A, envelope(A, 2))
          return slow.promise
        },
      })
      let seenBySecond: unknown = 'beforePublish of the second sync was not called'
      const second = store.sync({ beforePublish: async () => void (seenBySecond = store.load(A)) })
      slow.open()
      await Promise.all([first, second])
      expect(seenBySecond).toEqual(envelope(A, 1))
      expect(store.load(A)).toEqual(envelope(A, 2))
    }))

    it('should publish only the threads named by `only`, and leave the rest staged for the next sync', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      store.stage(B, envelope(B, 1))
      await store.sync({ only: new Set([A]) })
      expect([store.load(A), store.load(B)]).toEqual([envelope(A, 1), null])
      await store.sync()
      expect(store.load(B)).toEqual(envelope(B, 1))
    }))

    // A stopped thread's end (GroupCommit's settle round) does not wait for a round of every thread.
    it('should publish an `only` sync while an earlier sync of everything waits, which then publishes nothing older of it', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      store.stage(B, envelope(B, 1))
      const slow = gate()
      const everything = store.sync({ beforePublish: () => slow.promise })
      store.stage(A, envelope(A, 2))
      await store.sync({ only: new Set([A]) })
      expect([store.load(A), store.load(B)]).toEqual([envelope(A, 2), null])
      slow.open()
      await everything
      expect([store.load(A), store.load(B)]).toEqual([envelope(A, 2), envelope(B, 1)])
    }))

    it("should take a thread's envelope out of a sync under way that has not published it", withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      store.stage(B, envelope(B, 1))
      const slow = gate()
      const everything = store.sync({ beforePublish: () => slow.promise })
      await store.sync({ only: new Set([A]) })
      expect([store.load(A), store.load(B)]).toEqual([envelope(A, 1), null])
      slow.open()
      await everything
      expect([store.load(A), store.load(B)]).toEqual([envelope(A, 1), envelope(B, 1)])
    }))

    it('should put back what an `only` sync could not publish, under an envelope staged since', withStore(async (store) => {
      store.stage(A, envelope(A, 1))
      const failing = gate()
      const settling = store.sync({ only: new Set([A]), beforePublish: () => failing.promise })
      store.stage(A, envelope(A, 2))
      failing.fail(new Error('transcript fsync failed'))
      await expect(settling).rejects.toThrow('transcript fsync failed')
      expect(store.load(A)).toBeNull()
      await store.sync()
      expect(store.load(A)).toEqual(envelope(A, 2))
    }))

    it('should refuse an id that is not a thread id', withStore((store) => {
      expect(() => store.stage('Not An Id', envelope('Not An Id'))).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
      expect(() => store.load('Not An Id')).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
    }))
  })
}
