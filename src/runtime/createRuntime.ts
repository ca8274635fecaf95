/**
 * The composition root: opens the stores, builds the runtime's parts and wires the ports between
 * them — the only place that knows them all — then recovers, starts the parts' timers, and hands
 * host code the `Runtime` facade. `close()` stops the parts in reverse.
 */
import { systemClock } from '../base/clock.js'
import type { ThreadEffects } from '../../actors/threadEffects.js'
import { createThreadEffects } from '../../actors/threadEffects.js'
import { FAILED_ROUND_BACKOFF_MAX_MS, GroupCommit } from '../../persistence/groupCommit.js'
import { checkpointsFailing, isStorageFailure, storageFailureOf } from '../../persistence/storageFailure.js'
import type { Durability } from '../../persistence/types.js'
import { childTools } from '../thread/childTools.js'
import type { Runtime, RuntimeOptions } from './api.js'
import { Approvals } from './approvals.js'
import { Budgets } from './budgets.js'
import { CallDeadlines } from './callDeadlines.js'
import { CallDecisions } from './callDecisions.js'
import { CallerIds } from './callerIds.js'
import { CrashLoopGuard } from './crashLoop.js'
import { Decisions } from './decisions.js'
import { FollowUps } from './followUps.js'
import { createEffectHost } from './effectHost.js'
import { EventBus, Lifecycle } from './events.js'
import { EventStream } from './eventStream.js'
import { Family } from './family.js'
import { InboxPoller } from './inboxPoller.js'
import { registerIntrospection } from './introspect.js'
import { Leases } from './leases.js'
import { ThreadLoader } from './loadThread.js'
import { ModelGate } from './modelGate.js'
import { Models, modelsByName } from './models.js'
import { openStores } from './openStores.js'
import { databaseOf, validateOptions } from './runtimeOptions.js'
import { notified } from './announcements.js'
import { OutputSchemas } from './outputSchemas.js'
import type { Stores } from './openStores.js'
import type { Parts } from './parts.js'
import { SpindleRuntime } from './runtimeFacade.js'
import { Parking } from './parking.js'
import { PolicyDesk } from './policyDesk.js'
import { Reactions } from './reactions.js'
import { Shutdown } from './shutdown.js'
import { validShutdownSignals } from './shutdownSignals.js'
import { Recovery } from './recovery.js'
import { ReplyStream } from './replyStream.js'
import { resolveSettings, toolTable } from './settings.js'
import { Spawner } from './spawner.js'
import { Supervisor } from './supervisor.js'
import { TaskRecovery } from './taskRecovery.js'
import { ThreadStarter } from './threadStarter.js'
import { ThreadTable } from './threadTable.js'
import { ToolGate } from './toolGate.js'
import { loadOpenTelemetry, Tracing } from './tracing.js'
import type { OpenTelemetry } from './tracing.js'
import { Waiting } from './waiting.js'

/**
 * Opens a runtime on a data directory and, unless `recover: false`, carries on every thread that
 * was created or running when the last process stopped.
 *
 * @example
 * const rt = await createRuntime({ dir: '.spindle', model: scriptedModel(script), tools: [lookup] })
 * const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Find X' }, limits: { turns: 20 } })
 * const outcome = await thread.done
 */
