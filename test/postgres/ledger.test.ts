/**
 * The budget ledger on PostgreSQL: the Ledger contract, then what only processes sharing a database
 * can show — two of them reserving the last of a budget, or the last spawn slot, at once — and
 * accounts outliving a connection. The races run in child processes (sides.ts): compile first
 * (`npx tsc -p tsconfig.json`).
 */
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { openPgLedger } from '../../persistence/postgres/pgLedger.js'
import type { LedgerAccount } from '../../persistence/types.js'
import { ledgerContract } from '../contract/ledger.contract.js'
import { dropSchema, freshDatabase } from '../helpers/postgres.js'
import { race } from './sides.js'

ledgerContract('postgres', () => {
  const d = freshDatabase()
  return { ledger: openPgLedger({ db: d.db }), destroy: d.destroy }
})

const UNLIMITED = { spend: null, tokens: null }

describe('a PostgreSQL ledger shared by processes', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup()
  })
  const open = () => {
    const d = freshDatabase()
    const ledger = openPgLedger({ db: d.db })
    cleanups.push(() => {
      ledger.close()
      d.destroy()
    })
    return { ...d, ledger }
  }

  /** Which of two sides' step results were granted, per step; the other must have been refused with `code`. */
  function oneGranted(first: unknown[], second: unknown[], code: string): Array<'first' | 'second'> {
    return first.map((one, i) => {
      const two = second[i]
      const granted = [one, two].filter((got) => (got as LedgerAccount).threadId !== undefined)
      expect(granted).toHaveLength(1)
      expect([one, two]).toContainEqual({ refused: code })
      return granted[0] === one ? 'first' : 'second'
    })
  }

  it('should grant the last of a budget to exactly one of two processes reserving it at once', async () => {
    const { url, schema, ledger } = open()
    const roots = Array.from({ length: 30 }, (_, i) => `root${i}`)
    for (const root of roots) ledger.openRoot(root, { spend: 1, tokens: null }, 1)
    const [first, second] = await race(url, schema, [
      { owner: 'one', steps: roots.map((root) => ({ op: 'reserve' as const, child: `${root}-one`, parent: root, spend: 0.6 })) },
      { owner: 'two', steps: roots.map((root) => ({ op: 'reserve' as const, child: `${root}-two`, parent: root, spend: 0.6 })) },
    ])
    const winners = oneGranted(first!, second!, 'BUDGET_EXCEEDED')
    roots.forEach((root, i) => {
      expect(ledger.children(root).map((account) => account.threadId)).toEqual([`${root}-${winners[i] === 'first' ? 'one' : 'two'}`])
      expect(ledger.get(root)!.available.spend).toBeCloseTo(0.4, 12)
    })
    expect(ledger.check()).toEqual([])
  })

  it("should give a parent's last spawn slot to exactly one of two processes spawning under it at once", async () => {
    const { url, schema, ledger } = open()
    const roots = Array.from({ length: 30 }, (_, i) => `root${i}`)
    for (const root of roots) ledger.openRoot(root, UNLIMITED, 1)
    const [first, second] = await race(url, schema, [
      { owner: 'one', steps: roots.map((root) => ({ op: 'reserve' as const, child: `${root}-one`, parent: root, spend: 0.1, spawns: 1 })) },
      { owner: 'two', steps: roots.map((root) => ({ op: 'reserve' as const, child: `${root}-two`, parent: root, spend: 0.1, spawns: 1 })) },
    ])
    oneGranted(first!, second!, 'SPAWN_REFUSED')
    for (const root of roots) expect(ledger.children(root)).toHaveLength(1)
  })

  it('should keep accounts, usage and releases when the connection closes and another opens', async () => {
    const { url, schema, db } = freshDatabase()
    const ledger = openPgLedger({ db })
    ledger.openRoot('root', { spend: 1, tokens: 1000 }, 1)
    ledger.reserve('a', 'root', { spend: 0.5, tokens: 100 }, 2)
    ledger.reserve('b', 'root', { spend: 0.2, tokens: null }, 3)
    ledger.record('a', { spend: 0.1, tokens: 7 }, 4)
    ledger.release('b', 5)
    const before = ['root', 'a', 'b'].map((id) => ledger.get(id))
    ledger.close()
    db.close()

    const again = new PgBridge({ url, schema })
    try {
      const reopened = openPgLedger({ db: again })
      expect(['root', 'a', 'b'].map((id) => reopened.get(id))).toEqual(before)
      expect(reopened.get('root')).toMatchObject({ spent: { spend: 0.1, tokens: 7 }, reserved: { spend: 0.4, tokens: 93 } })
      expect(reopened.check()).toEqual([])
    } finally {
      again.close()
      await dropSchema(url, schema)
    }
  })

  it('should find planted damage: a spent that does not add up, and an account whose parent has none', () => {
    const { db, ledger } = open()
    ledger.openRoot('root', { spend: 1, tokens: null }, 1)
    ledger.reserve('a', 'root', { spend: 0.5, tokens: null }, 2)
    ledger.record('a', { spend: 0.1, tokens: 1 }, 3)
    db.execSync(`UPDATE ledger_accounts SET spent_spend = 0.9 WHERE thread_id = 'root'`)
    db.execSync(`INSERT INTO ledger_accounts (thread_id, parent_id, limit_spend, created_at, updated_at) VALUES ('stray', 'gone', 0.1, 1, 1)`)
    expect(ledger.check().map((problem) => `${problem.threadId}:${problem.kind}`).sort()).toEqual(['root:spent_mismatch', 'stray:orphan_account'])
  })

  it('should end a walk up or down a tree whose damaged rows form a cycle', () => {
    const { db, ledger } = open()
    ledger.openRoot('x', { spend: 1, tokens: null }, 1)
    ledger.reserve('y', 'x', { spend: 0.5, tokens: null }, 2)
    ledger.release('y', 3)
    ledger.release('x', 3)
    db.execSync(`UPDATE ledger_accounts SET parent_id = 'y' WHERE thread_id = 'x'`)
    ledger.record('y', { spend: 0.1, tokens: 0 }, 4)
    expect(ledger.get('x')!.spent.spend).toBeCloseTo(0.1, 12)
    expect(ledger.get('y')!.reserved).toEqual({ spend: 0, tokens: 0 })
  })
})
