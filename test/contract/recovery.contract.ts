/**
 * The contract every RecoveryStore backend keeps. Not collected directly (vitest.config.ts
 * excludes test/contract): each backend's spec file calls `recoveryContract`.
 * Known deviations: none. Left open on purpose: the order of pending decisions with the same
 * cooldown (SQLite's sort states none).
 */
import { describe, expect, it } from 'vitest'
import type { RecoveryRecord, RecoveryStore } from '../../persistence/types.js'

export interface RecoveryBackend {
  recovery: RecoveryStore
  destroy?: () => void
}

const TASK = 'nightly-report'
const OTHER_TASK = 'weekly-digest'

/** A retry decision waiting for its cooldown, for `taskKey` and `reasonCode`. */
function decision(taskKey: string, reasonCode: string, extra: Partial<RecoveryRecord> = {}): RecoveryRecord {
  return {
    taskKey,
    reasonCode,
    handler: 'retry-with-backoff',
    attempt: 1,
    action: 'retry',
    recoveryState: 'recovering',
    cooldownUntil: 10_000,
    failedThreadId: 'failed-aaaaaaaaaaaa',
    nextThreadId: null,
    updatedAt: 5_000,
    ...extra,
  }
}

function keys(records: RecoveryRecord[]): string[] {
  return records.map((record) => `${record.taskKey}/${record.reasonCode}`)
}

