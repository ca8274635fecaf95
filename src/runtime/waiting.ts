/**
 * Waiting for threads to settle: `rt.waitThreads` and the `wait_threads` tool, with the wait-for
 * graph that refuses a wait closing a cycle (in this process, and across the processes sharing the
 * data directory through the lease store), and the registry poll for threads another process runs.
 * Owns the remote poll's timer.
 */
import type { Clock } from '../base/clock.js'
import { SpindleError } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'
import type { Config } from '../../config/schema.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import type { LeaseStore, RecordedWait, Registry } from '../../persistence/types.js'
import { isStorageFailure } from '../../persistence/storageFailure.js'
import { isActive } from '../thread/threadStatus.js'
import { assertNoWaitCycle, assertWaitCanEnd, findWaitCycle, waitCycleEnd, waitThreads } from '../thread/waits.js'
import type { SettledThread, WaitCycleEnd, WaitGraph, WaitInProgress, WaitOptions, WaitReport } from '../thread/waits.js'
import type { CancelResult } from './api.js'
import type { Lifecycle, Reporter } from './events.js'
import { storedOutcome } from './storedThread.js'
import type { ThreadTable } from './threadTable.js'

export interface WaitingDeps {
  dir: string
  /** Whether a wait for threads another process runs keeps this process up (they run on other workers). */
  holdOpen?: boolean
  table: ThreadTable
  registry: Registry
  /** Where waits are recorded for every process sharing the directory. */
  leaseStore: LeaseStore
  ownerId: string
  clock: Clock
  config: Config
  bus: Reporter
  life: Lifecycle
  /** Cancels a thread (a wave's siblings when one fails). */
  cancel(id: string, reason: string, by: string): Promise<CancelResult>
}

export class Waiting {
  /** Threads waited on that are not live here: looked up in the registry every `waits.remotePollMs`. */
  private readonly remoteWatches = new Map<string, Set<() => void>>()
  private remoteTimer: unknown = null
  /**
   * The wait-for graph: the `wait_threads` calls of this runtime's threads in progress, by waiting
   * thread. A wait that would close a cycle in it is refused (WAIT_CYCLE) instead of waiting out
   * its timeout. Each wait leaves it as it ends, however it ends.
   */
  private readonly waitingFor = new Map<string, Set<WaitInProgress>>()

  constructor(private readonly deps: WaitingDeps) {}

  /** The graph as it stands: waiting thread → the threads it still waits for. */
  graph(): Map<string, ReadonlySet<WaitInProgress>> {
    return new Map(this.waitingFor)
  }

  /**
   * `wait_threads`: refused for the caller itself or its ancestors, and when it would close a
   * cycle of waits (each could only time out), and timed from when the call began — `lastAt` of
   * the caller, the event that started this tool step, kept in its checkpoint — so a wait run
   * again after a crash or a kill -9 gets what remained of its timeout instead of all of it again.
   * A wait run again after a crash comes through here too, so it is back in the wait-for graph.
   */
  childWait(parentId: string, ids: string[], options: WaitOptions): Promise<WaitReport> {
    const { registry, leaseStore, ownerId, bus } = this.deps
    assertWaitCanEnd(parentId, ids, (id) => {
      const record = registry.get(id)
      return record ? { chain: registry.chain(id).map((r) => r.id), parentId: record.parentId ?? null } : null
    })
    const open = new Set(ids)
    const wait: WaitInProgress = { open, failFast: options.failFast === true }
    // Checked against the waits of every process sharing the directory, and recorded for them, in
    // one transaction of the lease store; and in this runtime's graph before anything is awaited.
    // So two waits closing one cycle at the same moment cannot both pass, in one process or two.
    const recorded = leaseStore.recordWait(ownerId, { waiter: parentId, failFast: wait.failFast, ids }, (elsewhere) =>
      assertNoWaitCycle(parentId, ids, wait.failFast, this.waitGraph(elsewhere)),
    )
    let mine = this.waitingFor.get(parentId)
    if (!mine) this.waitingFor.set(parentId, (mine = new Set()))
    mine.add(wait)
    const outOfGraph = (): void => {
      mine.delete(wait)
      if (mine.size === 0 && this.waitingFor.get(parentId) === mine) this.waitingFor.delete(parentId)
    }
    const leave = (): void => {
      outOfGraph()
      if (this.deps.life.closed) return // close ended every wait of this runtime at once
      try {
        leaseStore.endWait(ownerId, recorded)
      } catch (error) {
        // Left behind, the row goes when this runtime closes or gives the thread's lease up.
        bus.report(error, parentId)
      }
    }
    const startedAt = this.deps.table.get(parentId)?.context().lastAt
    const waiting = this.waitFor(ids, startedAt != null ? { ...options, startedAt } : options, (id, settled) => {
      open.delete(id)
      // A fail-fast wait was let through for its way out: a thread that might fail. One settling
      // without failing may close the last way out; then the wait is checked again, as if asked now.
      if (!wait.failFast || open.size === 0 || settled.status === 'error') return undefined
      const stuck = this.stuckWait(parentId, wait, settled)
      // Out of the graph at once, before any other wait's check in this same turn counts it.
      if (stuck) outOfGraph()
      return stuck
    })
    waiting.then(leave, leave)
    return waiting
  }

