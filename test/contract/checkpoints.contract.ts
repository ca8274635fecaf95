/**
 * The contract every CheckpointStore backend keeps. Not collected directly: backends' spec files call it.
 */
import { describe, expect, it } from 'vitest'
import type { CheckpointStore, StateEnvelope } from '../../persistence/types.js'

export interface CheckpointBackend {
  store: CheckpointStore
  destroy?: () => void
}

export function envelope(threadId: string, turns = 0): StateEnvelope {
  return {
    v: 1,
    threadId,
    status: 'running',
    savedAt: '2026-11-22T00:00:00.000Z',
    transcript: { seq: turns, hash: turns ? 'h'.repeat(64) : '', bytes: turns * 100 },
    snapshot: { status: 'active', value: { running: 'callingModel' }, context: { usage: { turns } } },
  }
}

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

    it('should not store a staged envelope before sync', withStore((store) => {
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa'))
      expect(store.load('a-aaaaaaaaaaaa')).toBeNull()
    }))

    it('should round-trip an envelope through stage and sync', withStore(async (store) => {
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa', 3))
      await store.sync()
      expect(store.load('a-aaaaaaaaaaaa')).toEqual(envelope('a-aaaaaaaaaaaa', 3))
    }))

    it('should keep only the newest of two stages before a sync', withStore(async (store) => {
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa', 1))
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa', 2))
      await store.sync()
      expect(store.load('a-aaaaaaaaaaaa')?.transcript.seq).toBe(2)
    }))

    it('should publish only after beforePublish resolves', withStore(async (store) => {
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa', 1))
      let release!: () => void
      const gate = new Promise<void>((r) => (release = r))
      const syncing = store.sync({ beforePublish: () => gate })
      await new Promise((r) => setTimeout(r, 20))
      expect(store.load('a-aaaaaaaaaaaa')).toBeNull()
      release()
      await syncing
      expect(store.load('a-aaaaaaaaaaaa')?.transcript.seq).toBe(1)
    }))

    it('should list the threads it holds', withStore(async (store) => {
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa'))
      store.stage('b-aaaaaaaaaaaa', envelope('b-aaaaaaaaaaaa'))
      await store.sync()
      expect(store.list().sort()).toEqual(['a-aaaaaaaaaaaa', 'b-aaaaaaaaaaaa'])
    }))

    it('should give a fresh copy on every load', withStore(async (store) => {
      store.stage('a-aaaaaaaaaaaa', envelope('a-aaaaaaaaaaaa'))
      await store.sync()
      const first = store.load('a-aaaaaaaaaaaa')!
      ;(first.snapshot as { value: unknown }).value = 'mutated'
      expect((store.load('a-aaaaaaaaaaaa')!.snapshot as { value: unknown }).value).toEqual({ running: 'callingModel' })
    }))
  })
}
