/**
 * In-memory checkpoints: the reference implementation. Stores JSON text so every load is a fresh copy.
 */
import type { CheckpointStore, StateEnvelope } from './types.js'

export function createMemoryCheckpointStore(): CheckpointStore {
  let staged = new Map<string, StateEnvelope>()
  const stored = new Map<string, string>()
  return {
    stage(threadId, envelope) {
      staged.set(threadId, envelope)
    },
    async sync(options = {}) {
      const batch = staged
      staged = new Map()
      await options.beforePublish?.()
      for (const [id, envelope] of batch) stored.set(id, JSON.stringify(envelope))
    },
    load(threadId) {
      const text = stored.get(threadId)
      return text === undefined ? null : (JSON.parse(text) as StateEnvelope)
    },
    list() {
      return [...stored.keys()]
    },
  }
}
