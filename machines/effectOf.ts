/**
 * The effect a thread's state asks the runtime to run (`effectOf`), and the input each effect is
 * started with. The machine invokes no actors (see thread.machine.ts): this reads a snapshot and
 * names the step, and actors/threadEffects.ts runs it. Pure.
 */
import type { LimitName } from './threadPolicy.js'
import type { ToolCall } from './threadEvents.js'
import type { CallDecision, ThreadContext } from './threadContext.js'
import { exceeded } from './threadContext.js'

export interface CallModelInput {
  threadId: string
  turn: number
  attempt: number
}

export interface RunToolInput {
  threadId: string
  turn: number
  call: ToolCall
  /** The decision on the call, when it paused for one (approved, denied, answered, timed out). */
  decision?: CallDecision
}

export interface DecideLimitInput {
  threadId: string
  hit: { limit: LimitName; used: number; max: number }
}

export interface SettleChildrenInput {
  threadId: string
  reason: string
}

export interface WaitUntilInput {
  threadId: string
  dueAt: number
}

/**
 * The first call of the turn without a result. Calls run one at a time, in order, so it is the one
 * after those done; the scan is for a snapshot whose results came in another order.
 */
function firstPendingTool(context: ThreadContext): ToolCall | undefined {
  if (!Array.isArray(context.toolCalls) || !Array.isArray(context.toolsDone)) return undefined
  const next = context.toolCalls[context.toolsDone.length]
  if (next !== undefined && !context.toolsDone.includes(next.id)) return next
  const done = new Set(context.toolsDone)
  return context.toolCalls.find((call) => !done.has(call.id))
}

/**
 * The effect a snapshot asks the runtime to run. `key` names the step: it differs whenever the
 * machine leaves the state and enters it again (the next tool call, the next attempt, the next
 * turn), so the runtime starts an effect once per step and stops it when the key changes.
 */
export type ThreadEffect =
  | { src: 'callModel'; key: string; input: CallModelInput }
  | { src: 'runTool'; key: string; input: RunToolInput }
  | { src: 'decideLimit'; key: string; input: DecideLimitInput }
  | { src: 'waitUntil'; key: string; input: WaitUntilInput }
  | { src: 'settleChildren'; key: string; input: SettleChildrenInput }

/** The effect `snapshot`'s state asks for, or null (the thread waits for an event, or has stopped). */
export function effectOf(snapshot: { value: unknown; context: ThreadContext }): ThreadEffect | null {
  const value = snapshot.value
  const context = snapshot.context
  if (value === 'cancelling') return { src: 'settleChildren', key: 'c', input: { threadId: context.threadId, reason: context.cancelReason ?? 'cancelled' } }
  if (typeof value !== 'object' || value === null) return null
  const step = (value as { running?: string }).running
  const turns = context.usage.turns
  switch (step) {
    case 'callingModel':
      return { src: 'callModel', key: `m${turns + 1}.${context.attempt}`, input: { threadId: context.threadId, turn: turns + 1, attempt: context.attempt } }
    // A snapshot that cannot be in this state (no call left, no limit reached: a state.json edited
    // by hand) still names its effect, which then fails the thread with a message; never a throw here.
    case 'runningTools': {
      const call = firstPendingTool(context)
      const decision = call ? context.callDecisions?.[call.id] : undefined
      if (decision) return { src: 'runTool', key: `t${turns}.${call!.id}.d`, input: { threadId: context.threadId, turn: turns, call: call!, decision } }
      return { src: 'runTool', key: `t${turns}.${call?.id}`, input: { threadId: context.threadId, turn: turns, call: call! } }
    }
    case 'limitReached': {
      const hit = exceeded(context)
      return { src: 'decideLimit', key: `l${turns}.${hit?.limit}`, input: { threadId: context.threadId, hit: hit! } }
    }
    case 'waitingToRetry': {
      const dueAt = context.retry?.dueAt ?? 0
      return { src: 'waitUntil', key: `w${dueAt}`, input: { threadId: context.threadId, dueAt } }
    }
    default:
      return null
  }
}
