/**
 * The orchestrator: the supervisor over a runtime's thread actors, as a pure statechart.
 *
 * It keeps the supervision tree (which thread belongs to which group, in which order they
 * started, how each is restarted) and decides what a crash leads to. It does no I/O: every
 * decision leaves as an emitted event (`restart`, `stop`, `give_up`) that the runtime carries out,
 * so the decisions can be replayed in tests and watched in the Stately inspector.
 *
 * A group is the children of one parent thread; threads spawned by host code form the group
 * `root`. Restart types follow OTP, read for threads (whose own end — completed, error,
 * cancelled — is always a decision of the thread, never a crash):
 * - permanent: restarted after its own crash, and restarted with its group when a sibling's
 *   crash restarts the group (one_for_all, rest_for_one);
 * - transient: restarted after its own crash; left running when a sibling's crash restarts the group;
 * - temporary: never restarted; its crash ends it in `error`, and a group restart stops it.
 *
 * Restart intensity is counted over what one crash restarts: under `one_for_one` the thread's own
 * restarts, under `one_for_all` and `rest_for_one` the group's. Past it, the supervisor gives up on
 * what a restart would have swept: the crashed thread alone under `one_for_one` (its siblings are
 * independent of it, like the threads host code spawns), the whole group under `one_for_all`, the
 * crashed thread and those started after it under `rest_for_one`.
 */
import { enqueueActions, setup } from 'xstate'

export type RestartType = 'permanent' | 'transient' | 'temporary'
export type SupervisionStrategy = 'one_for_one' | 'one_for_all' | 'rest_for_one'

export interface SupervisedThread {
  id: string
  /** The group it belongs to: its parent's id, or 'root'. */
  group: string
  restart: RestartType
  /** Start order within the runtime (rest_for_one restarts those started after the crashed one). */
  seq: number
}

export interface OrchestratorContext {
  /**
   * Times of restarts within the intensity window: per thread (`group/id`) under `one_for_one`,
   * per group under the strategies that restart siblings together.
   */
  restarts: Record<string, number[]>
  defaultStrategy: SupervisionStrategy
  intensity: { maxRestarts: number; withinMs: number }
}

export interface CrashError {
  code: string
  message: string
}

/**
 * A crash, with what supervision needs to know of the group at that moment: the runtime knows its
 * live threads, so the orchestrator keeps no copy of them (spawning stays O(1) however many run).
 */
export type OrchestratorEvent =
  | {
      type: 'THREAD_CRASHED'
      at: number
      error: CrashError
      /** The crashed thread; `undefined` when the runtime does not run it (it is not restarted). */
      thread: SupervisedThread | undefined
      id: string
      /** The other live members of its group. */
      siblings: SupervisedThread[]
      /** The strategy its parent set for its children, when it set one. */
      strategy?: SupervisionStrategy
    }
  | { type: 'READY' }
  | { type: 'CLOSE' }

/** What the orchestrator tells the runtime to do. */
export type OrchestratorEmitted =
  | { type: 'crashed'; id: string; group: string; error: CrashError }
  /** Rehydrate these threads from their last checkpoint (the crashed one first). */
  | { type: 'restart'; ids: string[]; crashed: string; group: string; restartsInWindow: number }
  /** End these threads (temporary siblings of a group restart): cancelled, naming the crash. */
  | { type: 'stop'; ids: string[]; crashed: string; reason: string }
  /** Restart intensity exceeded, or a temporary thread crashed: these threads end in `error`. */
  | { type: 'give_up'; ids: string[]; crashed: string; group: string; report: string }

export interface OrchestratorInput {
  defaultStrategy: SupervisionStrategy
  intensity: { maxRestarts: number; withinMs: number }
}

type Crash = Extract<OrchestratorEvent, { type: 'THREAD_CRASHED' }>

function strategyOf(context: OrchestratorContext, event: Crash): SupervisionStrategy {
  return event.strategy ?? context.defaultStrategy
}

/** Where a crash's restarts are counted: the thread alone under one_for_one, else its group. */
function restartKey(context: OrchestratorContext, event: Crash): string {
  const group = event.thread?.group ?? 'root'
  return strategyOf(context, event) === 'one_for_one' ? `${group}/${event.id}` : group
}

/** The siblings a crash sweeps along (restarted with it, or given up with it). */
function sweptSiblings(context: OrchestratorContext, event: Crash): SupervisedThread[] {
  const strategy = strategyOf(context, event)
  const siblings = [...event.siblings].sort((a, b) => a.seq - b.seq)
  if (strategy === 'one_for_all') return siblings
  if (strategy === 'rest_for_one') return siblings.filter((t) => t.seq > event.thread!.seq)
  return []
}

function recentRestarts(context: OrchestratorContext, key: string, at: number): number[] {
  return (context.restarts[key] ?? []).filter((t) => t > at - context.intensity.withinMs)
}

