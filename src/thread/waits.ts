/**
 * Waiting for threads to settle: from completion events for threads this runtime runs, from the
 * registry for threads another process runs. A wave of children can fail fast and cancel the
 * siblings of the one that failed.
 */
import { atDeadline } from '../base/clock.js'
import type { Clock } from '../base/clock.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import { SpindleError, ToolRefusal } from '../base/errors.js'

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

/** A wait of one thread in progress: a node's outgoing edges in the runtime's wait-for graph. */
export interface WaitInProgress {
  /**
   * The threads it still waits for, as they were asked for (the first thread of a continuation
   * chain stands for the chain): each leaves the set as it settles.
   */
  readonly open: ReadonlySet<string>
  readonly failFast: boolean
}

/** What `findWaitCycle` reads of the runtime. */
export interface WaitGraph {
  /**
   * The waits in progress, by waiting thread. A thread runs one tool at a time, but a restarted
   * thread may run its wait again before the old one has wound down: hence a set.
   */
  readonly waits: ReadonlyMap<string, ReadonlySet<WaitInProgress>>
  /** The thread a wait on `id` depends on now: the last of `id`'s continuation chain. */
  tail(id: string): string
  /**
   * Whether thread `id` (a chain's last) has stopped for good other than in error: it can no longer
   * end a fail-fast wait. Asked only of the threads of fail-fast waits.
   */
  stopped(id: string): boolean
}

/** One edge of a cycle: `thread` waits for `waitsFor` (as it asked for it), which ends at `tail`. */
export interface WaitHop {
  thread: string
  waitsFor: string
  /** The thread `waitsFor`'s continuation chain has reached (`waitsFor` itself unless it continued). */
  tail: string
}

/** A wait that could only end at its timeout. */
export interface WaitCycleFound {
  /** Each thread waits for the next; the last waits for the first. Starts at the waiter when the wait closes the cycle. */
  cycle: WaitHop[]
  /** When the waiter is not in the cycle but waits, through these hops, for threads stuck in one. */
  path: WaitHop[]
}

/**
 * Whether `waiter`'s new wait for `ids` could only end at its timeout because of the waits in
 * progress, and through which cycle. A thread settles only when each of its waits can end: a wait
 * ends once every thread it waits for has settled, and a fail-fast wait also when one of them,
 * still running, can settle (it may fail). Threads that are not waiting — running, suspended for
 * a person, in another process, settled — can settle; threads that can settle are found to a
 * fixpoint, and the waiter itself is held as one that cannot (it would be waiting). What is left
 * waits in a cycle. So a wait for a thread that waits for the waiter's parent is let through
 * unless the parent is itself waiting for the waiter (a parent completes without waiting for its
 * children), and a wait for a thread that waits for the waiter's child too (a child cannot wait for
 * its ancestors): only the waits in progress decide. The waiter's own waits in progress are not
 * read, so a wait run again after a restart is never refused because of the wait it replaces.
 */
