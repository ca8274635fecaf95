/**
 * Recovery escalation and budget-governance state on PostgreSQL: the last decision per task and
 * reason code, and how often governance degraded each task. Side effects. The port of
 * sqliteRecovery.ts. Every call is one statement, so one transaction: a degrade step counted by two
 * processes at once is counted twice (the upsert locks the row and adds to what it finds).
 */
import { SpindleError } from '../../src/base/errors.js'
import type { RecoveryRecord, RecoveryStore } from '../types.js'
import type { PgBridge, Row } from './bridge.js'
import { pgGuard, type PgStore } from './pgStoreGuard.js'

const COLUMNS = 'task_key, reason_code, handler, attempt, action, recovery_state, cooldown_until, failed_thread_id, next_thread_id, updated_at'

function toRecord(row: Row): RecoveryRecord {
  return {
    taskKey: row.task_key as string,
    reasonCode: row.reason_code as string,
    handler: row.handler as string,
    attempt: row.attempt as number,
    action: row.action as RecoveryRecord['action'],
    recoveryState: row.recovery_state as RecoveryRecord['recoveryState'],
    cooldownUntil: row.cooldown_until as number,
    failedThreadId: row.failed_thread_id as string,
    nextThreadId: row.next_thread_id as string | null,
    updatedAt: row.updated_at as number,
  }
}

/**
 * Opens the recovery store on the bridge's schema (migrated already: see schema.ts).
 *
 * @param options.db - The connection. The store does not own it: `close` leaves it open.
 * @throws SpindleError `RECOVERY_FAILED` (details.schema, details.pgCode) when the database refuses
 *   a statement (an action that is none of retry, escalate, human); DATABASE_UNAVAILABLE (from the
 *   bridge) when it cannot be reached.
 *
 * @example
 * const recovery = openPgRecovery({ db })
 * recovery.bumpDegradeStep('nightly-report', Date.now()) // 1
 */
export function openPgRecovery(options: { db: PgBridge }): RecoveryStore {
  const { db } = options
  const store: PgStore = { code: 'RECOVERY_FAILED', what: 'the recovery state', db }
  const guard = pgGuard(store)
  let open = true
  const run = <T>(action: string, fn: () => T): T => {
    if (!open) throw new SpindleError('RECOVERY_FAILED', `The recovery state on schema ${db.schema ?? 'public'} is closed: open a new one.`, { details: { schema: db.schema ?? 'public' } })
    return guard(action, fn)
  }
  return {
    get: (taskKey, reasonCode) =>
      run('read a decision', () => {
        const row = db.querySync(`SELECT ${COLUMNS} FROM recovery_decisions WHERE task_key = $1 AND reason_code = $2`, [taskKey, reasonCode])[0]
        return row ? toRecord(row) : null
      }),
    put: (r) => {
      run('store a decision', () =>
        db.changeSync(
          `INSERT INTO recovery_decisions (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
           ON CONFLICT (task_key, reason_code) DO UPDATE SET handler = excluded.handler, attempt = excluded.attempt, action = excluded.action,
             recovery_state = excluded.recovery_state, cooldown_until = excluded.cooldown_until, failed_thread_id = excluded.failed_thread_id,
             next_thread_id = excluded.next_thread_id, updated_at = excluded.updated_at`,
          [r.taskKey, r.reasonCode, r.handler, r.attempt, r.action, r.recoveryState, r.cooldownUntil, r.failedThreadId, r.nextThreadId, r.updatedAt],
        ),
      )
    },
    pending: () =>
      run('list pending decisions', () =>
        db.querySync(`SELECT ${COLUMNS} FROM recovery_decisions WHERE next_thread_id IS NULL AND action <> 'human' ORDER BY cooldown_until, task_key, reason_code`).map(toRecord),
      ),
    degradeStep: (taskKey) => run('read a degrade step', () => (db.querySync('SELECT step FROM recovery_degrade WHERE task_key = $1', [taskKey])[0]?.step as number | undefined) ?? 0),
    bumpDegradeStep: (taskKey, at) =>
      run('count a degrade step', () =>
        db.querySync(
          `INSERT INTO recovery_degrade (task_key, step, updated_at) VALUES ($1, 1, $2)
           ON CONFLICT (task_key) DO UPDATE SET step = recovery_degrade.step + 1, updated_at = excluded.updated_at RETURNING step`,
          [taskKey, at],
        )[0]!.step as number,
      ),
    decisions: () => run('list every decision', () => db.querySync(`SELECT ${COLUMNS} FROM recovery_decisions ORDER BY task_key, reason_code`).map(toRecord)),
    degradeSteps: () =>
      run('list the degrade steps', () =>
        db.querySync('SELECT task_key, step, updated_at FROM recovery_degrade ORDER BY task_key').map((row) => ({ taskKey: row.task_key as string, step: row.step as number, updatedAt: row.updated_at as number })),
      ),
    close: () => {
      open = false
    },
  }
}