export const orchestratorMachine = setup({
  types: {
    context: {} as OrchestratorContext,
    events: {} as OrchestratorEvent,
    input: {} as OrchestratorInput,
    emitted: {} as OrchestratorEmitted,
  },
  guards: {
    isKnownThread: ({ event }) => event.type === 'THREAD_CRASHED' && event.thread !== undefined,
    isTemporary: ({ event }) => event.type === 'THREAD_CRASHED' && event.thread?.restart === 'temporary',
    intensityExceeded: ({ context, event }) =>
      event.type === 'THREAD_CRASHED' &&
      event.thread !== undefined &&
      recentRestarts(context, restartKey(context, event), event.at).length >= context.intensity.maxRestarts,
  },
  actions: {
    reportCrash: enqueueActions(({ event, enqueue }) => {
      if (event.type !== 'THREAD_CRASHED') return
      enqueue.emit({ type: 'crashed', id: event.id, group: event.thread?.group ?? 'root', error: event.error })
    }),
    giveUpUnknown: enqueueActions(({ event, enqueue }) => {
      if (event.type !== 'THREAD_CRASHED') return
      enqueue.emit({
        type: 'give_up',
        ids: [event.id],
        crashed: event.id,
        group: 'root',
        report: `Thread ${event.id} crashed (${event.error.code}: ${event.error.message}) outside supervision; it is not restarted.`,
      })
    }),
    giveUpTemporary: enqueueActions(({ event, enqueue }) => {
      if (event.type !== 'THREAD_CRASHED') return
      const thread = event.thread!
      enqueue.emit({
        type: 'give_up',
        ids: [event.id],
        crashed: event.id,
        group: thread.group,
        report: `Thread ${event.id} crashed (${event.error.code}: ${event.error.message}); it is temporary, so it is not restarted.`,
      })
    }),
    giveUpGroup: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'THREAD_CRASHED') return
      const thread = event.thread!
      const recent = recentRestarts(context, restartKey(context, event), event.at)
      const swept = sweptSiblings(context, event)
      const ids = [event.id, ...swept.map((t) => t.id)]
      const group = thread.group === 'root' ? 'the root group' : `the children of ${thread.group}`
      const where = strategyOf(context, event) === 'one_for_one' ? 'it' : group
      const stopping = swept.length === 0 ? `Ending ${event.id}` : `Ending ${ids.join(', ')} (${strategyOf(context, event)})`
      enqueue.emit({
        type: 'give_up',
        ids,
        crashed: event.id,
        group: thread.group,
        report:
          `Thread ${event.id} crashed (${event.error.code}: ${event.error.message}) after ${recent.length} restart(s) of ` +
          `${where} within ${context.intensity.withinMs} ms, more than the restart intensity allows ` +
          `(${context.intensity.maxRestarts} in ${context.intensity.withinMs} ms). ${stopping}. ` +
          'Look at the crash in the transcript (thread_crashed notes), fix its cause, then resume or re-run the work.',
      })
    }),
    restartByStrategy: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== 'THREAD_CRASHED') return
      const thread = event.thread!
      const strategy = strategyOf(context, event)
      const swept = sweptSiblings(context, event)
      const restarted = [event.id, ...swept.filter((t) => t.restart === 'permanent').map((t) => t.id)]
      const stopped = swept.filter((t) => t.restart === 'temporary').map((t) => t.id)
      const key = restartKey(context, event)
      const recent = [...recentRestarts(context, key, event.at), event.at]
      // Keys whose restarts all left the window go: one per thread that ever crashed would pile up.
      const restarts: Record<string, number[]> = {}
      for (const [other, times] of Object.entries(context.restarts)) {
        if (other !== key && recentRestarts(context, other, event.at).length > 0) restarts[other] = times
      }
      restarts[key] = recent
      enqueue.assign({ restarts })
      if (stopped.length > 0) {
        enqueue.emit({
          type: 'stop',
          ids: stopped,
          crashed: event.id,
          reason: `stopped by ${strategy} supervision: sibling ${event.id} crashed (${event.error.message})`,
        })
      }
      enqueue.emit({ type: 'restart', ids: restarted, crashed: event.id, group: thread.group, restartsInWindow: recent.length })
    }),
  },
}).createMachine({
  id: 'orchestrator',
  context: ({ input }) => ({
    restarts: {},
    defaultStrategy: input.defaultStrategy,
    intensity: input.intensity,
  }),
  initial: 'recovering',
  on: {
    THREAD_CRASHED: [
      { guard: 'isTemporary', actions: ['reportCrash', 'giveUpTemporary'] },
      { guard: 'intensityExceeded', actions: ['reportCrash', 'giveUpGroup'] },
      { guard: 'isKnownThread', actions: ['reportCrash', 'restartByStrategy'] },
      { actions: ['reportCrash', 'giveUpUnknown'] },
    ],
  },
  states: {
    recovering: {
      on: { READY: { target: 'ready' }, CLOSE: { target: 'closed' } },
    },
    ready: {
      on: { CLOSE: { target: 'closed' } },
    },
    closed: { type: 'final' },
  },
})