export function findWaitCycle(waiter: string, ids: readonly string[], failFast: boolean, graph: WaitGraph): WaitCycleFound | null {
  // Nothing else waits: nothing can wait for the waiter. Most waits end here, with no look-ups.
  let others = false
  for (const id of graph.waits.keys()) if (id !== waiter) others = true
  if (!others || ids.length === 0) return null

  const tails = new Map<string, string>()
  const tail = (id: string): string => {
    let found = tails.get(id)
    if (found === undefined) tails.set(id, (found = graph.tail(id)))
    return found
  }
  type Edge = { failFast: boolean; targets: Array<{ waitsFor: string; tail: string }> }
  const toEdge = (asked: Iterable<string>, fail: boolean): Edge => ({ failFast: fail, targets: [...asked].map((id) => ({ waitsFor: id, tail: tail(id) })) })
  const mine = toEdge(new Set(ids), failFast)

  // The waiting threads the new wait can reach, with their waits.
  const edges = new Map<string, Edge[]>()
  const seen = new Set<string>([waiter])
  const stack = mine.targets.map((t) => t.tail)
  while (stack.length > 0) {
    const id = stack.pop()!
    if (seen.has(id)) continue
    seen.add(id)
    const waits = graph.waits.get(id)
    if (!waits || waits.size === 0) continue
    const out = [...waits].map((w) => toEdge(w.open, w.failFast))
    edges.set(id, out)
    for (const edge of out) for (const t of edge.targets) if (!seen.has(t.tail)) stack.push(t.tail)
  }

  // Threads that can settle, to a fixpoint: linear in the edges, each counting the threads it still
  // waits on that cannot (yet) be shown to settle.
  const free = new Set<string>()
  const left = new Map<Edge, number>()
  const unended = new Map<string, number>()
  const dependents = new Map<string, Edge[]>()
  const owner = new Map<Edge, string>()
  const ended = new Set<Edge>()
  for (const [id, out] of edges) {
    unended.set(id, out.filter((edge) => edge.targets.length > 0).length)
    for (const edge of out) {
      if (edge.targets.length === 0) ended.add(edge)
      owner.set(edge, id)
      left.set(edge, edge.targets.length)
      for (const t of edge.targets) {
        const list = dependents.get(t.tail)
        if (list) list.push(edge)
        else dependents.set(t.tail, [edge])
      }
    }
  }
  // A fail-fast wait ends early only through a thread that may still fail: one that settled
  // without failing (still named by another process's recorded wait) is no way out.
  const wayOut = new Map<string, boolean>()
  const mayFail = (id: string): boolean => {
    let found = wayOut.get(id)
    if (found === undefined) wayOut.set(id, (found = !graph.stopped(id)))
    return found
  }
  const work = [...seen].filter((id) => id !== waiter && !edges.has(id))
  for (const [id, count] of unended) if (count === 0) work.push(id)
  while (work.length > 0) {
    const id = work.pop()!
    if (free.has(id)) continue
    free.add(id)
    for (const edge of dependents.get(id) ?? []) {
      const count = left.get(edge)! - 1
      left.set(edge, count)
      if (ended.has(edge) || (count > 0 && !(edge.failFast && mayFail(id)))) continue
      ended.add(edge)
      const waiting = owner.get(edge)!
      const rest = unended.get(waiting)! - 1
      unended.set(waiting, rest)
      if (rest === 0) work.push(waiting)
    }
  }
  const ends = (edge: Edge): boolean => ended.has(edge)
  const mineEnds = mine.targets.every((t) => free.has(t.tail)) || (failFast && mine.targets.some((t) => free.has(t.tail) && mayFail(t.tail)))
  if (mineEnds) return null

  // Every thread left waits, in a wait that cannot end, for at least one other thread left (or for
  // the waiter): following those edges from the waiter must come round. Breadth first, to name the
  // shortest cycle through the waiter when there is one.
  const stuck = (id: string): WaitHop[] => {
    const out = id === waiter ? [mine] : (edges.get(id) ?? []).filter((edge) => !ends(edge))
    return out.flatMap((edge) => edge.targets.filter((t) => !free.has(t.tail)).map((t) => ({ thread: id, ...t })))
  }
  const via = new Map<string, WaitHop>()
  const queue = [waiter]
  for (let i = 0; i < queue.length; i++) {
    for (const hop of stuck(queue[i]!)) {
      if (hop.tail === waiter) {
        const cycle = [hop]
        for (let at = hop.thread; at !== waiter; at = via.get(at)!.thread) cycle.unshift(via.get(at)!)
        return { cycle, path: [] }
      }
      if (!via.has(hop.tail)) {
        via.set(hop.tail, hop)
        queue.push(hop.tail)
      }
    }
  }
  // Stuck behind a cycle the waiter is not part of (one a fail-fast wait's way out closed behind).
  const path: WaitHop[] = []
  const at = new Map<string, number>()
  for (let id = waiter; !at.has(id); ) {
    at.set(id, path.length)
    const hop = stuck(id)[0]!
    path.push(hop)
    id = hop.tail
  }
  const start = at.get(path.at(-1)!.tail)!
  return { cycle: path.slice(start), path: path.slice(0, start) }
}

function describeHop(hop: WaitHop): string {
  return hop.tail === hop.waitsFor ? `${hop.thread} waits for ${hop.waitsFor}` : `${hop.thread} waits for ${hop.waitsFor} (continued as ${hop.tail})`
}

/**
 * A thread's wait refused because it could only end at its timeout: it would close a cycle of
 * waits (or wait for threads stuck in one). The model gets it as its tool result, and goes on.
 */
