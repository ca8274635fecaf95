/**
 * Recovery: every created or running thread this runtime does not run yet — and every suspended
 * one that moved on without its registry row knowing — is leased, loaded from its checkpoint (or
 * rebuilt from its transcript) and carried on by a live actor, settled when its checkpoint shows it
 * stopped, quarantined when it crashed its processes too often at one point, or marked `error`
 * when nothing of it can be read.
 */
import type { Clock } from '../base/clock.js'
import { describeError } from '../base/errors.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { threadMachine } from '../../machines/thread.machine.js'
import { makeEnvelope } from '../../persistence/envelope.js'
import { storageFailureOf } from '../../persistence/storageFailure.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { PrefetchedThread, ThreadFileReader } from '../../persistence/prefetch.js'
import type { CheckpointStore, Registry, StateEnvelope, ThreadFolders, ThreadStatus, TranscriptStore } from '../../persistence/types.js'
import { isActive, statusOfValue } from '../thread/threadStatus.js'
import type { RecoveryReport } from './api.js'
import { emptyRecoveryReport } from './api.js'
import type { Approvals } from './approvals.js'
import type { Budgets } from './budgets.js'
import type { CrashLoopGuard } from './crashLoop.js'
import { crashLoopError } from './crashLoop.js'
import type { Emitter, Lifecycle, Reporter } from './events.js'
import type { EventStream } from './eventStream.js'
import type { Leases } from './leases.js'
import { intentsOf } from './loadThread.js'
import type { ThreadLoader } from './loadThread.js'
import type { Supervisor } from './supervisor.js'
import type { ThreadTable } from './threadTable.js'
import type { Waiting } from './waiting.js'

/** How often recovery tells its progress while it works through many threads. */
const RECOVERY_PROGRESS_EVERY_MS = 100
/** From this many threads to recover on, a worker reads their files ahead (below it, starting one costs more). */
const PREFETCH_FROM = 256

export interface RecoveryDeps {
  /** How many more threads this process may run (maxThreads); without it, no limit. */
  room?: () => number
  folders: ThreadFolders
  table: ThreadTable
  registry: Registry
  checkpoints: CheckpointStore
  transcripts: TranscriptStore
  commit: GroupCommit
  leases: Pick<Leases, 'takeMany' | 'release' | 'keepAlive'>
  budgets: Pick<Budgets, 'recordUsage' | 'release'>
  loader: ThreadLoader
  crashLoop: CrashLoopGuard
  approvals: Pick<Approvals, 'suspendedNow' | 'watch' | 'unwatch' | 'isWatched' | 'settleDecisions'>
  supervisor: Pick<Supervisor, 'supervise'>
  waiting: Pick<Waiting, 'wake'>
  clock: Clock
  bus: Reporter & Emitter
  life: Lifecycle
  /** The thread event stream, told of a thread that could not be recovered. */
  events?: Pick<EventStream, 'failed'>
}

export class Recovery {
  /** The report of the last recovery (the one at open, unless `recover()` ran since). */
  last: RecoveryReport = emptyRecoveryReport()
  /** Threads recovery took on whose directory the read-ahead worker saw without a cancel file. */
  private noCancelFile = new Set<string>()

  constructor(private readonly deps: RecoveryDeps) {}

  /** The threads whose folders the read-ahead worker found without a cancel file, since last asked. */
  takeNoCancelFile(): Set<string> {
    const seen = this.noCancelFile
    this.noCancelFile = new Set()
    return seen
  }

