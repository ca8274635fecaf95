/**
 * Limit escalation: what a thread that hit a limit proposes, and the words a person reads before
 * approving it.
 */
import type { EscalationPolicy, EscalationRule } from '../../config/schema.js'
import type { LimitName } from '../../machines/threadPolicy.js'
import type { Usage } from '../../machines/threadContext.js'
import { formatUsd as money } from '../base/money.js'

/** The new limit to propose for a hit of `max`, or null when the policy is deny_only. */
export function proposeLimit(max: number, rule: EscalationRule): number | null {
  const cap = (value: number): number => (rule.ceiling !== undefined ? Math.min(value, rule.ceiling) : value)
  let proposed: number | null
  switch (rule.policy) {
    case 'double':
      // A limit of 0 doubles to 0: propose 1 so that approving it changes something.
      proposed = cap(max > 0 ? max * 2 : 1)
      break
    case 'add':
      proposed = cap(max + (rule.amount ?? max))
      break
    case 'ceiling':
      proposed = rule.ceiling ?? null
      break
    case 'deny_only':
      proposed = null
      break
  }
  // A ceiling already reached leaves nothing to propose. Neither does a limit so large that
  // doubling it overflows: Infinity would be written as null in the request file — unlimited.
  return proposed !== null && Number.isFinite(proposed) && proposed > max ? proposed : null
}

export function ruleFor(policy: EscalationPolicy, limit: LimitName): EscalationRule {
  return policy[limit]
}

function show(limit: LimitName, value: number): string {
  switch (limit) {
    case 'spend':
      return money(value)
    case 'durationMs':
      return `${(value / 1000).toFixed(1)} s`
    default:
      return value.toLocaleString('en-US')
  }
}

const NOUN: Record<LimitName, string> = { turns: 'turn', tokens: 'token', spend: 'spend', durationMs: 'running time' }

/** The message of an approval request, e.g. "Thread 'research' has reached its spend limit. …" */
export function escalationMessage(
  directive: string,
  hit: { limit: LimitName; used: number; max: number; proposed: number | null },
  cost: Usage,
): string {
  const lines = [
    `Thread '${directive}' has reached its ${NOUN[hit.limit]} limit.`,
    '',
    `Used: ${show(hit.limit, hit.used)}`,
    `Limit: ${show(hit.limit, hit.max)}`,
    `Turns so far: ${cost.turns}`,
    `Tokens so far: ${(cost.inputTokens + cost.outputTokens).toLocaleString('en-US')}`,
    `Spend so far: ${money(cost.spend)}`,
    '',
    hit.proposed !== null
      ? `Approve to raise the ${NOUN[hit.limit]} limit to ${show(hit.limit, hit.proposed)}?`
      : `The escalation policy proposes no new limit: approve with explicit limits, or deny.`,
  ]
  return lines.join('\n')
}