  /** Whether fail-fast wait `wait` of `waiter`, whose thread `closedBy` just settled without failing, can now only time out. */
  private stuckWait(waiter: string, wait: WaitInProgress, closedBy: SettledThread): WaitCycleEnd | undefined {
    try {
      const elsewhere = this.deps.leaseStore.waitsOfOthers(this.deps.ownerId)
      const found = findWaitCycle(waiter, [...wait.open], true, this.waitGraph(elsewhere))
      return found ? waitCycleEnd(waiter, found, closedBy) : undefined
    } catch (error) {
      // Unreadable lease store: the wait goes on as it was let through, and ends at its timeout at worst.
      this.deps.bus.report(error, waiter)
      return undefined
    }
  }

  /**
   * What the wait-for graph check reads: this runtime's waits, those of other processes sharing the
   * directory (`elsewhere`, from the lease store), and chains from the registry.
   */
  private waitGraph(elsewhere: readonly RecordedWait[] = []): WaitGraph {
    const { table, registry } = this.deps
    let waits: Map<string, Set<WaitInProgress>> = this.waitingFor
    if (elsewhere.length > 0) {
      waits = new Map(this.waitingFor)
      for (const found of elsewhere) {
        // This runtime's own view of a thread it runs wins over what another process left.
        if (this.waitingFor.has(found.waiter)) continue
        let set = waits.get(found.waiter)
        if (!set) waits.set(found.waiter, (set = new Set()))
        set.add({ open: new Set(found.ids), failFast: found.failFast })
      }
    }
    return {
      waits,
      tail: (id) => {
        // A live thread that has not stopped is the last of its chain: no registry read for most.
        const seen = new Set<string>()
        let last = id
        for (;;) {
          seen.add(last)
          const live = table.get(last)
          if (live && !live.stopped) return last
          const next = registry.successorOf(last)
          if (next === null || seen.has(next)) return last
          last = next
        }
      },
      stopped: (id) => {
        const live = table.get(id)
        if (live && !live.stopped) return false
        const record = registry.get(id)
        // A thread that ended in error ends the fail-fast waits for it: for them it is a way out.
        return !record || (record.status !== 'suspended' && record.status !== 'error' && !isActive(record.status))
      },
    }
  }

