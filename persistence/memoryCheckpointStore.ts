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
  /** Syncs without `only`, one after another. */
  let chain: Promise<void> = Promise.resolve()
  /** The batch holding each thread's newest envelope until it publishes it (as in the file store). */
  const owners = new Map<string, Map<string, StagedEnvelope>>()

  function take(only: ReadonlySet<string> | undefined): Map<string, StagedEnvelope> {
    let batch: Map<string, StagedEnvelope>
    if (only === undefined) {
      batch = staged
      staged = new Map()
    } else {
      batch = new Map()
      for (const id of only) {
        // Taken from a sync under way that has not published it: that one then leaves it alone.
        const envelope = staged.get(id) ?? owners.get(id)?.get(id)
        if (envelope === undefined) continue
        staged.delete(id)
        batch.set(id, envelope)
      }
    }
    for (const id of batch.keys()) owners.set(id, batch)
    return batch
  }

  async function publish(batch: Map<string, StagedEnvelope>, beforePublish: (() => Promise<unknown>) | undefined): Promise<void> {
    const ours = (id: string): boolean => owners.get(id) === batch
    try {
      await beforePublish?.()
      for (const [id, envelope] of batch) if (ours(id) && !dropped.has(id)) stored.set(id, JSON.stringify(stagedEnvelope(envelope)))
    } catch (error) {
      // Nothing published; the batch goes back unless a newer envelope was staged or taken meanwhile.
      for (const [id, envelope] of batch) if (ours(id) && !staged.has(id) && !dropped.has(id)) staged.set(id, envelope)
      throw error
    } finally {
      for (const id of batch.keys()) if (ours(id)) owners.delete(id)
    }
  }

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
      const { only } = options
      if (only) return publish(take(only), options.beforePublish)
      // Serialised like the file store: a batch waiting on beforePublish is never overtaken.
      const run = chain.then(() => publish(take(undefined), options.beforePublish))
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
