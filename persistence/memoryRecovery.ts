/**
 * In-memory recovery state: the reference implementation of `RecoveryStore`, for a runtime that
 * keeps nothing on disk (memory mode) and as executable documentation of what `openSqliteRecovery`
 * keeps in recovery.db. Nothing survives the process.
 */
import { SpindleError } from '../src/base/errors.js'
import type { RecoveryRecord, RecoveryStore } from './types.js'

const ACTIONS: ReadonlySet<string> = new Set<RecoveryRecord['action']>(['retry', 'escalate', 'human'])

function closedStore(): SpindleError {
  return new SpindleError(
    'RECOVERY_FAILED',
    'The in-memory recovery state was closed, and with it every decision it held: nothing was read or changed. Open the runtime again.',
  )
}

/** One key for the pair; JSON keeps ('a:b', 'c') and ('a', 'b:c') apart. */
function keyOf(taskKey: string, reasonCode: string): string {
  return JSON.stringify([taskKey, reasonCode])
}

/** recovery.db refuses such a row (a CHECK constraint): so does this store, with the same code. */
function badAction(record: RecoveryRecord): SpindleError {
  return new SpindleError(
    'RECOVERY_FAILED',
    `Could not store the decision for task ${record.taskKey} (${record.reasonCode}): its action ${JSON.stringify(record.action)} is not retry, escalate or human. Nothing was stored; this is a bug in the caller.`,
    { details: { taskKey: record.taskKey, reasonCode: record.reasonCode, action: record.action } },
  )
}

/**
 * A `RecoveryStore` in Maps: one decision per task key and reason code (a later `put` replaces
 * it), and one degrade step per task. Records are copied in and out.
 *
 * @example
 * const recovery = createMemoryRecovery()
 * recovery.bumpDegradeStep('nightly-report', Date.now()) // 1
 * recovery.degradeStep('nightly-report') // 1
 * @see openSqliteRecovery for the backend that survives a restart.
 */
export function createMemoryRecovery(): RecoveryStore {
  /** By `keyOf`. A replaced decision keeps its place, as an upserted row keeps its rowid. */
  const decisions = new Map<string, RecoveryRecord>()
  const steps = new Map<string, { step: number; updatedAt: number }>()
  let closed = false

  function open(): void {
    if (closed) throw closedStore()
  }

  return {
    get(taskKey, reasonCode) {
      open()
      const record = decisions.get(keyOf(taskKey, reasonCode))
      return record ? { ...record } : null
    },

    put(record) {
      open()
      if (!ACTIONS.has(record.action)) throw badAction(record)
      decisions.set(keyOf(record.taskKey, record.reasonCode), { ...record })
    },

    pending() {
      open()
      const waiting: RecoveryRecord[] = []
      for (const record of decisions.values()) if (record.nextThreadId === null && record.action !== 'human') waiting.push({ ...record })
      // Soonest cooldown first: the order a restart schedules them in.
      return waiting.sort((a, b) => a.cooldownUntil - b.cooldownUntil)
    },

    degradeStep(taskKey) {
      open()
      return steps.get(taskKey)?.step ?? 0
    },

    bumpDegradeStep(taskKey, at) {
      open()
      const step = (steps.get(taskKey)?.step ?? 0) + 1
      steps.set(taskKey, { step, updatedAt: at })
      return step
    },

    decisions() {
      open()
      return [...decisions.values()].map((record) => ({ ...record }))
    },

    degradeSteps() {
      open()
      return [...steps].map(([taskKey, { step, updatedAt }]) => ({ taskKey, step, updatedAt }))
    },

    close() {
      closed = true
      decisions.clear()
      steps.clear()
    },
  }
}
