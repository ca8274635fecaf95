/**
 * Crash-loop detection across processes. The supervisor's restart intensity lives in the memory
 * of the process it counts in, so a thread whose work kills that process (a tool calling
 * process.exit(), running the heap out of memory, a native crash) is rehydrated by every new
 * process and kills it again at the same place, and every other thread of the data directory
 * waits behind it forever. Here the count lives in the registry instead: how many recoveries in
 * a row found the thread at the same point of its history. Past `supervision.maxRecoveries` it is
 * quarantined — suspended with CRASH_LOOP for a person — instead of being run again.
 *
 * Which thread killed a process cannot be read from what it left: every thread that was busy looks
 * alike on disk, and a slow model call gets no further before the poison kills the process than
 * the poison does. So a thread found at the same point twice in a row is a suspect, and while a
 * process has suspects it is on probation: each suspect in turn runs alone — every other effect,
 * of any thread, waits — until it has taken a step or stopped; then everything runs as usual. A
 * thread's count is written (write-ahead) just before it runs code that could kill the process, so
 * a process that dies while the poison runs alone counts against the poison, and not against the
 * threads it held back.
 */
import type { Clock } from '../base/clock.js'
import { systemClock } from '../base/clock.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { RecoveryCount, Registry, TranscriptEntry } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import { isMachineEventEntry } from '../thread/replay.js'
import { isStateValue } from '../thread/threadStatus.js'

/** What recovery does with one unfinished thread. */
export type RecoveryVerdict =
  | { action: 'run' }
  /** A suspect: its effects wait (`CrashLoopGuard.waitTurn`) until its turn to run alone. */
  | { action: 'hold' }
  | { action: 'quarantine'; recoveries: number; seq: number; message: string }

const RUN: RecoveryVerdict = { action: 'run' }
const HOLD: RecoveryVerdict = { action: 'hold' }
/** A row's count before any recovery counted it. */
const INITIAL: RecoveryCount = { count: 0, seq: null }

/** Entries recovery itself writes as inputs: a thread that got no further than these made no progress. */
const RECOVERY_INPUTS = new Set(['RECOVERED', 'QUARANTINED'])

/**
 * The seq of the last entry that moved the thread on: the last recorded input of `tail` other
 * than recovery's own, else the checkpoint's position (a checkpoint is written at a transition).
 * Notes (`thread_recovered`, the `tool_intent` of an idempotent tool run again) are not progress.
 */
export function progressSeq(tail: readonly TranscriptEntry[], endSeq: number): number {
  for (let i = tail.length - 1; i >= 0; i--) {
    const entry = tail[i]!
    if (isMachineEventEntry(entry) && !RECOVERY_INPUTS.has(entry.type)) return entry.seq
  }
  // The tail is every entry after the checkpoint: what precedes it ends at the checkpoint.
  return endSeq - tail.length
}

function nextTool(context: ThreadContext): string | null {
  const done = new Set(context.toolsDone)
  return context.toolCalls.find((call) => !done.has(call.id))?.name ?? null
}

/**
 * Whether a thread recovered at this point runs code that could have killed the process. A retry
 * wait records RETRY_DUE before anything runs, cancelling and `wait_threads` only wait for other
 * threads: a thread waiting there through the crashes of others is no suspect.
 */
function mayHaveKilled(value: unknown, context: ThreadContext): boolean {
  if (value === 'cancelling' || isStateValue(value, 'waitingToRetry')) return false
  if (isStateValue(value, 'runningTools')) return nextTool(context) !== 'wait_threads'
  return true
}

/**
 * Suspects found in a model call that run alone in one recovery: those with the highest counts,
 * the earliest found first. A model call mostly waits on the network, for seconds or minutes; were
 * every thread found twice in the same call (all of a busy directory, after two crashes in a row
 * from any cause) to run alone until its reply came, the others would wait for hours. The rest are
 * not counted this time and run with everyone once the probation ends: a death then is no
 * evidence against any of them. A poison among them gets its turn to run alone in a later
 * recovery (those ahead of it got further and are no longer suspects), dies alone and is counted.
 */
export const MODEL_SUSPECTS_ALONE = 4

/** Whether a thread recovered here would start with a model call (a created thread's first step is one). */
function inModelCall(value: unknown): boolean {
  return value === 'created' || isStateValue(value, 'callingModel')
}