  /** `rt.waitThreads`, and the wait behind `wait_threads`. */
  async waitFor(ids: string[], options: WaitOptions, onSettled?: Parameters<typeof waitThreads>[3]): Promise<WaitReport> {
    const { table, registry, dir, clock, config } = this.deps
    this.deps.life.assertOpen()
    if (!Array.isArray(ids)) throw new SpindleError('INVALID_OPTIONS', 'waitThreads needs an array of thread ids.')
    for (const id of ids) {
      assertThreadId(id)
      if (!table.has(id) && !registry.get(id)) {
        throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir} to wait for.`, { details: { threadId: id } })
      }
    }
    return waitThreads(
      {
        clock,
        defaultTimeoutMs: config.waits.defaultTimeoutMs,
        settled: (id) => this.settled(id),
        cancel: (id, reason, by) => this.deps.cancel(id, reason, by),
      },
      ids,
      options,
      onSettled,
    )
  }

  /**
   * Resolves once thread `id` has stopped for good. A live thread resolves from its own `done`
   * (after its end is durable); a suspended one when it is woken here and ends; one that another
   * process runs from the registry, looked up every `waits.remotePollMs`.
   */
  settled(id: string): { promise: Promise<ThreadOutcome>; cancel(): void } {
    const { table, registry, dir } = this.deps
    let cancelled = false
    let stopWatch: () => void = () => {}
    const promise = new Promise<ThreadOutcome>((resolve, reject) => {
      const attempt = (): void => {
        if (cancelled) return
        const live = table.get(id)
        if (live && !live.stopped) {
          live.done.then(
            (outcome) => (outcome.status === 'suspended' ? attempt() : resolve(outcome)),
            (error: unknown) => (this.deps.life.closed ? reject(error) : attempt()),
          )
          return
        }
        if (live) {
          // Stopped here a moment ago: its `done` settles once the end is durable.
          live.done.then(() => attempt(), () => attempt())
          return
        }
        let record
        try {
          record = registry.get(id)
        } catch (error) {
          // Called back from a timer or a settled promise, where a throw would end the process. A
          // store that did not answer (a database restarting) is asked again at the next poll.
          if (!isStorageFailure(error)) return reject(error)
          stopWatch = this.watchRemote(id, () => attempt())
          return
        }
        if (!record) return reject(new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}.`, { details: { threadId: id } }))
        if (record.status !== 'suspended' && !isActive(record.status)) return resolve(storedOutcome(record, table.storedContext(id)))
        stopWatch = this.watchRemote(id, () => attempt())
      }
      attempt()
    })
    promise.catch(() => {})
    return {
      promise,
      cancel: () => {
        cancelled = true
        stopWatch()
      },
    }
  }

  /**
   * Calls `changed` when thread `id` becomes live here or its registry row leaves created, running
   * and suspended. Threads another process runs send no events here, so their rows are read.
   */
  private watchRemote(id: string, changed: () => void): () => void {
    let set = this.remoteWatches.get(id)
    if (!set) this.remoteWatches.set(id, (set = new Set()))
    const once = (): void => {
      set!.delete(once)
      if (set!.size === 0) this.remoteWatches.delete(id)
      changed()
    }
    set.add(once)
    if (this.remoteTimer === null) this.scheduleRemotePoll()
    return () => {
      set!.delete(once)
      if (set!.size === 0) this.remoteWatches.delete(id)
    }
  }

  private scheduleRemotePoll(): void {
    const { clock, table, registry, bus } = this.deps
    this.remoteTimer = clock.setTimeout(() => {
      this.remoteTimer = null
      if (this.deps.life.closed) return
      for (const [id, listeners] of [...this.remoteWatches]) {
        const live = table.get(id)
        let changed = live !== undefined
        if (!changed) {
          try {
            const record = registry.get(id)
            changed = !record || (record.status !== 'suspended' && !isActive(record.status))
          } catch (error) {
            bus.report(error, id)
          }
        }
        if (changed) for (const listener of [...listeners]) listener()
      }
      if (this.remoteWatches.size > 0) this.scheduleRemotePoll()
    }, this.deps.config.waits.remotePollMs)
    // Where threads run on other workers (a database), a host awaiting one is waiting on this poll
    // alone: it must keep the process up, as a thread running here would.
    if (!this.deps.holdOpen) (this.remoteTimer as { unref?: () => void })?.unref?.()
  }

  /** Wakes waiters on a thread that has just become live here (approved, resumed, cancelled) or settled by recovery. */
  wake(id: string): void {
    const listeners = this.remoteWatches.get(id)
    if (listeners) queueMicrotask(() => { for (const listener of [...listeners]) listener() })
  }

  /** Looks at every thread waited on that another process runs now, rather than at the next poll (something changed). */
  wakeAll(): void {
    for (const id of this.remoteWatches.keys()) this.wake(id)
  }

  /** Stops the poll. Detaching every thread aborted every wait: none may outlive the runtime in its graph. */
  close(): void {
    if (this.remoteTimer !== null) this.deps.clock.clearTimeout(this.remoteTimer)
  }

  /** After every thread was detached: the graph is emptied and this process's recorded waits end. */
  endWaits(): void {
    this.waitingFor.clear()
    try {
      this.deps.leaseStore.endWaitsOf(this.deps.ownerId)
    } catch (error) {
      // Its rows stop counting once its leases are gone or taken over.
      this.deps.bus.report(error)
    }
  }
}
