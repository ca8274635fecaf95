/**
 * The live-thread table: the one owner of the threads this runtime runs. Parts look threads up
 * here and learn, through `onForget`, when one stops, so each drops what it kept for it.
 */
import { SpindleError } from '../base/errors.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { CheckpointStore } from '../../persistence/types.js'
import type { ThreadServices } from '../thread/liveThread.js'
import { LiveThread } from '../thread/liveThread.js'

/** What a live thread is lent, but for `forget`, which the table keeps for itself. */
export type LentServices = Omit<ThreadServices, 'forget'>

/**
 * Called when a thread stops here. `current` is false when another object holds its id by now (a
 * thread loaded again at once): only what is keyed by the stopped object itself should go then.
 */
export type ForgetListener = (id: string, current: boolean) => void

export class ThreadTable {
  private readonly live = new Map<string, LiveThread>()
  private readonly forgetListeners: ForgetListener[] = []
  /** What every live thread is lent: one object, not one per thread. */
  private services: ThreadServices | null = null

  constructor(
    private readonly checkpoints: CheckpointStore,
    private readonly lend: () => LentServices,
  ) {}

  get size(): number {
    return this.live.size
  }

  get(id: string): LiveThread | undefined {
    return this.live.get(id)
  }

  has(id: string): boolean {
    return this.live.has(id)
  }

  ids(): IterableIterator<string> {
    return this.live.keys()
  }

  threads(): LiveThread[] {
    return [...this.live.values()]
  }

  /** The live thread `id`, or THREAD_NOT_ACTIVE. */
  running(id: string): LiveThread {
    const thread = this.live.get(id)
    if (!thread) throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is not running in this runtime.`)
    return thread
  }

  /** A thread's context: the live one's, else its last checkpoint's, else null. */
  contextOf(id: string): ThreadContext | null {
    return this.live.get(id)?.context() ?? this.storedContext(id)
  }

  /** The context of the thread's last checkpoint, or null (none, or unreadable). */
  storedContext(id: string): ThreadContext | null {
    try {
      return (this.checkpoints.load(id)?.snapshot as { context?: ThreadContext } | undefined)?.context ?? null
    } catch {
      return null
    }
  }

  onForget(listener: ForgetListener): void {
    this.forgetListeners.push(listener)
  }

  /**
   * Refuses (THREAD_LEASED) when a live thread holds `id` here: a second one would run the same
   * thread twice, both writing its transcript. One that has stopped (its last checkpoint still
   * being written) may be followed by a new one.
   */
  assertVacant(id: string): void {
    const current = this.live.get(id)
    if (!current || current.stopped) return
    throw new SpindleError(
      'THREAD_LEASED',
      `Thread ${id} already runs in this runtime; it was not started a second time. Act on the running thread (rt.get("${id}")).`,
      { details: { threadId: id, pid: process.pid } },
    )
  }

  /** A new live thread for `id`, entered in the table (its actor is not started yet); never in place of a live one. */
  adopt(id: string, options: ConstructorParameters<typeof LiveThread>[2]): LiveThread {
    this.assertVacant(id)
    this.services ??= {
      ...this.lend(),
      forget: (thread) => {
        const current = this.live.get(thread.id) === thread
        if (current) this.live.delete(thread.id)
        for (const listener of this.forgetListeners) listener(thread.id, current)
      },
    }
    const thread = new LiveThread(id, this.services, options)
    this.live.set(id, thread)
    return thread
  }
}