function whereItDies(value: unknown, context: ThreadContext): string {
  if (isStateValue(value, 'runningTools')) return `running the tool "${nextTool(context) ?? '?'}"`
  if (isStateValue(value, 'callingModel')) return 'calling the model'
  if (isStateValue(value, 'limitReached')) return 'deciding on a limit hit (its limit hooks)'
  return `in state ${JSON.stringify(value)}`
}

export function crashLoopMessage(id: string, recoveries: number, seq: number, where: string): string {
  return (
    `Recovery found thread ${id} ${recoveries} times in a row at the same point (transcript seq ${seq}), and each time it ` +
    `was run on from there the process running it died before it got any further (${where}): a crash loop, such as a tool that ` +
    `exits the process, runs it out of memory or crashes natively. The thread is quarantined — suspended, so that the ` +
    `other threads of the data directory run. Inspect it with \`spindle show ${id}\` and \`spindle logs ${id}\`, fix ` +
    `the cause, then resume it with \`spindle resume ${id}\` (rt.resume), which resets its count.`
  )
}

interface Gate {
  promise: Promise<void>
  open: () => void
}

/** A suspect waiting for its turn to run alone. */
interface Held extends RecoveryCount {
  gate: Gate
  modelCall: boolean
  /** Opened because it stopped or was cancelled, not because its turn came. */
  letGo: boolean
}

function newGate(): Gate {
  let open!: () => void
  const promise = new Promise<void>((resolve) => (open = resolve))
  return { promise, open }
}

/** @internal One runtime's side of crash-loop detection. */
export class CrashLoopGuard {
  /** Counts of threads that run as usual, written just before they may run. */
  private pending: Array<{ id: string } & RecoveryCount> = []
  /** Counts of quarantined threads, written with the next flush. */
  private quarantines: Array<{ id: string } & RecoveryCount> = []
  /** Suspects waiting for their turn to run alone, in recovery's order. */
  private readonly held = new Map<string, Held>()
  /**
   * Threads cancelled while the probation runs: `cancelling` runs no code that could kill the
   * process (it only waits for children), so they wait for nobody; `clearedMore` wakes the waiting.
   */
  private readonly cleared = new Set<string>()
  private clearedMore = newGate()
  /** The suspect running alone now, until it takes a step or stops. */
  private admitted: string | null = null
  /** Its count, written once its effect is about to run code (`starting`). */
  private admittedCount: RecoveryCount | null = null
  /** While there are suspects, what every other effect waits for. */
  private probation: Gate | null = null
  /** A recovery is starting threads: whether there will be a probation is known at its flush. */
  private recovering = false
  /** Threads this runtime counted above 0: a clean close resets them. */
  private readonly counted = new Set<string>()
  private closed = false
  /** The counts the registry held when this recovery began (`begin`); null when they could not be read. */
  private stored: Map<string, RecoveryCount> | null = null
  /** Ends the probation should the suspect running alone take no step within `supervision.aloneMs`. */
  private aloneTimer: unknown = null

  constructor(
    private readonly registry: Registry,
    /** `supervision.maxRecoveries`; null turns detection off. */
    private readonly max: number | null,
    private readonly report: (error: unknown, threadId?: string) => void,
    /** `supervision.aloneMs` (null: no bound) and the clock it is measured on. */
    private readonly alone: { ms: number | null; clock: Clock } = { ms: null, clock: systemClock },
  ) {}

  /** Recovery starts threads; `flush` follows in the same turn of the event loop. */
  begin(): void {
    if (this.max === null) return
    this.recovering = true
    try {
      // One read for the whole recovery: a query per thread cost 175 ms over 10,000 threads.
      this.stored = this.registry.recoveryCounts()
    } catch (error) {
      // Without the counts no thread can be judged; running them is what recovery did before.
      this.stored = null
      this.report(error)
    }
  }

  /**
   * Decides about a thread recovery found unfinished, before its actor starts. `endSeq`: its
   * transcript's last seq as recovery found it; `tail`: the entries after its checkpoint.
   */
  assess(id: string, snapshot: { value: unknown; context: ThreadContext }, tail: readonly TranscriptEntry[], endSeq: number): RecoveryVerdict {
    if (this.max === null || this.stored === null) return RUN
    // A thread missing from the read has the initial count (or no row: its write is skipped).
    const stored = this.stored.get(id) ?? INITIAL
    const seq = progressSeq(tail, endSeq)
    if (!mayHaveKilled(snapshot.value, snapshot.context)) {
      if (stored.count !== 0 || stored.seq !== seq) this.pending.push({ id, count: 0, seq })
      return RUN
    }
    const count = stored.seq === seq ? stored.count + 1 : 1
    if (count > this.max) {
      this.quarantines.push({ id, count, seq })
      return { action: 'quarantine', recoveries: count, seq, message: crashLoopMessage(id, count, seq, whereItDies(snapshot.value, snapshot.context)) }
    }
    this.counted.add(id)
    if (count === 1) {
      this.pending.push({ id, count, seq })
      return RUN
    }
    // Whether it runs alone is known at the flush, once every suspect has been found.
    this.held.set(id, { count, seq, gate: newGate(), modelCall: inModelCall(snapshot.value), letGo: false })
    return HOLD
  }

