/**
 * What a checkpoint store keeps between `stage` and the write that publishes it, with the
 * `only` / `discard` semantics of CheckpointStore: the newest envelope of each thread, the batch
 * that owns it while a sync is under way, the threads this process lost, and the order of syncs
 * without `only`. Shared by the memory and PostgreSQL stores; the file store keeps its own, with
 * a per-thread order of its files.
 */
import type { StagedEnvelope } from './types.js'

/** Envelopes taken by one sync, by thread. */
type Batch = Map<string, StagedEnvelope>

export class CheckpointStaging {
  private staged: Batch = new Map()
  /** Threads this process lost (`discard`): a sync under way publishes nothing of theirs. */
  private readonly dropped = new Set<string>()
  /** The batch holding each thread's newest envelope until it has published it. */
  private readonly owners = new Map<string, Batch>()
  /** Syncs without `only`, one after another. */
  private chain: Promise<void> = Promise.resolve()

  stage(threadId: string, envelope: StagedEnvelope): void {
    this.dropped.delete(threadId)
    this.staged.set(threadId, envelope)
  }

  discard(threadId: string): void {
    this.staged.delete(threadId)
    this.dropped.add(threadId)
  }

  /**
   * Takes what is staged (all of it, after the syncs before; or `only`'s, at once), awaits
   * `beforePublish`, and hands `write` the envelopes the batch still owns and were not discarded.
   * When either fails, the batch goes back, under whatever was staged or taken meanwhile.
   */
  sync(
    options: { beforePublish?: () => Promise<unknown>; only?: ReadonlySet<string> },
    write: (envelopes: Array<[string, StagedEnvelope]>) => void | Promise<void>,
  ): Promise<void> {
    if (options.only) return this.publish(this.take(options.only), options.beforePublish, write)
    // A batch waiting on beforePublish is never overtaken by a later batch of everything.
    const run = this.chain.then(() => this.publish(this.take(undefined), options.beforePublish, write))
    this.chain = run.catch(() => {})
    return run
  }

  private take(only: ReadonlySet<string> | undefined): Batch {
    let batch: Batch
    if (only === undefined) {
      batch = this.staged
      this.staged = new Map()
    } else {
      batch = new Map()
      for (const id of only) {
        // Taken from a sync under way that has not published it: that one then leaves it alone.
        const envelope = this.staged.get(id) ?? this.owners.get(id)?.get(id)
        if (envelope === undefined) continue
        this.staged.delete(id)
        batch.set(id, envelope)
      }
    }
    for (const id of batch.keys()) this.owners.set(id, batch)
    return batch
  }

  private async publish(batch: Batch, beforePublish: (() => Promise<unknown>) | undefined, write: (envelopes: Array<[string, StagedEnvelope]>) => void | Promise<void>): Promise<void> {
    const ours = (id: string): boolean => this.owners.get(id) === batch
    try {
      await beforePublish?.()
      const envelopes: Array<[string, StagedEnvelope]> = []
      for (const [id, envelope] of batch) if (ours(id) && !this.dropped.has(id)) envelopes.push([id, envelope])
      if (envelopes.length > 0) await write(envelopes)
    } catch (error) {
      // Nothing published; the batch goes back unless a newer envelope was staged or taken meanwhile.
      for (const [id, envelope] of batch) if (ours(id) && !this.staged.has(id) && !this.dropped.has(id)) this.staged.set(id, envelope)
      throw error
    } finally {
      for (const id of batch.keys()) if (ours(id)) this.owners.delete(id)
    }
  }
}
