/**
 * The recovery store on PostgreSQL: the contract suite, then two processes counting governance
 * steps of one task at once, and decisions outliving the connection that wrote them. The
 * processes run the compiled store: `npx tsc -p tsconfig.json` first.
 */
import { execFile } from 'node:child_process'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { openPgRecovery } from '../../persistence/postgres/pgRecovery.js'
import type { RecoveryRecord } from '../../persistence/types.js'
import { recoveryContract } from '../contract/recovery.contract.js'
import { freshDatabase, testDatabaseUrl } from '../helpers/postgres.js'

recoveryContract('postgres', () => {
  const d = freshDatabase()
  return { recovery: openPgRecovery({ db: d.db }), destroy: d.destroy }
})

const root = path.resolve(import.meta.dirname, '../..')

/** Bumps the task's degrade step `times` times from a process of its own, starting at `at`; resolves with the steps it was given. */
function bumpInProcess(schema: string, times: number, at: number): Promise<number[]> {
  const script = `
    import { PgBridge } from '${pathToFileURL(path.join(root, 'dist/persistence/postgres/bridge.js')).href}'
    import { openPgRecovery } from '${pathToFileURL(path.join(root, 'dist/persistence/postgres/pgRecovery.js')).href}'
    const db = new PgBridge({ url: process.env.URL, schema: process.env.SCHEMA })
    const recovery = openPgRecovery({ db })
    while (Date.now() < ${at}) {}
    const steps = []
    for (let i = 0; i < ${times}; i++) steps.push(recovery.bumpDegradeStep('nightly-report', Date.now()))
    process.stdout.write(JSON.stringify(steps))
    db.close()`
  return new Promise((resolve, reject) =>
    execFile(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, URL: testDatabaseUrl(), SCHEMA: schema } }, (error, stdout, stderr) =>
      error ? reject(new Error(stderr || String(error))) : resolve(JSON.parse(stdout) as number[]),
    ),
  )
}

describe('openPgRecovery', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup()
  })

  it('should count every degrade step of two processes bumping the same task at once, each step handed out once', async () => {
    const d = freshDatabase()
    cleanups.push(d.destroy)
    const at = Date.now() + 1_500
    const steps = (await Promise.all([bumpInProcess(d.schema, 100, at), bumpInProcess(d.schema, 100, at)])).flat()
    expect(steps.sort((a, b) => a - b)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1))
    expect(openPgRecovery({ db: d.db }).degradeStep('nightly-report')).toBe(200)
  })

  it('should keep decisions and degrade steps across closing the connection and opening another', () => {
    const d = freshDatabase()
    const decision: RecoveryRecord = {
      taskKey: 'nightly-report',
      reasonCode: 'MODEL_FAILED',
      handler: 'retry-with-backoff',
      attempt: 2,
      action: 'retry',
      recoveryState: 'recovering',
      cooldownUntil: 1_700_000_000_000,
      failedThreadId: 'failed-aaaaaaaaaaaa',
      nextThreadId: null,
      updatedAt: 1_699_999_999_000,
    }
    const first = openPgRecovery({ db: d.db })
    first.put(decision)
    first.bumpDegradeStep('nightly-report', 1)
    first.close()
    d.db.close()
    const db = new PgBridge({ url: d.url, schema: d.schema })
    cleanups.push(() => {
      db.execSync(`DROP SCHEMA IF EXISTS "${d.schema}" CASCADE`)
      db.close()
    })
    const again = openPgRecovery({ db })
    expect(again.get('nightly-report', 'MODEL_FAILED')).toEqual(decision)
    expect(again.pending()).toEqual([decision])
    expect(again.degradeStep('nightly-report')).toBe(1)
  })
})
