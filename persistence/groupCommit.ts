/**
 * Group commit: many threads' transcript appends, state.json writes and registry updates made
 * durable together, so one round of fsyncs serves every thread that is waiting.
 *
 * Order inside one commit, which recovery relies on:
 *   1. transcripts are synced (a state.json never points past what its transcript holds);
 *   2. staged state.json files are written atomically;
 *   3. registry updates run in one transaction (the registry never runs ahead of state.json).
 */
import type { CheckpointStore, Cost, Registry, ThreadStatus, TranscriptStore } from './types.js'

/** A registry change for one thread; the newest value of each field wins within a commit. */
export interface RegistryPatch {
  status?: ThreadStatus
  at?: number
  cost?: Cost
  outcome?: { result?: unknown; error?: { code: string; message: string } | null }
}

export interface CommitStats {
  commits: number
  checkpointsWritten: number
}

export class GroupCommit {
  private readonly patches = new Map<string, RegistryPatch>()
  private waiting: Array<{ resolve: () => void; reject: (e: unknown) => void }> = []
  private running: Promise<void> | null = null
  private scheduled = false
  private pendingCheckpoints = 0
  readonly stats: CommitStats = { commits: 0, checkpointsWritten: 0 }

  constructor(
    private readonly parts: { transcripts: TranscriptStore; checkpoints: CheckpointStore; registry: Registry },
    /** A registry update of one thread failed; the others in the commit still apply. */
    private readonly onRegistryError: (threadId: string, error: unknown) => void = () => {},
  ) {}

  /** Count a staged checkpoint (for stats only; the store itself keeps the envelope). */
  noteCheckpoint(): void {
    this.pendingCheckpoints++
  }

  stageRegistry(threadId: string, patch: RegistryPatch): void {
    const prev = this.patches.get(threadId)
    this.patches.set(threadId, prev ? { ...prev, ...patch } : patch)
  }

  /** Resolves when everything staged or appended before this call is durable. */
  whenDurable(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject })
      this.schedule()
    })
  }

  /** Waits for any commit in progress and commits whatever is staged. */
  async drain(): Promise<void> {
    await this.whenDurable()
  }

  private schedule(): void {
    if (this.scheduled || this.running) return
    this.scheduled = true
    // setImmediate lets every thread that transitions in this turn of the event loop join the commit.
    setImmediate(() => {
      this.scheduled = false
      this.running = this.commit().finally(() => {
        this.running = null
        if (this.waiting.length > 0) this.schedule()
      })
    })
  }

  private async commit(): Promise<void> {
    const waiters = this.waiting
    this.waiting = []
    const patches = new Map(this.patches)
    this.patches.clear()
    this.stats.checkpointsWritten += this.pendingCheckpoints
    this.pendingCheckpoints = 0
    try {
      // Transcript fsyncs and state.json temp-file fsyncs run in one parallel round; the renames
      // wait for the transcripts.
      const transcriptsDurable = this.parts.transcripts.sync()
      await Promise.all([transcriptsDurable, this.parts.checkpoints.sync({ publishAfter: transcriptsDurable })])
      if (patches.size > 0) this.applyRegistry(patches)
      this.stats.commits++
      for (const w of waiters) w.resolve()
    } catch (error) {
      // Patches not applied go back so the next commit retries them, unless a newer one replaced them.
      for (const [id, patch] of patches) if (!this.patches.has(id)) this.patches.set(id, patch)
      for (const w of waiters) w.reject(error)
    }
  }

  private applyRegistry(patches: Map<string, RegistryPatch>): void {
    const { registry } = this.parts
    registry.transaction(() => {
      for (const [id, patch] of patches) {
        try {
          if (patch.cost) registry.updateCostSnapshot(id, patch.cost)
          if (patch.outcome) registry.setResult(id, patch.outcome)
          if (patch.status) registry.updateStatus(id, patch.status, patch.at ?? Date.now())
        } catch (error) {
          this.onRegistryError(id, error)
        }
      }
    })
  }
}
