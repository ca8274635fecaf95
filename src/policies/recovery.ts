/**
 * Recovery escalation (design 003 §6): what a task does after a thread of it ends in `error`.
 * Pure: the caller keeps the state (persistence/sqliteRecovery.ts) and carries the decision out.
 *
 * A task is tried by its own directive up to `maxAttempts` times (its first run counts), then by
 * each handler of the chain in turn (`maxAttempts` each), and finally by a person. A failure that comes while the
 * last decision's cooldown is still running reuses that decision and counts no attempt.
 */
import type { RecoveryPolicy } from '../../config/schema.js'

export type RecoveryAction = 'retry' | 'escalate' | 'human'

/** What is kept per task and reason code between failures. */
export interface RecoveryState {
  taskKey: string
  reasonCode: string
  /** The handler whose attempts are being counted: the task's own directive, a chain entry, or 'human'. */
  handler: string
  /** The attempt of that handler decided last (once it has run and failed: the one that failed). */
  attempt: number
  action: RecoveryAction
  /** 'recovering' while a handler tries again; 'escalated_to_human' at the end of the chain. */
  recoveryState: 'recovering' | 'escalated_to_human'
  /** ms since epoch: no new attempt before it. */
  cooldownUntil: number
}

export interface RecoveryDecision {
  action: RecoveryAction
  reasonCode: string
  /** Who tries next: a directive name, or 'human'. */
  handler: string
  /** Attempt number of that handler (1 for a handler that just took over). */
  attempt: number
  /** ms since epoch; the next attempt starts then. */
  cooldownUntil: number
  /** The failure came within the last decision's cooldown: it was reused, nothing was counted. */
  cooldownActive: boolean
}

/** The rule for one reason code: byReason over the defaults. */
export function recoveryRule(policy: RecoveryPolicy, reasonCode: string): Pick<RecoveryPolicy, 'maxAttempts' | 'cooldownSeconds' | 'chain'> {
  const own = policy.byReason[reasonCode] ?? {}
  return {
    maxAttempts: own.maxAttempts ?? policy.maxAttempts,
    cooldownSeconds: own.cooldownSeconds ?? policy.cooldownSeconds,
    chain: own.chain ?? policy.chain,
  }
}

/**
 * Decides what follows a failure of task `taskKey` (its thread ran `directive`), given what was
 * decided after the previous failure for the same reason.
 *
 * @example
 * const { decision, next } = decideRecovery(policy, store.get(key, code), { taskKey: key, reasonCode: code, directive: 'coder', now })
 * // attempt 1 and 2 of 'coder' → retry; then 'debugger' → escalate; at the end → human
 */
export function decideRecovery(
  policy: RecoveryPolicy,
  previous: RecoveryState | null,
  input: { taskKey: string; reasonCode: string; directive: string; now: number },
): { decision: RecoveryDecision; next: RecoveryState } {
  const rule = recoveryRule(policy, input.reasonCode)
  const cooldownMs = rule.cooldownSeconds * 1000
  if (previous && previous.cooldownUntil > input.now) {
    return {
      decision: { ...fromState(previous), cooldownActive: true },
      next: previous,
    }
  }
  const handlers = [input.directive, ...rule.chain.filter((h) => h !== input.directive)]
  // `previous.attempt` is the attempt that has just failed; the thread's first run is attempt 1.
  let handler = previous?.handler ?? input.directive
  let attempt = (previous?.attempt ?? 1) + 1
  let action: RecoveryAction = 'retry'
  if (handler !== 'human' && attempt > rule.maxAttempts) {
    const at = handlers.indexOf(handler)
    handler = handlers[Math.min(at + 1, handlers.length - 1)] ?? 'human'
    attempt = 1
    action = 'escalate'
  }
  if (handler === 'human') action = 'human'
  const next: RecoveryState = {
    taskKey: input.taskKey,
    reasonCode: input.reasonCode,
    handler,
    attempt,
    action,
    recoveryState: action === 'human' ? 'escalated_to_human' : 'recovering',
    cooldownUntil: action === 'human' ? input.now : input.now + cooldownMs,
  }
  return { decision: { ...fromState(next), cooldownActive: false }, next }
}

function fromState(state: RecoveryState): Omit<RecoveryDecision, 'cooldownActive'> {
  return { action: state.action, reasonCode: state.reasonCode, handler: state.handler, attempt: state.attempt, cooldownUntil: state.cooldownUntil }
}

/** A sentence a person can read. */
export function describeRecovery(decision: RecoveryDecision): string {
  const when = decision.cooldownActive ? ' (within the cooldown of the last decision: reused, no attempt counted)' : ''
  switch (decision.action) {
    case 'retry':
      return `After ${decision.reasonCode}, ${decision.handler} tries again (attempt ${decision.attempt}) at ${new Date(decision.cooldownUntil).toISOString()}${when}.`
    case 'escalate':
      return `After ${decision.reasonCode}, the task goes to ${decision.handler} (attempt ${decision.attempt}) at ${new Date(decision.cooldownUntil).toISOString()}${when}.`
    case 'human':
      return `After ${decision.reasonCode}, every handler has had its attempts: a person must decide what to do with this task${when}.`
  }
}