export function recoveryContract(name: string, create: () => RecoveryBackend): void {
  describe(`RecoveryStore contract: ${name}`, () => {
    const withRecovery = (fn: (recovery: RecoveryStore) => void) => () => {
      const backend = create()
      try {
        fn(backend.recovery)
      } finally {
        backend.recovery.close()
        backend.destroy?.()
      }
    }

    describe('decisions', () => {
      it('should return null for a task and reason code without a decision', withRecovery((r) => {
        expect(r.get(TASK, 'MODEL_FAILED')).toBeNull()
      }))

      it('should return every field of a stored decision', withRecovery((r) => {
        const stored = decision(TASK, 'MODEL_FAILED', { action: 'escalate', recoveryState: 'escalated_to_human', attempt: 3, nextThreadId: 'next-aaaaaaaaaaaa' })
        r.put(stored)
        expect(r.get(TASK, 'MODEL_FAILED')).toEqual(stored)
      }))

      it('should replace every field of the decision for the same task and reason code', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED', { nextThreadId: 'next-aaaaaaaaaaaa' }))
        const later = decision(TASK, 'MODEL_FAILED', {
          handler: 'ask-a-person',
          attempt: 2,
          action: 'human',
          recoveryState: 'escalated_to_human',
          cooldownUntil: 20_000,
          failedThreadId: 'next-aaaaaaaaaaaa',
          nextThreadId: null,
          updatedAt: 15_000,
        })
        r.put(later)
        expect(r.get(TASK, 'MODEL_FAILED')).toEqual(later)
      }))

      it('should keep one decision per task and reason code', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED', { attempt: 1 }))
        r.put(decision(TASK, 'TOOL_FAILED', { attempt: 2 }))
        r.put(decision(OTHER_TASK, 'MODEL_FAILED', { attempt: 3 }))
        expect(r.get(TASK, 'MODEL_FAILED')?.attempt).toBe(1)
        expect(r.get(TASK, 'TOOL_FAILED')?.attempt).toBe(2)
        expect(r.get(OTHER_TASK, 'MODEL_FAILED')?.attempt).toBe(3)
        expect(r.get(OTHER_TASK, 'TOOL_FAILED')).toBeNull()
      }))

      it("should hand out copies, and keep none of the caller's objects", withRecovery((r) => {
        const given = decision(TASK, 'MODEL_FAILED')
        r.put(given)
        given.attempt = 99
        r.get(TASK, 'MODEL_FAILED')!.attempt = 98
        r.pending()[0]!.attempt = 97
        expect(r.get(TASK, 'MODEL_FAILED')).toEqual(decision(TASK, 'MODEL_FAILED'))
      }))

      it('should refuse an action other than retry, escalate or human with RECOVERY_FAILED, storing nothing', withRecovery((r) => {
        const bad = { ...decision(TASK, 'MODEL_FAILED'), action: 'ignore' } as unknown as RecoveryRecord
        expect(() => r.put(bad)).toThrow(expect.objectContaining({ code: 'RECOVERY_FAILED' }))
        expect(r.get(TASK, 'MODEL_FAILED')).toBeNull()
      }))
    })

    describe('pending', () => {
      it('should list the decisions whose next thread has not been started, soonest cooldown first', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED', { cooldownUntil: 30_000 }))
        r.put(decision(TASK, 'TOOL_FAILED', { cooldownUntil: 10_000, action: 'escalate' }))
        r.put(decision(OTHER_TASK, 'MODEL_FAILED', { cooldownUntil: 20_000 }))
        r.put(decision(OTHER_TASK, 'TOOL_FAILED', { cooldownUntil: 0, nextThreadId: 'next-aaaaaaaaaaaa' }))
        expect(r.pending()).toEqual([r.get(TASK, 'TOOL_FAILED'), r.get(OTHER_TASK, 'MODEL_FAILED'), r.get(TASK, 'MODEL_FAILED')])
      }))

      it('should leave out a decision handed to a person: no thread is started for it', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED', { action: 'human', recoveryState: 'escalated_to_human' }))
        r.put(decision(TASK, 'TOOL_FAILED', { action: 'escalate', recoveryState: 'escalated_to_human' }))
        expect(keys(r.pending())).toEqual([`${TASK}/TOOL_FAILED`])
      }))

      it('should drop a decision once its next thread is recorded, and list it again when a new one waits', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED'))
        r.put(decision(TASK, 'MODEL_FAILED', { nextThreadId: 'next-aaaaaaaaaaaa', updatedAt: 11_000 }))
        expect(r.pending()).toEqual([])
        r.put(decision(TASK, 'MODEL_FAILED', { attempt: 2, failedThreadId: 'next-aaaaaaaaaaaa', cooldownUntil: 40_000 }))
        expect(r.pending()).toEqual([r.get(TASK, 'MODEL_FAILED')])
      }))

      it('should list every waiting decision with the same cooldown', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED'))
        r.put(decision(OTHER_TASK, 'MODEL_FAILED'))
        expect(keys(r.pending()).sort()).toEqual([`${TASK}/MODEL_FAILED`, `${OTHER_TASK}/MODEL_FAILED`].sort())
      }))
    })

    describe('degrade steps', () => {
      it('should be 0 for a task governance never acted on', withRecovery((r) => {
        expect(r.degradeStep(TASK)).toBe(0)
      }))

      it('should count every action on a task, returning the new step, and each task apart', withRecovery((r) => {
        expect(r.bumpDegradeStep(TASK, 1_000)).toBe(1)
        expect(r.bumpDegradeStep(TASK, 2_000)).toBe(2)
        expect(r.bumpDegradeStep(OTHER_TASK, 3_000)).toBe(1)
        expect([r.degradeStep(TASK), r.degradeStep(OTHER_TASK)]).toEqual([2, 1])
      }))

      it('should keep degrade steps apart from decisions', withRecovery((r) => {
        r.put(decision(TASK, 'MODEL_FAILED', { attempt: 4 }))
        r.bumpDegradeStep(TASK, 1_000)
        expect(r.get(TASK, 'MODEL_FAILED')?.attempt).toBe(4)
        expect(r.degradeStep(TASK)).toBe(1)
      }))
    })

    describe('close', () => {
      it('should allow close to be called twice', () => {
        const backend = create()
        try {
          backend.recovery.close()
          expect(() => backend.recovery.close()).not.toThrow()
        } finally {
          backend.destroy?.()
        }
      })

      it('should refuse to be used once closed', () => {
        const backend = create()
        try {
          backend.recovery.put(decision(TASK, 'MODEL_FAILED'))
          backend.recovery.close()
          expect(() => backend.recovery.get(TASK, 'MODEL_FAILED')).toThrow()
          expect(() => backend.recovery.bumpDegradeStep(TASK, 1)).toThrow()
        } finally {
          backend.destroy?.()
        }
      })
    })

    describe('decisions and degradeSteps (a copy to another backend)', () => {
      it('should list every decision stored, pending or not, each as last put', () => {
        const backend = create()
        try {
          const { recovery } = backend
          recovery.put(decision(TASK, 'MODEL_FAILED'))
          recovery.put(decision(TASK, 'TOOL_FAILED', { action: 'human', recoveryState: 'escalated_to_human' }))
          recovery.put(decision(OTHER_TASK, 'MODEL_FAILED', { nextThreadId: 'next-aaaaaaaaaaaa' }))
          recovery.put(decision(TASK, 'MODEL_FAILED', { attempt: 2 }))
          const listed = recovery.decisions().sort((a, b) => keys([a])[0]!.localeCompare(keys([b])[0]!))
          expect(listed).toEqual([
            decision(TASK, 'MODEL_FAILED', { attempt: 2 }),
            decision(TASK, 'TOOL_FAILED', { action: 'human', recoveryState: 'escalated_to_human' }),
            decision(OTHER_TASK, 'MODEL_FAILED', { nextThreadId: 'next-aaaaaaaaaaaa' }),
          ])
        } finally {
          backend.recovery.close()
          backend.destroy?.()
        }
      })

      it('should list every task\'s degrade step with when it was last counted', () => {
        const backend = create()
        try {
          const { recovery } = backend
          expect(recovery.degradeSteps()).toEqual([])
          recovery.bumpDegradeStep(TASK, 10)
          recovery.bumpDegradeStep(OTHER_TASK, 11)
          recovery.bumpDegradeStep(TASK, 12)
          expect(recovery.degradeSteps().sort((a, b) => a.taskKey.localeCompare(b.taskKey))).toEqual([
            { taskKey: TASK, step: 2, updatedAt: 12 },
            { taskKey: OTHER_TASK, step: 1, updatedAt: 11 },
          ])
        } finally {
          backend.recovery.close()
          backend.destroy?.()
        }
      })
    })
  })
}
