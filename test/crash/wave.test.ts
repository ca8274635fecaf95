/**
 * Recovery matrix row "process crash during a child wave": a lead thread runs a wave of children
 * (spawn_thread, wait_threads) in a real child process killed with SIGKILL at random moments.
 * After each kill a new process recovers parent and children; at the end every thread has settled
 * once, no child was spawned twice, no effect ran twice, and every transcript replays.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { verifyReplay } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const KILLS = Number(process.env.SPINDLE_WAVE_KILLS ?? 8)
const CHILDREN = 5
// Enough work that every kill lands while the wave is still running: each run lives at most about
// 0.5 s, and a child turn takes at least 10 ms of model latency, so the children's turns alone
// outlast every run together however fast the runtime gets.
const TURNS = 10 + 25 * KILLS

function runWorker(dir: string, killAfterMs: number | null): Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/crash/waveWorker.js'), dir, String(CHILDREN), String(TURNS)], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (d) => (stderr += d))
    const timer = killAfterMs === null ? null : setTimeout(() => child.kill('SIGKILL'), killAfterMs)
    child.on('exit', (code, signal) => {
      if (timer) clearTimeout(timer)
      resolve({ code, signal, stderr })
    })
  })
}

describe('crash recovery during a child wave', () => {
  it(`should recover parent and children across ${KILLS} kills, spawning each child once`, async () => {
    const dir = tempDir('spindle-wave')
    let killed = 0
    while (killed < KILLS) {
      const result = await runWorker(dir, 120 + Math.floor(Math.random() * 400))
      if (result.signal !== 'SIGKILL') {
        expect(result.code, result.stderr).toBe(0)
        break
      }
      killed++
    }
    expect(killed, 'the wave finished before every kill landed').toBe(KILLS)
    const final = await runWorker(dir, null)
    expect(final.code, final.stderr).toBe(0)

    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' })
    const rows = registry.list()
    registry.close()
    const leads = rows.filter((r) => r.parentId === null)
    expect(leads).toHaveLength(1)
    const lead = leads[0]!
    const children = rows.filter((r) => r.parentId === lead.id)
    // spawn_thread re-run after a kill found the child its key had made: one child per part.
    expect(children.map((c) => c.directiveName).sort()).toEqual(Array.from({ length: CHILDREN }, (_, i) => `part${i}`))
    expect(rows).toHaveLength(CHILDREN + 1)
    for (const row of rows) {
      expect(row.status, row.id).toBe('completed')
      expect(verifyReplay(dir, row.id).matches, `replay of ${row.id}`).toBe(true)
    }
    expect(lead.result).toBe(`wave finished: ${CHILDREN} completed`)

    // The ledger agrees with the transcripts: every child released, and the tree's spend is the
    // sum of what each thread recorded, however many kills came between a reply and its entry.
    const ledger = openSqliteLedger({ path: path.join(dir, 'ledger.db'), durability: 'fsync' })
    expect(ledger.check()).toEqual([])
    const root = ledger.get(lead.id)!
    const accounts = ledger.children(lead.id)
    expect(accounts.map((a) => a.threadId).sort()).toEqual(children.map((c) => c.id).sort())
    for (const account of accounts) {
      expect(account.released, account.threadId).toBe(true)
      expect(account.ownSpent.spend).toBeCloseTo(children.find((c) => c.id === account.threadId)!.cost!.spend, 9)
    }
    const total = rows.reduce((sum, r) => sum + (r.cost?.spend ?? 0), 0)
    expect(root.spent.spend).toBeCloseTo(total, 9)
    expect(root.reserved.spend).toBe(0)
    ledger.close()
    const charges = fs.readFileSync(path.join(dir, 'charges.log'), 'utf8').trim().split('\n').map((l) => l.split(' ')[0]!)
    expect(new Set(charges).size).toBe(charges.length)
  }, 300_000)
})
