/**
 * The budget ledger (ledger.db): each scenario sets up a tree of accounts, does one thing to it
 * (or plants damage), and checks the balances that must hold after. Real SQLite files.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import type { Ledger } from '../../persistence/types.js'
import { ledgerContract } from '../contract/ledger.contract.js'
import { compiled, tempDir } from '../helpers/dirs.js'

ledgerContract('sqlite :memory:', () => ({ ledger: openSqliteLedger({ path: ':memory:', durability: 'fsync' }) }))
ledgerContract('sqlite file', () => {
  const dir = tempDir('spindle-ledger')
  return {
    ledger: openSqliteLedger({ path: path.join(dir, 'ledger.db'), durability: 'fsync' }),
    destroy: () => fs.rmSync(dir, { recursive: true, force: true }),
  }
})

function withLedger(run: (ledger: Ledger, file: string) => void | Promise<void>) {
  return async () => {
    const file = path.join(tempDir('spindle-ledger'), 'ledger.db')
    const ledger = openSqliteLedger({ path: file, durability: 'process' })
    try {
      await run(ledger, file)
    } finally {
      ledger.close()
    }
  }
}

describe('budget ledger', () => {
  it("should cascade a grandchild's usage to every ancestor and keep what each may still reserve", withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
    l.reserve('child', 'root', { spend: 0.5, tokens: 400 }, 2)
    l.reserve('grandchild', 'child', { spend: 0.2, tokens: null }, 3)
    l.record('grandchild', { spend: 0.05, tokens: 30 }, 4)
    l.record('child', { spend: 0.1, tokens: 20 }, 5)
    expect(l.get('grandchild')).toMatchObject({ limit: { spend: 0.2, tokens: 400 }, spent: { spend: 0.05, tokens: 30 } })
    const child = l.get('child')!
    expect(child.spent.spend).toBeCloseTo(0.15, 12)
    expect(child.ownSpent).toEqual({ spend: 0.1, tokens: 20 })
    // The grandchild still holds 0.15 of its 0.2, and 370 of its 400 tokens (it asked for "whatever
    // is left"), so the child's own 20 tokens went beyond what it had: it suspends before its next call.
    expect(child.reserved.spend).toBeCloseTo(0.15, 12)
    expect(child.available.spend).toBeCloseTo(0.5 - 0.15 - 0.15, 12)
    expect(child.available.tokens).toBe(400 - 50 - 370)
    const root = l.get('root')!
    expect(root.spent.spend).toBeCloseTo(0.15, 12)
    expect(root.available.spend).toBeCloseTo(1 - 0.15 - 0.35, 12)
    expect(l.check()).toEqual([])
  }))

  it('should refuse a reservation the parent cannot cover, say how much is left, and write nothing', withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: null }, 1)
    l.reserve('a', 'root', { spend: 0.7, tokens: null }, 2)
    l.record('root', { spend: 0.1, tokens: 5 }, 3)
    expect(() => l.reserve('b', 'root', { spend: 0.3, tokens: null }, 4)).toThrow(
      expect.objectContaining({ code: 'BUDGET_EXCEEDED', details: expect.objectContaining({ parentId: 'root', amount: 'spend', requested: 0.3 }) }),
    )
    expect(() => l.reserve('b', 'root', { spend: 0.3, tokens: null }, 4)).toThrow(/has \$0\.2 of its \$1 spend budget left/)
    expect(l.get('b')).toBeNull()
    expect(l.reserve('b', 'root', { spend: 0.2, tokens: null }, 5).limit.spend).toBeCloseTo(0.2, 12)
    // Nothing is left: even "whatever is left" is refused.
    expect(() => l.reserve('c', 'root', { spend: null, tokens: null }, 6)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
  }))

  it("should return a released child's unspent reservation to its parent, once", withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: null }, 1)
    l.reserve('a', 'root', { spend: 0.6, tokens: null }, 2)
    l.record('a', { spend: 0.25, tokens: 0 }, 3)
    expect(l.get('root')!.available.spend).toBeCloseTo(0.4, 12)
    l.release('a', 4)
    l.release('a', 5)
    expect(l.get('root')!.available.spend).toBeCloseTo(0.75, 12)
    // Late usage of a released child still counts.
    l.record('a', { spend: 0.05, tokens: 0 }, 6)
    expect(l.get('root')!.available.spend).toBeCloseTo(0.7, 12)
    expect(l.reserve('a', 'root', { spend: 0.9, tokens: null }, 7).limit.spend).toBe(0.6)
  }))

  it('should keep counting what an open grandchild holds after its parent ended, so the root never grants it twice', withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
    l.reserve('child', 'root', { spend: 0.5, tokens: 500 }, 2)
    l.reserve('grandchild', 'child', { spend: 0.3, tokens: 200 }, 3)
    l.reserve('great', 'grandchild', { spend: 0.1, tokens: 50 }, 4)
    l.record('child', { spend: 0.1, tokens: 100 }, 5)
    // The child ends while its grandchild (and its great-grandchild) run on.
    l.release('child', 6)
    const root = l.get('root')!
    expect(root.reserved.spend).toBeCloseTo(0.3, 12)
    expect(root.reserved.tokens).toBe(200)
    expect(root.available.spend).toBeCloseTo(1 - 0.1 - 0.3, 12)
    expect(() => l.reserve('second', 'root', { spend: 0.7, tokens: null }, 7)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
    // The grandchild ends too; its open child still holds its 0.1 from the root through two ended accounts.
    l.record('grandchild', { spend: 0.05, tokens: 10 }, 8)
    l.release('grandchild', 9)
    expect(l.get('root')!.reserved.spend).toBeCloseTo(0.1, 12)
    expect(l.get('root')!.available.spend).toBeCloseTo(1 - 0.15 - 0.1, 12)
    l.record('great', { spend: 0.04, tokens: 5 }, 10)
    expect(l.get('root')!.available.spend).toBeCloseTo(1 - 0.19 - 0.06, 12)
    // Once the last of them ends, all that was not spent is back.
    l.release('great', 11)
    expect(l.get('root')!.reserved).toEqual({ spend: 0, tokens: 0 })
    expect(l.get('root')!.available.spend).toBeCloseTo(1 - 0.19, 12)
    expect(l.reserve('second', 'root', { spend: 0.8, tokens: null }, 12).limit.spend).toBeCloseTo(0.8, 12)
    expect(l.check()).toEqual([])
  }))

  it('should count at most its unspent limit for an ended child whose children hold more than it has left (it spent after they reserved)', withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: null }, 1)
    l.reserve('child', 'root', { spend: 0.5, tokens: null }, 2)
    l.reserve('grandchild', 'child', { spend: 0.4, tokens: null }, 3)
    l.record('child', { spend: 0.3, tokens: 0 }, 4)
    l.release('child', 5)
    // The child spent 0.3 of its 0.5: its grandchild's 0.4 can only ever draw 0.2 more from the root's view.
    expect(l.get('root')!.reserved.spend).toBeCloseTo(0.2, 12)
  }))

  it("should reserve a child's raise from its parent, and refuse one the parent cannot cover", withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: null }, 1)
    l.reserve('a', 'root', { spend: 0.3, tokens: null }, 2)
    l.record('a', { spend: 0.3, tokens: 0 }, 3)
    expect(() => l.raise('a', { spend: 1.5 }, 4)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
    expect(l.get('a')!.limit.spend).toBe(0.3)
    l.raise('a', { spend: 0.8 }, 5)
    expect(l.get('root')!.available.spend).toBeCloseTo(0.2, 12)
    l.raise('root', { spend: 2 }, 6)
    expect(l.get('root')!.available.spend).toBeCloseTo(1.2, 12)
  }))

  it('should fit ten reservations of $0.10 into $1.00 despite floating point', withLedger((l) => {
    l.openRoot('root', { spend: 1, tokens: null }, 1)
    for (let i = 0; i < 10; i++) l.reserve(`c${i}`, 'root', { spend: 0.1, tokens: null }, 2 + i)
    expect(() => l.reserve('c10', 'root', { spend: 0.01, tokens: null }, 20)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
  }))

  it('should keep balances across a reopen of the file', async () => {
    const file = path.join(tempDir('spindle-ledger'), 'ledger.db')
    const first = openSqliteLedger({ path: file, durability: 'fsync' })
    first.openRoot('root', { spend: 1, tokens: null }, 1)
    first.reserve('a', 'root', { spend: 0.4, tokens: null }, 2)
    first.record('a', { spend: 0.1, tokens: 7 }, 3)
    first.close()
    const again = openSqliteLedger({ path: file, durability: 'fsync' })
    expect(again.get('root')).toMatchObject({ spent: { spend: 0.1, tokens: 7 }, reserved: { spend: 0.30000000000000004 } })
    expect(again.children('root').map((a) => a.threadId)).toEqual(['a'])
    again.close()
  })

  it('should find each kind of planted damage', withLedger((l, file) => {
    l.openRoot('root', { spend: 1, tokens: null }, 1)
    l.reserve('a', 'root', { spend: 0.5, tokens: null }, 2)
    l.record('a', { spend: 0.1, tokens: 1 }, 3)
    const raw = new Database(file)
    raw.prepare(`UPDATE accounts SET spent_spend = 0.9 WHERE thread_id = 'root'`).run()
    raw.prepare(`INSERT INTO accounts (thread_id, parent_id, limit_spend, created_at, updated_at) VALUES ('stray', 'gone', 0.1, 1, 1)`).run()
    raw.close()
    const kinds = l.check().map((p) => `${p.threadId}:${p.kind}`)
    expect(kinds).toEqual(expect.arrayContaining(['root:spent_mismatch', 'stray:orphan_account']))
  }))

  /** `count` processes that each reserve one child of `parent` at once (extra: the worker's optional arguments); what each printed. */
  async function reserveAtOnce(dir: string, file: string, count: number, spend: string, ...extra: string[]): Promise<string[]> {
    const go = path.join(dir, 'go')
    const workers = Array.from({ length: count }, (_, i) =>
      new Promise<string>((resolve, reject) => {
        const child = spawn(process.execPath, [compiled('test/persistence/ledgerWorker.js'), file, 'parent', `child${i}`, spend, go, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] })
        let out = ''
        child.stdout.on('data', (d) => (out += d))
        child.stderr.on('data', (d) => (out += d))
        child.on('exit', (code) => (code === 0 ? resolve(out.trim()) : reject(new Error(out))))
      }),
    )
    await new Promise((r) => setTimeout(r, 500))
    fs.writeFileSync(go, '')
    return Promise.all(workers)
  }

  it('should never let 20 processes reserving at once from one parent oversubscribe it', async () => {
    const dir = tempDir('spindle-ledger-procs')
    const file = path.join(dir, 'ledger.db')
    const setup = openSqliteLedger({ path: file, durability: 'fsync' })
    setup.openRoot('parent', { spend: 1, tokens: null }, 1)
    setup.close()
    const results = await reserveAtOnce(dir, file, 20, '0.08')
    expect(results.filter((r) => r === 'reserved')).toHaveLength(12)
    expect(results.filter((r) => r === 'refused BUDGET_EXCEEDED')).toHaveLength(8)
    const ledger = openSqliteLedger({ path: file, durability: 'fsync' })
    const parent = ledger.get('parent')!
    expect(parent.spent.spend + parent.reserved.spend).toBeLessThanOrEqual(1 + 1e-9)
    expect(ledger.children('parent')).toHaveLength(12)
    expect(ledger.check()).toEqual([])
    ledger.close()
  }, 60_000)

  it('should never let 10 processes spawning at once under one parent take more spawn slots than its limit', async () => {
    const dir = tempDir('spindle-ledger-slots')
    const file = path.join(dir, 'ledger.db')
    const setup = openSqliteLedger({ path: file, durability: 'fsync' })
    setup.openRoot('parent', { spend: 1, tokens: null }, 1)
    setup.close()
    const results = await reserveAtOnce(dir, file, 10, '0.01', '3')
    expect(results.filter((r) => r === 'reserved')).toHaveLength(3)
    expect(results.filter((r) => r === 'refused SPAWN_REFUSED')).toHaveLength(7)
    const ledger = openSqliteLedger({ path: file, durability: 'fsync' })
    expect(ledger.children('parent')).toHaveLength(3)
    expect(ledger.check()).toEqual([])
    ledger.close()
  }, 60_000)
})
