/**
 * Waiting for threads to settle: from completion events for threads this runtime runs, from the
 * registry for threads another process runs. A wave of children can fail fast and cancel the
 * siblings of the one that failed.
 */
import { atDeadline } from '../actors/deadline.js'
import type { Clock } from '../actors/threadEffects.js'
import type { ThreadOutcome } from '../machines/thread.machine.js'
import { SpindleError } from './errors.js'

export interface WaitOptions {
  /** Give up on threads still running after this long (default: config `waits.defaultTimeoutMs`). */
  timeoutMs?: number
  /** Stop waiting as soon as one thread ends in `error`. */
  failFast?: boolean
  /** With failFast: cancel the threads still running, naming the one that failed. */
  cancelSiblingsOnFailure?: boolean
  /** Ends the wait early (the waiting thread was cancelled); what is open is reported pending. */
  signal?: AbortSignal
  /**
   * When the wait began, on the runtime's clock (default: now). The timeout runs from it, so a
   * wait run again after a crash or a kill gets what remained of its time, not all of it again.
   */
  startedAt?: number
}

/** What `waitBlockers` needs to know of a thread: its continuation chain and its parent. */
export interface WaitLineage {
  /** The thread's continuation chain (its predecessors and successors, itself included). */
  chain: readonly string[]
  parentId: string | null
}

/**
 * The threads `waiter` must never wait for: itself, its continuations, and its ancestors (and
 * theirs). None of them can settle while the waiter waits — a parent settles only after its
 * children (cancelling waits for them, and it is usually waiting for them itself) — so such a wait
 * could only end at its timeout (ten minutes by default) with nothing learned.
 */
export function waitBlockers(waiter: string, lineage: (id: string) => WaitLineage | null): Set<string> {
  const blocked = new Set<string>([waiter])
  let current: string | null = waiter
  // Bounded by the tree's depth; `seen` guards against a damaged registry that loops.
  const seen = new Set<string>()
  while (current !== null && !seen.has(current)) {
    seen.add(current)
    blocked.add(current)
    const found = lineage(current)
    if (!found) break
    for (const id of found.chain) blocked.add(id)
    current = found.parentId
  }
  return blocked
}

/** Refuses a wait on the waiter itself or one of its ancestors (INVALID_OPTIONS, naming it). */
export function assertWaitCanEnd(waiter: string, ids: readonly string[], lineage: (id: string) => WaitLineage | null): void {
  const blocked = waitBlockers(waiter, lineage)
  for (const id of ids) {
    if (!blocked.has(id)) continue
    const what = id === waiter ? 'itself' : `${id}, which cannot settle before ${waiter} does (its own thread, a continuation of it, or an ancestor)`
    throw new SpindleError('INVALID_OPTIONS', `Thread ${waiter} cannot wait for ${what}: the wait could only end at its timeout. Wait for your children.`, {
      details: { threadId: waiter, waitedOn: id },
    })
  }
}

export interface SettledThread {
  /** The thread waited on. */
  threadId: string
  /** Where its continuation chain ended (the same id unless it continued). */
  finalThreadId: string
  status: ThreadOutcome['status']
  result?: string
  error?: { code: string; message: string }
  cost: ThreadOutcome['cost']
}

export interface WaitReport {
  /** Threads that settled (completed, error, cancelled), in the order they did. */
  settled: SettledThread[]
  /** The first thread that ended in error, when any did. */
  failed: SettledThread | null
  /** Threads cancelled because a sibling failed. */
  cancelled: string[]
  /** Threads still running (or suspended) when the wait ended. */
  pending: string[]
  timedOut: boolean
}

/** What waiting needs from the runtime. */
export interface WaitHost {
  clock: Clock
  defaultTimeoutMs: number
  /**
   * Resolves with the thread's outcome once it has stopped for good (a suspended thread has not):
   * continued threads resolve with their outcome, the caller follows `nextThreadId`.
   */
  settled(id: string): { promise: Promise<ThreadOutcome>; cancel(): void }
  cancel(id: string, reason: string, by: string): Promise<unknown>
}

/** Waits for every thread of `ids` (each followed along its continuation chain). */
export async function waitThreads(host: WaitHost, ids: readonly string[], options: WaitOptions = {}): Promise<WaitReport> {
  const unique = [...new Set(ids)]
  if (unique.length === 0) return { settled: [], failed: null, cancelled: [], pending: [], timedOut: false }
  const timeoutMs = options.timeoutMs ?? host.defaultTimeoutMs
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
    throw new SpindleError('INVALID_OPTIONS', `waitThreads: timeoutMs must be a non-negative number of ms (got ${timeoutMs}).`)
  }
  const report: WaitReport = { settled: [], failed: null, cancelled: [], pending: [], timedOut: false }
  const open = new Set(unique)
  const stops: Array<() => void> = []
  let finish!: () => void
  const finished = new Promise<void>((resolve) => (finish = resolve))
  let done = false
  /** Set while siblings are being cancelled: their settling must not end the wait early. */
  let failing = false

  const follow = (waitedOn: string, id: string): void => {
    const watch = host.settled(id)
    stops.push(watch.cancel)
    watch.promise.then(
      (outcome) => {
        if (done) return
        if (outcome.status === 'continued' && outcome.nextThreadId) return follow(waitedOn, outcome.nextThreadId)
        const settled: SettledThread = {
          threadId: waitedOn,
          finalThreadId: id,
          status: outcome.status,
          cost: outcome.cost,
          ...(outcome.result !== undefined ? { result: outcome.result } : {}),
          ...(outcome.error ? { error: outcome.error } : {}),
        }
        open.delete(waitedOn)
        report.settled.push(settled)
        if (outcome.status === 'error' && !report.failed) {
          report.failed = settled
          if (options.failFast) return void failFast(settled)
        }
        if (open.size === 0 && !failing) end()
      },
      () => {
        // The runtime closed under the wait: report what is still open as pending.
        end()
      },
    )
  }

  const failFast = async (failed: SettledThread): Promise<void> => {
    failing = true
    if (options.cancelSiblingsOnFailure) {
      const siblings = [...open]
      const reason = `cancelled because sibling ${failed.threadId} failed: ${failed.error?.message ?? 'error'}`
      const results = await Promise.allSettled(siblings.map((id) => host.cancel(id, reason, `wave: ${failed.threadId} failed`)))
      results.forEach((r, i) => {
        if (r.status === 'fulfilled') report.cancelled.push(siblings[i]!)
      })
    }
    end()
  }

  const end = (): void => {
    if (done) return
    done = true
    stopTimer()
    for (const stop of stops) stop()
    report.pending = [...open].filter((id) => !report.cancelled.includes(id))
    finish()
  }

  // Measured on the runtime's clock from when the wait began; a timeout past a timer's range
  // (more than 24.8 days) is waited in steps, else it would fire after 1 ms.
  const startedAt = typeof options.startedAt === 'number' && Number.isFinite(options.startedAt) ? options.startedAt : host.clock.now()
  const deadline = Math.min(startedAt, host.clock.now()) + timeoutMs
  const stopTimer = atDeadline(host.clock, deadline, () => {
    if (done) return
    report.timedOut = true
    end()
  })
  const onAbort = (): void => end()
  options.signal?.addEventListener('abort', onAbort, { once: true })
  stops.push(() => options.signal?.removeEventListener('abort', onAbort))
  if (options.signal?.aborted) end()
  else for (const id of unique) follow(id, id)
  await finished
  return report
}