export async function createRuntime(options: RuntimeOptions): Promise<Runtime> {
  const durability = validateOptions(options)
  const bus = new EventBus(options.onLifecycle, options.onProblem)
  // Stores report through ports bound to parts built below: called only once the runtime runs.
  let parts: Parts | undefined
  // Loaded once here, so that no step of a thread waits for an import (or pays for one it lacks).
  const otel = await loadOpenTelemetry(options.telemetry)
  const database = databaseOf(options)
  const stores = openStores(
    {
      dir: options.dir ?? '',
      durability,
      ...(database ? { database } : {}),
      ...(options.store ? { store: options.store } : {}),
      ...(options.maxOpenTranscripts !== undefined ? { maxOpenTranscripts: options.maxOpenTranscripts } : {}),
    },
    {
      problem: (error, threadId) => bus.report(error, threadId),
      folderInvalid: (threadId, error) => parts?.reactions.folderInvalid(threadId, error),
      owner: () => (parts?.leases.held ? parts.leases.owner.id : null),
      fenced: (threadId) => parts?.leases.fencedOff(threadId),
      notified: (channel) => parts && notified(parts, channel),
    },
  )
  try {
    parts = buildParts(options, durability, stores, bus, otel)
  } catch (error) {
    stores.close()
    throw error
  }
  const runtime = new SpindleRuntime(parts)
  registerIntrospection(runtime, parts)
  // From here a signal closes the runtime, once it has opened: closing halfway through recovery
  // would leave threads half taken over.
  let markOpened!: () => void
  const opened = new Promise<void>((resolve) => (markOpened = resolve))
  const life = parts.life
  parts.shutdown.listen(validShutdownSignals(options.shutdownSignals), { close: () => opened.then(() => runtime.close()), closing: () => life.closed })
  try {
    if (options.recover !== false) {
      // Before any recovered thread can re-run the spawn_thread call that made one of them.
      parts.budgets.dropUnborn()
      await parts.recovery.recover()
      // After recovery took the dead owners' leases of the threads it carries on: what is left is few.
      parts.recovery.settleLeftDecisions(parts.leases.dropUnborn())
    }
    await parts.inbox.check({ sweep: true }).catch((error: unknown) => {
      // The database stopped answering after recovery started its threads (it is restarting):
      // the runtime opens with them, and the poller's next sweep looks for the requests.
      if (storageFailureOf(error)?.kind !== 'database') throw error
      bus.report(error)
    })
  } catch (error) {
    parts.shutdown.close()
    throw error
  } finally {
    markOpened()
  }
  // Other processes leave requests only in a shared inbox, and may take over only shared leases.
  if (stores.shared) {
    parts.inbox.start()
    parts.leases.start()
  }
  parts.taskRecovery.resumePending()
  parts.events.start()
  parts.life.opened = true
  parts.supervisor.ready()
  bus.emit({ type: 'runtime_ready', at: parts.clock.now(), recovery: parts.recovery.last })
  return runtime
}

function clockOf(options: RuntimeOptions) {
  return options.clock ?? systemClock
}