  /**
   * Takes the leases of as many of `records` as this process has room for (`maxThreads`), in
   * order, and with them the children of threads run here whatever the room: a parent waits for
   * its children, so they run with it, as the children it spawns here do. A worker that took
   * parents alone could fill its room with parents waiting for children no worker has room for.
   * The rest are left to other workers (a lease held elsewhere takes no room).
   */
  private takeWithinRoom(records: ReadonlyArray<{ id: string; parentId?: string | null }>): Set<string> {
    const room = this.deps.room?.() ?? Number.POSITIVE_INFINITY
    if (!Number.isFinite(room)) return this.deps.leases.takeMany(records.map((r) => r.id))
    const childrenOf = new Map<string, string[]>()
    for (const r of records) {
      if (r.parentId == null) continue
      const siblings = childrenOf.get(r.parentId)
      if (siblings) siblings.push(r.id)
      else childrenOf.set(r.parentId, [r.id])
    }
    const taken = new Set<string>()
    const tried = new Set<string>()
    let family = records.filter((r) => r.parentId != null && this.deps.table.has(r.parentId)).map((r) => r.id)
    let free = room
    let next = 0
    for (;;) {
      const others: string[] = []
      for (; others.length < free && next < records.length; next++) {
        const id = records[next]!.id
        if (!tried.has(id) && !family.includes(id)) others.push(id)
      }
      const batch = [...family, ...others].filter((id) => !tried.has(id))
      if (batch.length === 0) return taken
      for (const id of batch) tried.add(id)
      family = []
      for (const id of this.deps.leases.takeMany(batch)) {
        taken.add(id)
        if (others.includes(id)) free--
        // Its children not tried yet come in the next round, whatever the room.
        family.push(...(childrenOf.get(id) ?? []))
      }
    }
  }

  async recover(): Promise<RecoveryReport> {
    const { table, registry, leases, crashLoop, commit, transcripts, bus, clock } = this.deps
    this.deps.life.assertOpen()
    const report = emptyRecoveryReport()
    const candidates = [...registry.activeStatuses(), ...this.suspendedMovedOn()].filter((record) => !table.has(record.id))
    // Thousands of threads: their files are read on another core while this one restores actors.
    // The worker boots while the leases are taken, and reads only once they are ours: until then
    // another process may still be appending to them.
    const reader = candidates.length >= PREFETCH_FROM ? this.bootReader() : null
    const leased = this.takeWithinRoom(candidates)
    const ours = candidates.filter((r) => leased.has(r.id)).map((r) => r.id)
    const prefetch = reader && ours.length >= PREFETCH_FROM ? reader.read(ours) : null
    if (reader && !prefetch) void reader.cancel() // it exits on its own; nothing waits for that
    const progress = { total: candidates.length, done: 0, spend: 0, lastAt: 0 }
    // The loop holds the event loop; a host shows progress from these events (synchronous writes).
    const tell = (final: boolean): void => {
      const now = performance.now()
      if (!final && now - progress.lastAt < RECOVERY_PROGRESS_EVERY_MS) return
      progress.lastAt = now
      bus.emit({
        type: 'recovery_progress',
        at: clock.now(),
        done: progress.done,
        total: progress.total,
        resumed: report.resumed.length,
        settled: report.settled.length,
        rebuilt: report.rebuilt.length,
        failed: report.failed.length,
        elsewhere: report.elsewhere.length,
        spend: progress.spend,
      })
    }
    if (candidates.length > 0) tell(true)
    // The threads of `ours` not loaded yet (a long loop renews their leases with the live threads').
    const taken = new Set(ours)
    let loaded = 0
    /** Threads the database could not be read for (told once per recovery). */
    let unreadable = 0
    try {
      crashLoop.begin()
      for (const record of candidates) {
        progress.done++
        if (taken.has(record.id)) {
          for (const id of leases.keepAlive(() => ours.slice(loaded))) leased.delete(id)
          loaded++
        }
        if (!leased.has(record.id)) {
          report.elsewhere.push(record.id)
        } else {
          try {
            const read = prefetch?.take(record.id)
            progress.spend += this.rehydrate(record, report, read)
            if (read?.watched === false) this.noCancelFile.add(record.id)
          } catch (error) {
            if (storageFailureOf(error)?.kind === 'database') unreadable = this.leaveForLater(record.id, error, unreadable)
            else this.markUnrecoverable(record.id, error, report)
          }
        }
        tell(progress.done === progress.total)
      }
    } finally {
      // Before this turn of the event loop ends: no recovered thread's effect has run yet.
      crashLoop.flush()
      await prefetch?.close()
    }
    // Journals left by dead processes go once every thread they name holds their lines.
    try {
      await transcripts.settleJournals?.((id) => {
        // A stopped thread (terminal) is opened by no runtime: its lines go back now. A suspended
        // one gets them when it is approved or resumed; an active one when it is recovered.
        const record = registry.get(id)
        return record !== null && !table.has(id) && !isActive(record.status) && record.status !== 'suspended'
      })
    } catch (error) {
      bus.report(error)
    }
    // Settled and failed threads changed stored status: make that durable before reporting it.
    // Resumed threads need no wait here; their first effect waits for their transcript anyway.
    if (report.settled.length + report.failed.length + report.rebuilt.length > 0) await commit.whenDurable()
    // A wait that looked these up while recovery ran read their old rows: it need not poll for them.
    for (const id of [...report.settled, ...report.failed.map((f) => f.threadId)]) this.deps.waiting.wake(id)
    this.last = report
    return report
  }

