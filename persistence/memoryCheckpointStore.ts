/**
 * In-memory checkpoints: the reference implementation of CheckpointStore, for tests and as
 * executable documentation of the contract the file backend keeps. Nothing survives the process.
 */
import { assertThreadId } from '../src/base/ids.js'
import { CheckpointStaging } from './checkpointStaging.js'
import type { CheckpointStore, StateEnvelope } from './types.js'
import { stagedEnvelope } from './types.js'

/**
 * A CheckpointStore in a Map. Staged is not stored: only `sync()` publishes, like on disk. It keeps
 * JSON text, so every load is a fresh copy that callers may mutate, and what was stored is what
 * JSON can carry (as with state.json).
 * @example
 * const checkpoints = createMemoryCheckpointStore()
 * checkpoints.stage(id, envelope)
 * await checkpoints.sync()
 * checkpoints.load(id) // a copy of envelope
 */
export function createMemoryCheckpointStore(): CheckpointStore {
  const staging = new CheckpointStaging()
  const stored = new Map<string, string>()

  return {
    stage(threadId, envelope) {
      assertThreadId(threadId)
      staging.stage(threadId, envelope)
    },

    discard(threadId) {
      staging.discard(threadId)
    },

    sync(options = {}) {
      return staging.sync(options, (envelopes) => {
        for (const [id, envelope] of envelopes) stored.set(id, JSON.stringify(stagedEnvelope(envelope)))
      })
    },

    load(threadId) {
      assertThreadId(threadId)
      const text = stored.get(threadId)
      return text === undefined ? null : (JSON.parse(text) as StateEnvelope)
    },

    list() {
      return [...stored.keys()]
    },
  }
}