function buildParts(options: RuntimeOptions, durability: Durability, stores: Stores, bus: EventBus, otel: OpenTelemetry | null): Parts {
  const dir = stores.root
  const clock = clockOf(options)
  const life = new Lifecycle()
  // With a database, `dir` (if given) is only where the project's config.yaml is.
  const { config, hooks } = resolveSettings(options, options.dir ?? dir, bus)
  const models = new Models(modelsByName(options))
  const { transcripts, checkpoints, registry } = stores
  const crashLoop = new CrashLoopGuard(registry, config.supervision.maxRecoveries, (error, threadId) => bus.report(error, threadId), {
    ms: config.supervision.aloneMs,
    clock,
  })
  const commit = new GroupCommit(
    { transcripts, checkpoints, registry },
    (threadId, error) => bus.report(error, threadId),
    (error) => bus.report(isStorageFailure(error) ? checkpointsFailing(dir, error, FAILED_ROUND_BACKOFF_MAX_MS) : error),
    // Until this process has held a lease, what it publishes (registry rows of settled threads
    // it found) is no thread's that another process runs.
    () => (leases.held ? leases.fenced() : null),
    (threadId) => leases.tokenOf(threadId),
  )
  const outputSchemas = new OutputSchemas()
  const replies = new ReplyStream({ whenLogged: () => commit.whenLogged(), report: (error, threadId) => bus.report(error, threadId) })
  const table: ThreadTable = new ThreadTable(checkpoints, () => ({
    effects,
    transcripts,
    checkpoints,
    commit,
    now: () => clock.now(),
    report: (error, threadId) => bus.report(error, threadId),
    observe: tracing
      ? (live, snapshot, previous) => {
          events.observe(live.id, snapshot, previous)
          tracing.observe(live.id, snapshot)
          reactions.observe(live, snapshot, previous)
        }
      : (live, snapshot, previous) => {
          events.observe(live.id, snapshot, previous)
          reactions.observe(live, snapshot, previous)
        },
    fenced: (threadId) => leases.fenced(threadId),
    // Forgetting the thread gave its lease up if it was still this process's: then it is an
    // orphan now (the lines ahead are a stopped process's), taken over on the next turn.
    writtenAhead: () => {
      setImmediate(() => leases.takeOrphans(Date.now()))
    },
    storageFailed: (thread, error) => parking.storageFailed(thread, error),
    outputOf: (threadId, outcome) => {
      // A suspended thread may be carried on here yet, and validated with the host's schema again.
      if (outcome.status !== 'suspended') setImmediate(() => outputSchemas.forget(threadId))
      return outcome.output === undefined ? outcome : { ...outcome, output: outputSchemas.parse(threadId, outcome.output) }
    },
    replies: (thread) => replies.ofThread(thread.id, thread.done),
    ...(options.inspect ? { inspect: options.inspect } : {}),
  }))
  const tracing = otel
    ? new Tracing(otel, {
        transcripts,
        directiveName: (id) => table.get(id)?.directive().name ?? id,
        conversation: (id) => {
          const thread = table.get(id)
          return thread ? { messages: thread.messages(), instructions: thread.directive().instructions } : null
        },
      })
    : null
  const leases: Leases = new Leases({
    store: stores.leases,
    registry,
    table,
    config,
    bus,
    life,
    shared: stores.shared,
    takeOver: () => recovery.recover(),
  })
  const events = new EventStream({ registry, commit, owner: leases.owner, clock, config, bus, life })
  commit.afterEvents = () => events.wake()
  // A thread recovered here was left by a process that stopped or died: taken over.
  bus.on('thread_recovered', (event: { threadId: string; at: number }) => events.takenOver(event.threadId, event.at))
  const budgets = new Budgets({ ledger: stores.ledger, registry, table, leases, leaseStore: stores.leases, clock, config, bus })
  const family = new Family(registry)
  const parking: Parking = new Parking({ table, clock, bus, life, hasChildrenToSettle: (id) => family.hasChildrenToSettle(id) })
  const supervisor = new Supervisor({ table, clock, config, bus, inspect: options.inspect, stop: (id, reason, by) => decisions.cancelAs(id, reason, by) })
  const waiting: Waiting = new Waiting({
    dir,
    holdOpen: stores.announce !== undefined,
    table,
    registry,
    leaseStore: stores.leases,
    ownerId: leases.owner.id,
    clock,
    config,
    bus,
    life,
    cancel: (id, reason, by) => decisions.cancelAs(id, reason, by),
  })
  const policies = new PolicyDesk({ hooks, table, registry, budgets, clock, config, bus, cancel: (thread, reason, by) => parking.cancel(thread, reason, by) })
  const maxThreads = options.maxThreads ?? Number.POSITIVE_INFINITY
  const starter = new ThreadStarter({
    table,
    transcripts,
    commit,
    leases,
    policies,
    supervisor,
    clock,
    tracing,
    events,
    handedOff: (id) => {
      try {
        stores.announce?.('work', id)
      } catch (error) {
        // Workers find it at their next look for orphans all the same.
        bus.report(error, id)
      }
    },
  })
  const builtin =
    options.builtinTools === false
      ? []
      : childTools({
          spawnChild: (parentId, key, spec) => spawner.spawnChild(parentId, key, spec),
          // A wait that cannot be recorded for want of storage parks its caller, as spawn_thread does.
          waitThreads: async (parentId, ids, waitOptions) => {
            try {
              return await waiting.childWait(parentId, ids, waitOptions)
            } catch (error) {
              parking.parkForStorage(parentId, error)
              throw error
            }
          },
        })
  const tools = toolTable(builtin, options.tools ?? [])
  const spawner: Spawner = new Spawner({ dir, config, models, toolNames: new Set(tools.keys()), table, registry, leases, budgets, policies, family, parking, starter, outputSchemas })
  const callerIds = new CallerIds({ table, registry, leases, spawner, life, leaseTtlMs: config.orphans.thresholdMs })
  const gate = new ModelGate({ models, table, registry, recoveryStore: stores.recovery, budgets, policies, parking, starter, clock, config, bus })
  const taskRecovery = new TaskRecovery({ inbox: stores.inbox, store: stores.recovery, registry, table, spawner, clock, config, bus, life })
  const deadlines = new CallDeadlines({ passed: (id, requestId) => calls.deadlinePassed(id, requestId), clock, bus, life })
  const approvals = new Approvals({ deadlines, inbox: stores.inbox, transcripts, commit, clock, bus, life })
  const reactions: Reactions = new Reactions({ table, registry, crashLoop, approvals, policies, taskRecovery, budgets, clock, bus, events })
  const loader = new ThreadLoader({ folders: stores.folders, checkpoints, transcripts, bus })
  const recovery: Recovery = new Recovery({
    room: () => maxThreads - table.size,
    folders: stores.folders,
    table,
    registry,
    checkpoints,
    transcripts,
    commit,
    leases,
    budgets,
    loader,
    crashLoop,
    approvals,
    supervisor,
    waiting,
    clock,
    bus,
    life,
    events,
  })
  const decisions: Decisions = new Decisions({
    dir,
    inbox: stores.inbox,
    table,
    registry,
    transcripts,
    commit,
    leases,
    loader,
    approvals,
    budgets,
    family,
    parking,
    crashLoop,
    supervisor,
    waiting,
    clock,
    bus,
    life,
    events,
  })
  const calls: CallDecisions = new CallDecisions({ decisions, approvals, commit, transcripts, tools, clock })
  const followUps = new FollowUps({ dir, registry, table, transcripts, budgets, policies, starter, clock, bus })
  const inbox = new InboxPoller({
    dir,
    inbox: stores.inbox,
    table,
    registry,
    approvals,
    decisions,
    calls,
    takeNoCancelFile: () => recovery.takeNoCancelFile(),
    clock,
    config,
    bus,
    life,
  })
  const shutdown = new Shutdown()
  const effects: ThreadEffects = createThreadEffects(
    createEffectHost({ clock, models, tools, stoppedAtClose: new Set(builtin.map((t) => t.name)), config, table, commit, crashLoop, shutdown, life, policies, gate, toolGate: new ToolGate({ table, tools, policies, clock, bus }), decisions, parking, reactions, supervisor, bus, outputSchemas, replies, tracing }),
  )
  // What each part keeps for a live thread goes when the thread stops here.
  table.onForget((id, current) => {
    replies.threadStopped(id, life.closed)
    if (current) {
      supervisor.forget(id)
      // Not before the decision that woke it is written next to its request (decisions.ts).
      approvals.afterOwed(id, () => leases.release(id))
      budgets.forget(id)
      crashLoop.stopped(id)
      parking.forget(id)
      tracing?.forgotten(id)
    }
    policies.forget(id)
  })
  // A thread stopping here makes room for one a worker left (maxThreads).
  if (Number.isFinite(maxThreads)) table.onForget(() => setImmediate(() => leases.takeOrphans(Date.now())))
  return {
    dir,
    durability,
    maxThreads,
    runsElsewhere: stores.announce !== undefined,
    config,
    clock,
    bus,
    life,
    stores,
    commit,
    table,
    effects,
    leases,
    budgets,
    family,
    parking,
    supervisor,
    waiting,
    policies,
    crashLoop,
    starter,
    spawner,
    callerIds,
    gate,
    taskRecovery,
    approvals,
    reactions,
    loader,
    recovery,
    decisions,
    calls,
    deadlines,
    followUps,
    inbox,
    shutdown,
    replies,
    tracing,
    events,
  }
}
