/**
 * In-memory checkpoints: the reference implementation of CheckpointStore, for tests and as
 * executable documentation of the contract the file backend keeps. Nothing survives the process.
 */
import { assertThreadId } from '../src/base/ids.js'
import type { CheckpointStore, StagedEnvelope, StateEnvelope } from './types.js'
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
  let staged = new Map<string, StagedEnvelope>()
  const dropped = new Set<string>()
  const stored = new Map<string, string>()
  let chain: Promise<void> = Promise.resolve()

  return {
    stage(threadId, envelope) {
      assertThreadId(threadId)
      dropped.delete(threadId)
      staged.set(threadId, envelope)
    },

    discard(threadId) {
      staged.delete(threadId)
      dropped.add(threadId)
    },

    sync(options = {}) {
      // Serialised like the file store: a batch waiting on beforePublish is never overtaken.
      const run = chain.then(async () => {
        const batch = staged
        staged = new Map()
        try {
          await options.beforePublish?.()
        } catch (error) {
          // Nothing published; the batch goes back unless a newer envelope was staged meanwhile.
          for (const [id, envelope] of batch) if (!staged.has(id) && !dropped.has(id)) staged.set(id, envelope)
          throw error
        }
        for (const [id, envelope] of batch) if (!dropped.has(id)) stored.set(id, JSON.stringify(stagedEnvelope(envelope)))
      })
      chain = run.catch(() => {})
      return run
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
