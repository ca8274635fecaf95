/**
 * The `TranscriptStore` contract: every backend's spec file calls `transcriptContract` once.
 * Kept out of direct test discovery (vitest.config.ts excludes test/contract/).
 *
 * Known deviations: none. (The memory backend never reports a torn tail; torn tails are file-only
 * and tested in test/persistence/jsonlTranscript.test.ts.)
 *
 * Promise stated here: any number of threads may be open at once, each appendable where it left
 * off, whatever a backend holds per thread (the file backend also runs this suite holding at most
 * 3 descriptors, so that nearly every append opens its thread's file again).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { isSpindleError } from '../../src/base/errors.js'
import { entryHash } from '../../persistence/transcriptHash.js'
import type { TranscriptStore } from '../../persistence/types.js'
import { EMPTY_POSITION } from '../../persistence/types.js'

export interface TranscriptBackend {
  store: TranscriptStore
  destroy?: () => void
}

const ID = 'research-abcdefghijkl'
const OTHER = 'review-mnopqrstuvwx'
const T0 = Date.parse('2025-01-01T00:00:00.000Z')
const at = (n: number): Date => new Date(T0 + n * 1000)

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn()
  } catch (error) {
    return isSpindleError(error) ? error.code : `not a SpindleError: ${String(error)}`
  }
  return undefined
}

export function transcriptContract(name: string, create: () => TranscriptBackend): void {
  describe(`TranscriptStore contract: ${name}`, () => {
    let backend: TranscriptBackend
    let store: TranscriptStore

    beforeEach(() => {
      backend = create()
      store = backend.store
    })

    afterEach(() => {
      store.closeAll()
      backend.destroy?.()
    })

    function appendThree(): void {
      store.open(ID)
      store.append(ID, 'spawn', { input: 'hello' }, at(0))
      store.append(ID, 'START', null, at(1))
      store.append(ID, 'MODEL_REPLIED', { text: 'ünïcødé ✓', toolCalls: [] }, at(2))
    }

    it('should open a new thread at the empty position with an empty tail', () => {
      expect(store.open(ID)).toEqual({ position: EMPTY_POSITION, tail: [], torn: null })
    })

    it('should assign consecutive seqs and chain each hash to the entry before', () => {
      store.open(ID)
      const entries = [
        store.append(ID, 'spawn', { input: 'hello' }, at(0)),
        store.append(ID, 'START', null, at(1)),
        store.append(ID, 'NOTE', [1, 'two', { three: 3 }], at(2)),
      ]
      expect(entries.map((e) => e.seq)).toEqual([1, 2, 3])
      let prev = ''
      for (const e of entries) {
        expect(e.ts).toBe(at(e.seq - 1).toISOString())
        expect(e.hash).toBe(entryHash(prev, e.seq, e.ts, e.type, e.data))
        prev = e.hash
      }
    })

    it('should record undefined data as null', () => {
      store.open(ID)
      const entry = store.append(ID, 'START', undefined, at(0))
      expect(entry.data).toBeNull()
      expect(entry.hash).toBe(entryHash('', 1, entry.ts, 'START', null))
    })

    it('should track the seq, hash and line bytes of the last entry in position', () => {
      store.open(ID)
      let bytes = 0
      for (let n = 0; n < 3; n++) {
        const entry = store.append(ID, 'NOTE', { n, text: 'ünïcødé' }, at(n))
        bytes += Buffer.byteLength(`${JSON.stringify(entry)}\n`)
        expect(store.position(ID)).toEqual({ seq: entry.seq, hash: entry.hash, bytes })
      }
    })

    it('should keep threads apart', () => {
      store.open(ID)
      store.open(OTHER)
      store.append(ID, 'A', 1, at(0))
      const other = store.append(OTHER, 'B', 2, at(0))
      store.append(ID, 'A', 3, at(1))
      expect(other.seq).toBe(1)
      expect(store.position(ID).seq).toBe(2)
      expect(store.read(OTHER).entries).toEqual([other])
    })

    it('should return every entry as the tail when reopened without a position', () => {
      appendThree()
      const written = store.read(ID).entries
      const position = store.position(ID)
      store.close(ID)
      expect(store.open(ID)).toEqual({ position, tail: written, torn: null })
    })

    it('should return only the entries after the position it is reopened from', () => {
      store.open(ID)
      store.append(ID, 'spawn', { input: 'hello' }, at(0))
      const checkpoint = store.position(ID)
      const later = [store.append(ID, 'START', null, at(1)), store.append(ID, 'NOTE', { n: 3 }, at(2))]
      const end = store.position(ID)
      store.close(ID)
      expect(store.open(ID, checkpoint)).toEqual({ position: end, tail: later, torn: null })
    })

    it('should return an empty tail when reopened from its last position', () => {
      appendThree()
      const end = store.position(ID)
      store.close(ID)
      expect(store.open(ID, end)).toEqual({ position: end, tail: [], torn: null })
    })

    it('should continue the chain after a reopen', () => {
      appendThree()
      const end = store.position(ID)
      store.close(ID)
      store.open(ID, end)
      const next = store.append(ID, 'NOTE', 'after', at(3))
      expect(next.seq).toBe(4)
      expect(next.hash).toBe(entryHash(end.hash, 4, next.ts, 'NOTE', 'after'))
    })

    it('should return the current position and an empty tail when an open thread is opened again', () => {
      appendThree()
      expect(store.open(ID)).toEqual({ position: store.position(ID), tail: [], torn: null })
    })

    it('should return the appended entries from read', () => {
      store.open(ID)
      const appended = [store.append(ID, 'spawn', { input: 'hello' }, at(0)), store.append(ID, 'START', null, at(1))]
      expect(store.read(ID)).toEqual({ entries: appended, torn: null })
    })

    it('should read a closed thread', () => {
      appendThree()
      store.close(ID)
      expect(store.read(ID).entries.map((e) => e.seq)).toEqual([1, 2, 3])
    })

    it('should throw THREAD_NOT_FOUND when appending to a thread that was never opened', () => {
      expect(codeOf(() => store.append(ID, 'NOTE', null))).toBe('THREAD_NOT_FOUND')
    })

    it('should throw THREAD_NOT_FOUND when appending to a closed thread', () => {
      appendThree()
      store.close(ID)
      expect(codeOf(() => store.append(ID, 'NOTE', null))).toBe('THREAD_NOT_FOUND')
    })

    it('should throw THREAD_NOT_FOUND for the position of a thread that is not open', () => {
      expect(codeOf(() => store.position(ID))).toBe('THREAD_NOT_FOUND')
    })

    it('should throw TRANSCRIPT_CORRUPT when reading a thread that has no transcript', () => {
      expect(codeOf(() => store.read(ID))).toBe('TRANSCRIPT_CORRUPT')
    })

    it('should throw TRANSCRIPT_CORRUPT when opening from a position past the end of the transcript', () => {
      appendThree()
      const end = store.position(ID)
      store.close(ID)
      expect(codeOf(() => store.open(ID, { seq: 9, hash: end.hash, bytes: end.bytes + 1000 }))).toBe('TRANSCRIPT_CORRUPT')
    })

    it('should throw TRANSCRIPT_CORRUPT when opening from a position whose hash the transcript does not hold', () => {
      appendThree()
      const end = store.position(ID)
      store.close(ID)
      expect(codeOf(() => store.open(ID, { ...end, hash: 'f'.repeat(64) }))).toBe('TRANSCRIPT_CORRUPT')
    })

    it('should throw INVALID_THREAD_ID when opening a thread id that could leave the data directory', () => {
      expect(codeOf(() => store.open('../evil-aaaaaaaaaaaa'))).toBe('INVALID_THREAD_ID')
    })

    it('should keep every open thread appendable where it left off, however many are open at once', async () => {
      const ids = Array.from({ length: 24 }, (_, i) => `many-${String(i).padStart(12, 'a')}`)
      const appended = new Map<string, ReturnType<TranscriptStore['append']>[]>(ids.map((id) => [id, []]))
      for (const id of ids) store.open(id)
      for (let round = 0; round < 3; round++) {
        for (const id of ids) appended.get(id)!.push(store.append(id, 'NOTE', { round, id }, at(round)))
        await store.sync()
      }
      // A thread closed among them, and opened again from its position, goes on from there too.
      const end = store.position(ids[5]!)
      store.close(ids[5]!)
      expect(store.open(ids[5]!, end)).toEqual({ position: end, tail: [], torn: null })
      appended.get(ids[5]!)!.push(store.append(ids[5]!, 'NOTE', 'after', at(9)))
      await store.sync({ files: true })
      for (const id of ids) {
        const entries = appended.get(id)!
        expect(store.read(id)).toEqual({ entries, torn: null })
        expect(store.position(id)).toEqual({ seq: entries.length, hash: entries.at(-1)!.hash, bytes: expect.any(Number) })
      }
    })

    it('should resolve sync', async () => {
      appendThree()
      await expect(store.sync()).resolves.toBeUndefined()
    })

    it('should ignore closing a thread that is not open', () => {
      expect(() => store.close(ID)).not.toThrow()
    })
  })
}
