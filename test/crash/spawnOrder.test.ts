/**
 * Recovery matrix row "a runtime opens the directory while another process spawns": the opener
 * drops every budget reservation that has neither a registry row nor a live lease (a spawn killed
 * before it returned). So a spawn in progress must never hold a reservation without its lease,
 * not even between two SQLite transactions. The test stops the spawning process between them by
 * holding leases.db's write lock, and looks at what an opener would see.
 */
import { spawn } from 'node:child_process'
import path from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it, onTestFinished } from 'vitest'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

async function until(check: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) return false
    await new Promise((r) => setTimeout(r, 10))
  }
  return true
}

describe('a spawn seen by a runtime opening the directory', () => {
  it('should never hold a budget reservation that has no lease, so an opener cannot drop it; the spawn then completes', async () => {
    const dir = tempDir('spindle-spawn-order')
    const child = spawn(process.execPath, [compiled('test/crash/spawnOrderWorker.js'), dir], { stdio: ['pipe', 'pipe', 'pipe'] })
    onTestFinished(() => {
      child.kill('SIGKILL')
    })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (out += d))
    expect(await until(() => out.includes('ready'), 20_000), out).toBe(true)

    const ledger = new Database(path.join(dir, 'ledger.db'), { readonly: true })
    const leases = new Database(path.join(dir, 'leases.db'))
    const kids = () => ledger.prepare("SELECT thread_id FROM accounts WHERE thread_id LIKE 'kid-%'").all() as { thread_id: string }[]
    const leased = (id: string) => leases.prepare('SELECT 1 FROM leases WHERE thread_id = ?').get(id) !== undefined
    // The spawning process now waits (SQLite's busy timeout) at its next write to leases.db.
    leases.exec('BEGIN IMMEDIATE')
    let unleased: string[] = []
    try {
      child.stdin.write('go\n')
      // Had it reserved first, the kid's account would appear now, with no lease and no row.
      await until(() => kids().length > 0, 1_500)
      unleased = kids().map((k) => k.thread_id).filter((id) => !leased(id))
    } finally {
      leases.exec('ROLLBACK')
      leases.close()
      ledger.close()
    }
    expect(unleased, 'a reservation without a lease: an opener would drop it').toEqual([])

    expect(await until(() => out.includes('"status"') || out.includes('"error"'), 20_000), out).toBe(true)
    expect(JSON.parse(out.split('\n').find((l) => l.startsWith('{'))!)).toMatchObject({ status: 'completed' })
    await new Promise((resolve) => child.on('exit', resolve))

    // A runtime opening the directory afterwards finds the kid's account released, nothing dropped.
    const rt = await createRuntime({ dir, model: scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: { text: 'never' } })) })
    try {
      const kid = rt.list().find((r) => r.directiveName === 'kid')!
      expect(kid.status).toBe('completed')
    } finally {
      await rt.close()
    }
  }, 60_000)
})
