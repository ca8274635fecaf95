/**
 * Recovery escalation and budget governance decisions (design 003 §6–7), pure.
 */
import { describe, expect, it } from 'vitest'
import { ConfigLayerSchema } from '../../config/schema.js'
import { mergeConfig, systemDefaults } from '../../config/load.js'
import { checkGovernance } from '../../src/policies/governance.js'
import { decideRecovery, describeRecovery } from '../../src/policies/recovery.js'
import type { RecoveryState } from '../../src/policies/recovery.js'

const policy = mergeConfig(systemDefaults(), { recovery: { enabled: true, maxAttempts: 2, cooldownSeconds: 30, chain: ['debugger', 'human'] } }).recovery

describe('recovery escalation', () => {
  it('should retry the own directive, then hand the task to each handler in turn, then to a person', () => {
    let state: RecoveryState | null = null
    const seen: string[] = []
    let now = 0
    for (let failure = 0; failure < 5; failure++) {
      const { decision, next } = decideRecovery(policy, state, { taskKey: 't', reasonCode: 'model_permanent', directive: 'coder', now })
      seen.push(`${decision.action}:${decision.handler}#${decision.attempt}`)
      state = next
      now += 31_000
    }
    expect(seen).toEqual(['retry:coder#2', 'escalate:debugger#1', 'retry:debugger#2', 'human:human#1', 'human:human#2'])
    expect(state!.recoveryState).toBe('escalated_to_human')
  })

  it('should reuse the last decision within its cooldown and count no attempt', () => {
    const first = decideRecovery(policy, null, { taskKey: 't', reasonCode: 'x', directive: 'coder', now: 0 })
    const again = decideRecovery(policy, first.next, { taskKey: 't', reasonCode: 'x', directive: 'coder', now: 10_000 })
    expect(again.decision).toMatchObject({ action: 'retry', attempt: 2, cooldownActive: true, cooldownUntil: 30_000 })
    expect(again.next).toBe(first.next)
    expect(describeRecovery(again.decision)).toContain('reused, no attempt counted')
  })

  it('should apply the overrides of a reason code', () => {
    const strict = mergeConfig(systemDefaults(), { recovery: { enabled: true, byReason: { SUPERVISION_GAVE_UP: { maxAttempts: 1, chain: ['human'] } } } }).recovery
    expect(decideRecovery(strict, null, { taskKey: 't', reasonCode: 'SUPERVISION_GAVE_UP', directive: 'coder', now: 0 }).decision.action).toBe('human')
    expect(decideRecovery(strict, null, { taskKey: 't', reasonCode: 'model_permanent', directive: 'coder', now: 0 }).decision.action).toBe('retry')
  })

  it('should refuse a chain that does not end with a person, naming the field', () => {
    const parsed = ConfigLayerSchema.safeParse({ recovery: { chain: ['debugger'] } })
    expect(parsed.success).toBe(false)
    expect(parsed.error!.issues[0]).toMatchObject({ path: ['recovery', 'chain'], message: "must end with 'human'" })
    expect(ConfigLayerSchema.safeParse({ recovery: { cooldownSeconds: -1 } }).success).toBe(false)
  })
})

describe('budget governance', () => {
  const governance = mergeConfig(systemDefaults(), {
    governance: { tokens: 1000, wallTimeMs: 60_000, retries: 3, byDirective: { cheap: { tokens: 100 } } },
  }).governance

  it('should name every exceeded budget and step through the degrade policy, then repeat its last action', () => {
    const usage = { tokens: 1200, wallTimeMs: 1000, retries: 3 }
    expect(checkGovernance(governance, 'x', { tokens: 10, wallTimeMs: 10, retries: 0 }, 0)).toBeNull()
    expect(checkGovernance(governance, 'x', usage, 0)).toEqual({ exceededKeys: ['tokens', 'retries'], action: 'reduced_context', reasonCode: 'budget_exceeded', degradeStep: 0 })
    expect(checkGovernance(governance, 'x', usage, 1)!.action).toBe('manual_handoff')
    expect(checkGovernance(governance, 'x', usage, 2)!.action).toBe('stop_run')
    expect(checkGovernance(governance, 'x', usage, 7)!.action).toBe('stop_run')
  })

  it('should apply a directive override, and onExceeded when the degrade policy is empty', () => {
    expect(checkGovernance(governance, 'cheap', { tokens: 150, wallTimeMs: 0, retries: 0 }, 0)!.exceededKeys).toEqual(['tokens'])
    const plain = { ...governance, degradePolicy: [], onExceeded: 'stop_run' as const }
    expect(checkGovernance(plain, 'x', { tokens: 5000, wallTimeMs: 0, retries: 0 }, 0)!.action).toBe('stop_run')
  })
})
