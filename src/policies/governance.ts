/**
 * Budget governance (design 003 §7): per-thread token, wall-time and retry budgets, and the
 * degrade policy applied each time one is exceeded. Pure.
 */
import type { GovernanceAction, GovernancePolicy } from '../../config/schema.js'

export type GovernedKey = 'tokens' | 'wallTimeMs' | 'retries'

export interface GovernanceVerdict {
  exceededKeys: GovernedKey[]
  action: GovernanceAction
  reasonCode: 'budget_exceeded'
  /** Which entry of degradePolicy applied (0 for the first time a budget is exceeded). */
  degradeStep: number
}

/** The budgets of one directive: byDirective over the defaults. */
export function governanceFor(policy: GovernancePolicy, directive: string): Omit<GovernancePolicy, 'byDirective'> {
  const own = policy.byDirective[directive] ?? {}
  const { byDirective: _ignored, ...base } = policy
  return { ...base, ...own }
}

/**
 * Whether `usage` exceeds a budget of `directive`, and what to do about it the
 * `degradeStep`-th time (0: first). null when every budget holds or none is set.
 */
export function checkGovernance(
  policy: GovernancePolicy,
  directive: string,
  usage: Record<GovernedKey, number>,
  degradeStep: number,
): GovernanceVerdict | null {
  const budgets = governanceFor(policy, directive)
  const exceededKeys = (['tokens', 'wallTimeMs', 'retries'] as const).filter((key) => budgets[key] !== null && usage[key] >= budgets[key]!)
  if (exceededKeys.length === 0) return null
  const steps = budgets.degradePolicy
  const action = steps.length === 0 ? budgets.onExceeded : steps[Math.min(degradeStep, steps.length - 1)]!
  return { exceededKeys, action, reasonCode: 'budget_exceeded', degradeStep }
}