  /**
   * Threads the registry calls suspended that moved on: a process killed right after an approval,
   * a resume or a cancel of a suspended thread had recorded the decision (the transcript is the
   * truth) but not committed the status it led to. Their state.json says another status (killed
   * between state.json and the registry), or their transcript holds more than state.json covers
   * (killed before state.json). Recovery replays them like running ones; one still suspended after
   * its tail is settled as it was. The others are taken under watch here, as the sweep would, so
   * each state.json is read once.
   */
  private suspendedMovedOn(): Array<{ id: string; status: ThreadStatus; parentId: string | null }> {
    const { registry, table, checkpoints, approvals } = this.deps
    const moved: Array<{ id: string; status: ThreadStatus; parentId: string | null }> = []
    for (const record of registry.statuses(['suspended'])) {
      if (table.has(record.id)) continue
      let envelope: StateEnvelope | null
      try {
        envelope = checkpoints.load(record.id)
      } catch {
        // Damaged: recovery rebuilds it from the transcript (or says why it cannot).
        approvals.unwatch(record.id)
        moved.push(record)
        continue
      }
      const size = this.deps.folders.transcriptBytes(record.id)
      if (size === null) continue
      if (!envelope || envelope.status !== 'suspended' || size > envelope.transcript.bytes) {
        // Watched here as suspended until now (another runtime woke it, then died): no longer.
        approvals.unwatch(record.id)
        moved.push(record)
        continue
      }
      if (approvals.isWatched(record.id)) continue
      const context = (envelope.snapshot as { context: ThreadContext }).context
      approvals.watch(record.id, context)
    }
    return moved
  }

  /**
   * Threads whose dead process's lease was dropped at open (`leases.dropUnborn`): a stopped one may
   * have been stopped by a decision that process recorded and did not live to write next to its
   * request (it keeps the lease until then). Suspended ones are left to the sweep, which knows the
   * request each waits at.
   */
  settleLeftDecisions(ids: readonly string[]): void {
    for (const id of ids) {
      const record = this.deps.registry.get(id)
      if (record && !isActive(record.status) && record.status !== 'suspended') this.deps.approvals.settleDecisions(id, null)
    }
  }

  /** The recovery's read-ahead worker, or null (then the stores read every file) if none can start. */
  private bootReader(): ThreadFileReader | null {
    try {
      return this.deps.folders.readAhead()
    } catch (error) {
      this.deps.bus.report(error)
      return null
    }
  }