/** A found cycle in words and ids, for a refusal and for a wait ended early. */
function describeCycle(found: WaitCycleFound) {
  const cycle = found.cycle.map((hop) => hop.thread)
  return {
    cycle,
    /** `a → b → a (a waits for b, b waits for a)` */
    loop: `${[...cycle, cycle[0]!].join(' → ')} (${found.cycle.map(describeHop).join(', ')})`,
    /** The hops from the waiter to the cycle, when it is not in it. */
    way: found.path.map(describeHop).join(', '),
    ids: { cycle, ...(found.path.length ? { path: found.path.map((hop) => hop.thread) } : {}) },
  }
}

export class WaitCycleError extends ToolRefusal {
  constructor(waiter: string, found: WaitCycleFound) {
    const first = (found.path[0] ?? found.cycle[0])!
    const { cycle, loop, way, ids } = describeCycle(found)
    const why = found.path.length === 0
      ? `that wait would close a wait cycle, ${loop}, and none of these waits could end before its timeout.`
      : `${way}, and ${cycle[0]} is in a wait cycle, ${loop}, so this wait could only end at its timeout.`
    super(
      'WAIT_CYCLE',
      `Thread ${waiter} cannot wait for ${first.waitsFor}: ${why} The other waits go on. Do something else: finish your part without ` +
        `${first.waitsFor}'s result, or wait only for threads that are not waiting for you.`,
      { details: { threadId: waiter, waitedOn: first.waitsFor, ...ids } },
    )
  }
}
WaitCycleError.prototype.name = 'WaitCycleError'

/**
 * Why a fail-fast wait in progress was ended early: its way out closed (`closedBy`, a thread it
 * waited for that might have failed, settled without failing), and what it still waits for can
 * only settle after its waiter does. Waiting on could only end at its timeout.
 */
export interface WaitCycleEnd {
  code: 'WAIT_CYCLE'
  message: string
  /** As in a refusal's details: each thread waits for the next, the last for the first. */
  cycle: string[]
  /** When the waiter is not in the cycle: the waits that lead from it to the cycle. */
  path?: string[]
}

export function waitCycleEnd(waiter: string, found: WaitCycleFound, closedBy: SettledThread): WaitCycleEnd {
  const { cycle, loop, way, ids } = describeCycle(found)
  const why = found.path.length === 0
    ? `the threads it still waits for can only settle after it does: a wait cycle, ${loop}.`
    : `${way}, and ${cycle[0]} is in a wait cycle, ${loop}.`
  const settled = closedBy.finalThreadId === closedBy.threadId ? closedBy.threadId : `${closedBy.threadId} (continued as ${closedBy.finalThreadId})`
  return {
    code: 'WAIT_CYCLE',
    message:
      `Thread ${waiter}'s fail-fast wait was ended early: ${settled} ${closedBy.status} without failing, so no thread it waits for can ` +
      `end it by failing any more, and ${why} It could only have ended at its timeout. What settled is in \`settled\`; the rest are ` +
      `\`pending\`. Do something else: finish your part without their results.`,
    ...ids,
  }
}

/** Refuses (WAIT_CYCLE, naming the cycle) a wait that the waits in progress keep from ever ending. */
export function assertNoWaitCycle(waiter: string, ids: readonly string[], failFast: boolean, graph: WaitGraph): void {
  const found = findWaitCycle(waiter, ids, failFast, graph)
  if (found) throw new WaitCycleError(waiter, found)
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
  /**
   * Set when a fail-fast wait was ended early because it could only have ended at its timeout: the
   * last thread that might have failed settled without failing, and the threads still pending can
   * only settle after the waiter does (a wait cycle). Absent otherwise.
   */
  cycle?: WaitCycleEnd
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
export async function waitThreads(
  host: WaitHost,
  ids: readonly string[],
  options: WaitOptions = {},
  /**
   * Told of each thread of `ids` as it settles (the runtime keeps its wait-for graph with it).
   * Returning a `WaitCycleEnd` ends the wait there, with it as the report's `cycle`.
   */
  onSettled?: (threadId: string, settled: SettledThread) => WaitCycleEnd | undefined,
): Promise<WaitReport> {
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
        const stuck = onSettled?.(waitedOn, settled)
        report.settled.push(settled)
        if (outcome.status === 'error' && !report.failed) {
          report.failed = settled
          if (options.failFast) return void failFast(settled)
        }
        if (failing) return
        if (open.size === 0) return end()
        if (stuck) {
          report.cycle = stuck
          end()
        }
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
