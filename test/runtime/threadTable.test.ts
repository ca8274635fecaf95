/**
 * The live-thread table: one live thread per id. A second adopt of an id a live thread holds —
 * a spawn run twice, say — would run the thread twice, both writing its transcript: it is refused,
 * and the live thread stays. Once that thread has stopped, its id may be adopted again (a thread
 * woken right after it suspended, whose last checkpoint is still being written).
 *
 * Real memory stores and group commit. The threads are never started, so no effect is ever asked
 * for: the table lends none.
 */
import { describe, expect, it } from 'vitest'
import { SpindleError } from '../../src/base/errors.js'
import { GroupCommit } from '../../persistence/groupCommit.js'
import { createMemoryCheckpointStore } from '../../persistence/memoryCheckpointStore.js'
import { createMemoryRegistry } from '../../persistence/memoryRegistry.js'
import { createMemoryTranscriptStore } from '../../persistence/memoryTranscript.js'
import type { LentServices } from '../../src/runtime/threadTable.js'
import { ThreadTable } from '../../src/runtime/threadTable.js'

function table(): ThreadTable {
  const transcripts = createMemoryTranscriptStore()
  const checkpoints = createMemoryCheckpointStore()
  const commit = new GroupCommit({ transcripts, checkpoints, registry: createMemoryRegistry() })
  const lent = { transcripts, checkpoints, commit, now: () => Date.now(), report: () => {} }
  return new ThreadTable(checkpoints, () => lent as unknown as LentServices)
}

describe('ThreadTable', () => {
  it('should refuse to adopt an id a live thread holds, with THREAD_LEASED, and keep the live thread', () => {
    const threads = table()
    const live = threads.adopt('worker-aaaaaaaaaaaa', {})
    let refusal: unknown
    try {
      threads.adopt('worker-aaaaaaaaaaaa', {})
    } catch (error) {
      refusal = error
    }
    expect(refusal).toBeInstanceOf(SpindleError)
    expect(refusal).toMatchObject({
      code: 'THREAD_LEASED',
      message: expect.stringContaining('Thread worker-aaaaaaaaaaaa already runs in this runtime; it was not started a second time.'),
      details: { threadId: 'worker-aaaaaaaaaaaa' },
    })
    expect(threads.get('worker-aaaaaaaaaaaa')).toBe(live)
    expect(threads.size).toBe(1)
  })

  it('should adopt an id again once the thread that held it stopped', () => {
    const threads = table()
    const first = threads.adopt('worker-aaaaaaaaaaaa', {})
    first.detach(new SpindleError('RUNTIME_CLOSED', 'closed for the test'))
    const second = threads.adopt('worker-aaaaaaaaaaaa', {})
    expect(second).not.toBe(first)
    expect(threads.get('worker-aaaaaaaaaaaa')).toBe(second)
  })
})