  /** Carries one thread on from its checkpoint (or settles it); returns what it has spent. */
  private rehydrate(record: { id: string; status: ThreadStatus; parentId?: string | null }, report: RecoveryReport, read?: PrefetchedThread): number {
    const { table, commit, checkpoints, transcripts, leases, budgets, crashLoop, clock, bus } = this.deps
    const id = record.id
    const { snapshot, tail } = this.deps.loader.load(id, record.status, report, read)
    const value = (snapshot as { value: unknown }).value
    const status = statusOfValue(value as never)
    const context = (snapshot as { context: ThreadContext }).context
    // A crash between a reply and its ledger entry: the transcript says what was spent.
    budgets.recordUsage(id, context.usage, context.previousThreadId != null)
    // A crash between a decision and its file: the transcript says how the request was decided.
    this.deps.approvals.settleDecisions(id, status === 'suspended' ? (context.limitHit?.requestId ?? null) : null, read?.undecided)
    if (!isActive(status)) {
      leases.release(id)
      if (status !== 'suspended' && status !== 'continued') budgets.release(id, context.previousThreadId != null)
      // The checkpoint (or transcript) is ahead of the registry: bring the registry in line.
      checkpoints.stage(id, makeEnvelope(id, status, transcripts.position(id), snapshot, clock.now()))
      commit.noteCheckpoint(id)
      commit.stageRegistry(id, {
        status,
        at: clock.now(),
        suspendReason: status === 'suspended' ? context.suspendReason : null,
        cost: { ...context.usage },
        outcome: { result: context.result ?? undefined, error: context.error },
      })
      transcripts.close(id)
      report.settled.push(id)
      if (status === 'suspended') this.deps.approvals.suspendedNow(id, context)
      return context.usage.spend
    }
    if (record.status !== status) commit.stageRegistry(id, { status, at: clock.now() })
    // Before the actor starts: its effects ask at once whether they are held back.
    const verdict = crashLoop.assess(id, { value, context }, tail, transcripts.position(id).seq)
    const thread = table.adopt(id, { intents: intentsOf(tail) })
    thread.noteBeforeNext('thread_recovered', { at: clock.now(), state: value, pid: process.pid })
    // `snapshot` is private to this call: freshly parsed from state.json or rebuilt by replay.
    thread.start(threadMachine, { snapshot })
    this.deps.supervisor.supervise(id, record.parentId ?? null)
    if (verdict.action === 'quarantine') {
      // Decided before any effect of the restored state can act: effects wait for the checkpoint.
      const at = clock.now()
      thread.deliver({ type: 'QUARANTINED', at, recoveries: verdict.recoveries, seq: verdict.seq, message: verdict.message })
      report.quarantined.push(id)
      bus.report(crashLoopError(id, verdict), id)
      bus.emit({ type: 'thread_quarantined', at, threadId: id, recoveries: verdict.recoveries, seq: verdict.seq, error: { code: 'CRASH_LOOP', message: verdict.message } })
      return context.usage.spend
    }
    if (status === 'created') thread.deliver({ type: 'START', at: clock.now() })
    else thread.deliverBeforeNext({ type: 'RECOVERED', at: clock.now() })
    report.resumed.push(id)
    bus.emit({ type: 'thread_recovered', at: clock.now(), threadId: id, state: value })
    return context.usage.spend
  }

  /**
   * The database did not answer while the thread was loaded (it was restarting, or out of reach):
   * nothing is wrong with the thread, which a later recovery or orphan takeover, here or in
   * another process, carries on once it answers. Marked `error`, it would have stopped for good.
   * One that had started is parked already, and tried again by itself; any other is let go, its
   * lease given up. Returns how many were left so far.
   */
  private leaveForLater(id: string, error: unknown, before: number): number {
    const { table, leases, transcripts, bus } = this.deps
    if (before === 0) bus.report(error, id)
    if (!table.has(id)) {
      leases.release(id)
      transcripts.close(id)
    }
    return before + 1
  }

  private markUnrecoverable(id: string, error: unknown, report: RecoveryReport): void {
    const { registry, leases, budgets, transcripts, commit, clock, bus } = this.deps
    leases.release(id)
    // Its reservation goes back to its parent, as for any thread that ends in error.
    budgets.release(id, registry.get(id)?.previousThreadId != null)
    const { code, message } = describeError(error)
    report.failed.push({ threadId: id, code, message })
    bus.report(error, id)
    transcripts.close(id)
    commit.stageRegistry(id, { status: 'error', at: clock.now(), outcome: { error: { code, message } } })
    this.deps.events?.failed(id, { code, message })
  }
}
