/**
 * The memory backends against the SQLite ones, beyond the contracts' chosen cases: one seeded
 * sequence of random operations runs against both, and every answer (accounts to the last bit of
 * their floats, records, error codes) must be the same. A failure names the step to replay.
 */
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { compareBinary } from '../../persistence/binaryOrder.js'
import { createMemoryLedger } from '../../persistence/memoryLedger.js'
import { createMemoryRegistry } from '../../persistence/memoryRegistry.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { BudgetAmounts, Ledger, Registry, ThreadStatus } from '../../persistence/types.js'

/** mulberry32: a small seeded generator, so a failing sequence can be replayed. */
function random(seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** What an operation returned, or the code of what it threw. */
function outcome(fn: () => unknown): unknown {
  try {
    return { value: fn() }
  } catch (error) {
    return { threw: (error as { code?: string }).code ?? (error as Error).name }
  }
}

describe('memory backends against SQLite', () => {
  it('should give the same accounts as the SQLite ledger, float for float, over 3000 random operations', () => {
    const backends: Ledger[] = [openSqliteLedger({ path: ':memory:', durability: 'process' }), createMemoryLedger()]
    const next = random(20_240_611)
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!
    const ids = Array.from({ length: 400 }, (_, i) => `t${i}`)
    // Amounts with a few decimals, so sums round as money does; sometimes unlimited.
    const amount = (scale: number): number | null => (next() < 0.2 ? null : Math.round(next() * scale * 100) / 100)
    const limits = (): BudgetAmounts => ({ spend: amount(1), tokens: amount(1000) === null ? null : Math.round(next() * 1000) })
    try {
      for (let step = 0; step < 3000; step++) {
        const id = pick(ids)
        const parent = pick(ids)
        const at = step
        // Every random argument is drawn before the operation runs, so both backends get the same.
        const r = next()
        const request = limits()
        const delta = { spend: Math.round(next() * 20) / 100, tokens: Math.round(next() * 50) }
        const raised = next() < 0.5 ? { spend: amount(2) } : { tokens: Math.round(next() * 2000) }
        const op: (l: Ledger) => unknown =
          r < 0.08 ? (l) => l.openRoot(id, request, at)
          : r < 0.4 ? (l) => l.reserve(id, parent, request, at)
          : r < 0.7 ? (l) => l.record(id, delta, at)
          : r < 0.82 ? (l) => l.release(id, at)
          : r < 0.92 ? (l) => l.raise(id, raised, at)
          : (l) => l.dropUnborn(id)
        const [sqlite, memory] = backends.map((l) => outcome(() => op(l)))
        expect(memory, `step ${step}`).toEqual(sqlite)
        if (step % 50 === 0 || step === 2999) {
          const [a, b] = backends.map((l) => ({ accounts: ids.map((i) => l.get(i)), children: ids.map((i) => l.children(i)), untouched: l.untouched(), check: l.check() }))
          expect(b, `state after step ${step}`).toEqual(a)
        }
      }
    } finally {
      for (const l of backends) l.close()
    }
  })

  it('should give the same records and orders as the SQLite registry over 2000 random operations', () => {
    const backends: Registry[] = [openSqliteRegistry({ path: ':memory:', durability: 'process' }), createMemoryRegistry()]
    const next = random(7)
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!
    const ids = Array.from({ length: 300 }, (_, i) => `thread-${String.fromCharCode(97 + (i % 26))}${i}`)
    const statuses: ThreadStatus[] = ['created', 'running', 'suspended', 'completed', 'error', 'cancelled', 'continued']
    try {
      for (let step = 0; step < 2000; step++) {
        const id = pick(ids)
        const r = next()
        // Few distinct creation times, so the id decides many orders.
        const thread = { id, directiveName: 'd', directive: { step }, nonce: 'n', createdAt: Math.floor(next() * 4), parentId: next() < 0.5 ? pick(ids) : null, previousThreadId: next() < 0.5 ? pick(ids) : null }
        const status = pick(statuses)
        const token = Math.floor(next() * 6)
        const other = { id: pick(ids), token: Math.floor(next() * 6) }
        const listed = { status: [status, pick(statuses)], limit: Math.floor(next() * 8) - 1 }
        const op: (registry: Registry) => unknown =
          r < 0.25 ? (registry) => registry.register(thread)
          : r < 0.45 ? (registry) => registry.updateStatus(id, status, step)
          : r < 0.5 ? (registry) => registry.setResult(id, { result: { step } })
          : r < 0.55 ? (registry) => registry.updateCostSnapshot(id, { turns: step, inputTokens: 1, outputTokens: 2, spend: step / 100 })
          : r < 0.62 ? (registry) => registry.setRecoveryCounts([{ id, count: token, seq: step }])
          : r < 0.66 ? (registry) => registry.resetRecoveryCounts([id])
          : r < 0.74 ? (registry) => registry.claim([{ id, token }, other])
          : r < 0.82 ? (registry) => registry.transaction(() => { registry.register(thread); registry.updateStatus(other.id, status, step) })
          : r < 0.88 ? (registry) => registry.list(listed)
          : r < 0.94 ? (registry) => registry.chain(id)
          : (registry) => [registry.successorOf(id), registry.listChildren(id), registry.statuses([status])]
        const [sqlite, memory] = backends.map((registry) => outcome(() => op(registry)))
        expect(memory, `step ${step}`).toEqual(sqlite)
        if (step % 100 === 0 || step === 1999) {
          const [a, b] = backends.map((registry) => ({
            list: registry.list(),
            active: registry.activeStatuses(),
            counts: registry.recoveryCounts(),
            tokens: ids.map((i) => registry.leaseToken(i)),
          }))
          expect(b, `state after step ${step}`).toEqual(a)
        }
      }
    } finally {
      for (const registry of backends) registry.close()
    }
  })
})

describe('compareBinary', () => {
  it("should order strings as SQLite's BINARY collation does, astral and private-use characters included", () => {
    const next = random(3)
    const alphabet = ['a', 'B', '0', '-', 'é', '\u00ff', '\u0100', '\ud7ff', '\ue000', '\uffff', '😀', '𐀀', '\u{10ffff}']
    const words = Array.from({ length: 300 }, () => Array.from({ length: 1 + Math.floor(next() * 4) }, () => alphabet[Math.floor(next() * alphabet.length)]).join(''))
    const db = new Database(':memory:')
    db.exec('CREATE TABLE w (s TEXT)')
    const insert = db.prepare('INSERT INTO w VALUES (?)')
    for (const word of words) insert.run(word)
    const bySqlite = db.prepare<[], { s: string }>('SELECT s FROM w ORDER BY s').all().map((row) => row.s)
    db.close()
    expect([...words].sort(compareBinary)).toEqual(bySqlite)
  })
})
