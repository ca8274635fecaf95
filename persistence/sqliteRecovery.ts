/**
 * Recovery escalation and budget-governance state on SQLite (`recovery.db`): the last decision
 * per task and reason code, and how often governance degraded each task. Side effects.
 */
import { openSqliteFile, sqliteGuard } from './sqliteFile.js'
import type { SqliteStore } from './sqliteFile.js'
import type { Durability, RecoveryRecord, RecoveryStore } from './types.js'

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE decisions (
     task_key TEXT NOT NULL,
     reason_code TEXT NOT NULL,
     handler TEXT NOT NULL,
     attempt INTEGER NOT NULL,
     action TEXT NOT NULL CHECK (action IN ('retry','escalate','human')),
     recovery_state TEXT NOT NULL,
     cooldown_until INTEGER NOT NULL,
     failed_thread_id TEXT NOT NULL,
     next_thread_id TEXT NULL,
     updated_at INTEGER NOT NULL,
     PRIMARY KEY (task_key, reason_code)
   );
   CREATE TABLE degrade (task_key TEXT PRIMARY KEY, step INTEGER NOT NULL, updated_at INTEGER NOT NULL);`,
]

interface Row {
  task_key: string
  reason_code: string
  handler: string
  attempt: number
  action: RecoveryRecord['action']
  recovery_state: RecoveryRecord['recoveryState']
  cooldown_until: number
  failed_thread_id: string
  next_thread_id: string | null
  updated_at: number
}

function toRecord(row: Row): RecoveryRecord {
  return {
    taskKey: row.task_key,
    reasonCode: row.reason_code,
    handler: row.handler,
    attempt: row.attempt,
    action: row.action,
    recoveryState: row.recovery_state,
    cooldownUntil: row.cooldown_until,
    failedThreadId: row.failed_thread_id,
    nextThreadId: row.next_thread_id,
    updatedAt: row.updated_at,
  }
}

export function openSqliteRecovery(options: { path: string; durability: Durability }): RecoveryStore {
  const store: SqliteStore = { code: 'RECOVERY_FAILED', what: 'the recovery state', file: options.path }
  const db = openSqliteFile(store, { synchronous: options.durability === 'fsync' ? 'FULL' : 'NORMAL', migrations: MIGRATIONS })
  const get = db.prepare<[string, string], Row>('SELECT * FROM decisions WHERE task_key = ? AND reason_code = ?')
  const put = db.prepare(
    `INSERT INTO decisions VALUES (@taskKey, @reasonCode, @handler, @attempt, @action, @recoveryState, @cooldownUntil, @failedThreadId, @nextThreadId, @updatedAt)
     ON CONFLICT(task_key, reason_code) DO UPDATE SET handler = excluded.handler, attempt = excluded.attempt, action = excluded.action,
       recovery_state = excluded.recovery_state, cooldown_until = excluded.cooldown_until, failed_thread_id = excluded.failed_thread_id,
       next_thread_id = excluded.next_thread_id, updated_at = excluded.updated_at`,
  )
  const pending = db.prepare<[], Row>(`SELECT * FROM decisions WHERE next_thread_id IS NULL AND action != 'human' ORDER BY cooldown_until`)
  const step = db.prepare<[string], { step: number }>('SELECT step FROM degrade WHERE task_key = ?')
  const bump = db.prepare<[string, number]>(
    'INSERT INTO degrade (task_key, step, updated_at) VALUES (?, 1, ?) ON CONFLICT(task_key) DO UPDATE SET step = step + 1, updated_at = excluded.updated_at',
  )
  const all = db.prepare<[], Row>('SELECT * FROM decisions ORDER BY rowid')
  const steps = db.prepare<[], { taskKey: string; step: number; updatedAt: number }>('SELECT task_key AS taskKey, step, updated_at AS updatedAt FROM degrade ORDER BY rowid')
  const guard = sqliteGuard(store)
  return {
    get: (taskKey, reasonCode) => guard('read a decision', () => {
      const row = get.get(taskKey, reasonCode)
      return row ? toRecord(row) : null
    }),
    put: (record) => {
      guard('store a decision', () => put.run(record))
    },
    pending: () => guard('list pending decisions', () => pending.all().map(toRecord)),
    degradeStep: (taskKey) => guard('read a degrade step', () => step.get(taskKey)?.step ?? 0),
    bumpDegradeStep: (taskKey, at) =>
      guard('count a degrade step', () =>
        db.transaction(() => {
          bump.run(taskKey, at)
          return step.get(taskKey)!.step
        }).immediate(),
      ),
    decisions: () => guard('list every decision', () => all.all().map(toRecord)),
    degradeSteps: () => guard('list the degrade steps', () => steps.all()),
    close: () => db.close(),
  }
}