  /**
   * Recovery has started every thread it found, in this same turn of the event loop: no effect
   * has got past its first \`await\` yet. Writes the counts of the quarantined threads, then either
   * those of the others (no suspects) or starts the probation: the first suspect runs alone.
   */
  flush(): void {
    this.recovering = false
    this.stored = null
    this.write(this.quarantines.splice(0))
    this.releaseModelCallsBeyondTurns()
    if (this.held.size > 0) this.probation ??= newGate()
    if (this.probation) this.admitNext()
    else {
      this.cleared.clear()
      this.write(this.pending.splice(0))
    }
  }

  /**
   * What an effect of thread \`id\` waits for before it runs code that could kill the process;
   * undefined when it need not wait (no recovery or probation under way: the usual case).
   */
  waitTurn(id: string): Promise<void> | undefined {
    if (!this.recovering && this.probation === null) return undefined
    return this.waitLoop(id)
  }

  private async waitLoop(id: string): Promise<void> {
    // Called while recovery starts threads: whether there is a probation is known once it is done.
    await null
    for (;;) {
      if (this.cleared.has(id)) return
      const held = this.held.get(id)
      if (held) {
        await held.gate.promise
        // Stopped here, or cancelled: what waited returns (or settles its children) now, not at
        // the probation's end, when it would find its thread gone.
        if (held.letGo) return
        continue
      }
      if (!this.probation || id === this.admitted) return
      await Promise.race([this.probation.promise, this.clearedMore.promise])
    }
  }

  /**
   * Thread \`id\` made a transition, to `value`: if it is the suspect running alone, it got
   * further, and the next may run; if it was cancelled (with children to settle), it waits for
   * nobody from now on, and a suspect is let go uncounted.
   */
  progressed(id: string, value?: unknown): void {
    if (value === 'cancelling' && (this.probation !== null || this.recovering) && !this.cleared.has(id)) {
      this.cleared.add(id)
      this.letGo(id)
      const more = this.clearedMore
      this.clearedMore = newGate()
      more.open()
    }
    if (id !== this.admitted) return
    this.stopAloneTimer()
    this.admitted = null
    this.admittedCount = null
    // Not from inside the actor's notification that brought us here.
    queueMicrotask(() => this.admitNext())
  }

  /** Thread \`id\` stopped here (ended, suspended, detached): it holds nobody back any more. */
  stopped(id: string): void {
    // Only live threads are reset at a clean close: a runtime that runs for months keeps nothing of the rest.
    this.counted.delete(id)
    this.cleared.delete(id)
    this.letGo(id)
    this.progressed(id)
  }

  /** A held suspect leaves the queue uncounted; its effects see that they were stopped, and return. */
  private letGo(id: string): void {
    const held = this.held.get(id)
    if (!held) return
    this.held.delete(id)
    held.letGo = true
    held.gate.open()
  }

  /** A person resumed the thread: whatever it did before, trying again starts a new count. */
  reset(id: string): void {
    if (this.max === null) return
    this.counted.delete(id)
    try {
      this.registry.resetRecoveryCounts([id])
    } catch (error) {
      this.report(error, id)
    }
  }

  /**
   * The runtime is closing: nothing is let through after this; the waiting effects are woken to
   * find their threads stopped (the close stops them in the same turn of the event loop).
   */
  close(): void {
    if (this.closed) return
    this.closed = true
    this.stopAloneTimer()
    for (const held of this.held.values()) held.gate.open()
    this.held.clear()
    this.cleared.clear()
    this.probation?.open()
    this.probation = null
  }

