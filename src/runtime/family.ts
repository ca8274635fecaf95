/**
 * A thread's children as its parent sees them: the ones not settled yet (with those of the threads
 * it continues), and the `spawn_thread` calls still under way, which a cancel of the parent must
 * wait for because their children are not registered yet.
 */
import type { Registry, ThreadRecord } from '../../persistence/types.js'
import type { LiveThread } from '../thread/liveThread.js'
import { isActive } from '../thread/threadStatus.js'

export class Family {
  /** spawn_thread calls under way, by parent: emptied as each returns. */
  private readonly spawning = new Map<string, Set<Promise<unknown>>>()
  /** The same calls by the child each makes: a call run again while the first runs finds it here. */
  private readonly byChild = new Map<string, Promise<LiveThread>>()

  constructor(private readonly registry: Registry) {}

  /**
   * Children (and their descendants) of `id` that are not settled yet — with those of the threads
   * `id` continues: a continuation is the same task, and its predecessors' children are its own.
   */
  openChildren(id: string): ThreadRecord[] {
    const chain = this.registry.chain(id)
    const upTo = chain.findIndex((r) => r.id === id)
    const ids = upTo < 0 ? [id] : chain.slice(0, upTo + 1).map((r) => r.id)
    return ids.flatMap((t) => this.registry.listChildren(t)).filter((child) => isActive(child.status) || child.status === 'suspended')
  }

  /** Whether a cancel of `id` must wait for children: open ones, or spawns still under way. */
  hasChildrenToSettle(id: string): boolean {
    return this.openChildren(id).length > 0 || this.spawning.has(id)
  }

  /** Tracks a spawn_thread call of `parentId`, making `childId`, until it settles. */
  async track(parentId: string, childId: string, spawning: Promise<LiveThread>): Promise<LiveThread> {
    let inFlight = this.spawning.get(parentId)
    if (!inFlight) this.spawning.set(parentId, (inFlight = new Set()))
    inFlight.add(spawning)
    this.byChild.set(childId, spawning)
    try {
      return await spawning
    } finally {
      inFlight.delete(spawning)
      if (inFlight.size === 0 && this.spawning.get(parentId) === inFlight) this.spawning.delete(parentId)
      if (this.byChild.get(childId) === spawning) this.byChild.delete(childId)
    }
  }

  /** The spawn of `childId` still under way, if a spawn_thread call is making it now. */
  underWay(childId: string): Promise<LiveThread> | undefined {
    return this.byChild.get(childId)
  }

  /** Resolves once no spawn_thread call of `id` is under way (or `signal` aborts). */
  async spawnsSettled(id: string, signal: AbortSignal): Promise<void> {
    while (this.spawning.has(id) && !signal.aborted) await Promise.allSettled([...this.spawning.get(id)!])
  }
}