  /**
   * A closing runtime stops \`live\` threads where they stand, each with nothing running that could
   * still kill the process: that was no crash, so the next process counts them from zero. Called
   * before they are stopped (stopping forgets what was counted); the threads whose tool calls were
   * given a grace to finish come last, once it is over — should one of those calls kill the
   * process meanwhile, its count stands.
   */
  stoppedCleanly(live: Iterable<string>): void {
    if (this.max === null) return
    const ids = [...live].filter((id) => this.counted.has(id))
    if (ids.length === 0) return
    for (const id of ids) this.counted.delete(id)
    try {
      this.registry.resetRecoveryCounts(ids)
    } catch (error) {
      this.report(error)
    }
  }

  /** Suspects in a model call past MODEL_SUSPECTS_ALONE wait for the probation's end like everyone else, uncounted. */
  private releaseModelCallsBeyondTurns(): void {
    const inCalls = [...this.held].filter(([, held]) => held.modelCall)
    if (inCalls.length <= MODEL_SUSPECTS_ALONE) return
    // Array.prototype.sort is stable: equal counts keep the order recovery found them in.
    const alone = new Set(
      inCalls
        .sort(([, a], [, b]) => b.count - a.count)
        .slice(0, MODEL_SUSPECTS_ALONE)
        .map(([id]) => id),
    )
    for (const [id, held] of inCalls) {
      if (alone.has(id)) continue
      this.held.delete(id)
      held.gate.open()
    }
  }

  /** The next suspect runs alone; once none is left, the probation ends and everything runs. */
  private admitNext(): void {
    if (this.closed || this.admitted !== null || this.probation === null) return
    const next = this.held.entries().next()
    if (next.done) return this.endProbation()
    const [id, held] = next.value
    this.held.delete(id)
    this.admitted = id
    this.admittedCount = { count: held.count, seq: held.seq }
    if (this.alone.ms !== null) this.aloneTimer = this.alone.clock.setTimeout(() => this.aloneTooLong(id), this.alone.ms)
    held.gate.open()
  }

  /**
   * The suspect running alone took no step within `supervision.aloneMs` (a tool or model call that
   * does not return): holding every other thread of the directory back behind it would stall them
   * all. The probation ends: everything runs, the suspects still waiting uncounted (a death from
   * now on is no evidence against them). Its own count stays: it was found at the same point again.
   */
  private aloneTooLong(id: string): void {
    this.aloneTimer = null
    if (this.closed || this.admitted !== id || this.probation === null) return
    const waiting = [...this.held.keys()]
    this.report(
      new SpindleError(
        'CRASH_LOOP_PROBATION_ENDED',
        `Thread ${id}, found by recovery at the same point as before its process died, ran alone for ${this.alone.ms} ms ` +
          `(supervision.aloneMs) without taking a step, so the other threads run beside it again` +
          (waiting.length ? `, ${waiting.length} other suspect(s) among them, uncounted` : '') +
          `. Should this process die now, only ${id} is counted for it. If it is stuck, cancel it (spindle cancel ${id}).`,
        { details: { threadId: id, aloneMs: this.alone.ms, uncounted: waiting } },
      ),
      id,
    )
    this.admitted = null
    this.admittedCount = null
    for (const held of this.held.values()) held.gate.open()
    this.held.clear()
    this.endProbation()
  }

  /** No suspect is left to run alone: the counts of the others are written, and everything runs. */
  private endProbation(): void {
    this.write(this.pending.splice(0))
    this.cleared.clear()
    this.probation?.open()
    this.probation = null
  }

  private stopAloneTimer(): void {
    if (this.aloneTimer === null) return
    this.alone.clock.clearTimeout(this.aloneTimer)
    this.aloneTimer = null
  }

  /**
   * An effect of thread `id` passed its turn and its records are durable: it is about to run code
   * that could kill the process. Write-ahead: should the suspect running alone kill this process
   * too, the next one must see this recovery. Written no earlier, so that a process killed from
   * outside while a suspect only waited for the disk does not count against it.
   */
  starting(id: string): void {
    if (id !== this.admitted || this.admittedCount === null) return
    const { count, seq } = this.admittedCount
    this.admittedCount = null
    this.write([{ id, count, seq }])
  }

  private write(counts: Array<{ id: string } & RecoveryCount>): void {
    try {
      this.registry.setRecoveryCounts(counts)
    } catch (error) {
      this.report(error)
    }
  }
}

/** The error a quarantined thread is suspended with, for onProblem and lifecycle listeners. */
export function crashLoopError(id: string, verdict: Extract<RecoveryVerdict, { action: 'quarantine' }>): SpindleError {
  return new SpindleError('CRASH_LOOP', verdict.message, { details: { threadId: id, recoveries: verdict.recoveries, seq: verdict.seq } })
}
