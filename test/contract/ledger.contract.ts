/**
 * The contract every Ledger backend keeps: the budget arithmetic over a thread tree as the Ledger
 * interface promises it. Not collected directly (vitest.config.ts excludes test/contract): each
 * backend's spec file calls `ledgerContract`. What needs a file or a second process (a reopen,
 * planted damage, processes reserving at once) stays with that backend's own tests.
 * Known deviations: none.
 */
import { describe, expect, it } from 'vitest'
import type { Ledger } from '../../persistence/types.js'

export interface LedgerBackend {
  ledger: Ledger
  destroy?: () => void
}

const UNLIMITED = { spend: null, tokens: null }

export function ledgerContract(name: string, create: () => LedgerBackend): void {
  describe(`Ledger contract: ${name}`, () => {
    const withLedger = (fn: (ledger: Ledger) => void) => () => {
      const backend = create()
      try {
        fn(backend.ledger)
      } finally {
        backend.ledger.close()
        backend.destroy?.()
      }
    }

    describe('openRoot', () => {
      it('should open a root account with its limit available and nothing spent or reserved', withLedger((l) => {
        expect(l.openRoot('root', { spend: 1, tokens: 1000 }, 5)).toEqual({
          threadId: 'root',
          parentId: null,
          limit: { spend: 1, tokens: 1000 },
          spent: { spend: 0, tokens: 0 },
          ownSpent: { spend: 0, tokens: 0 },
          reserved: { spend: 0, tokens: 0 },
          available: { spend: 1, tokens: 1000 },
          released: false,
          createdAt: 5,
          updatedAt: 5,
        })
        expect(l.get('root')).toEqual(l.openRoot('root', { spend: 1, tokens: 1000 }, 5))
      }))

      it('should keep an unlimited amount null in its limit and what is available', withLedger((l) => {
        expect(l.openRoot('root', { spend: null, tokens: 10 }, 1)).toMatchObject({ limit: { spend: null, tokens: 10 }, available: { spend: null, tokens: 10 } })
      }))

      it('should return the existing account when opened again, its limit and times unchanged', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.record('root', { spend: 0.25, tokens: 3 }, 2)
        const again = l.openRoot('root', { spend: 5, tokens: 5 }, 3)
        expect(again).toMatchObject({ limit: { spend: 1, tokens: null }, spent: { spend: 0.25, tokens: 3 }, createdAt: 1, updatedAt: 2 })
      }))
    })

    describe('reserve', () => {
      it("should open the child with the request as its limit, taken from the parent's available amount", withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
        expect(l.reserve('child', 'root', { spend: 0.4, tokens: 300 }, 2)).toMatchObject({
          threadId: 'child',
          parentId: 'root',
          limit: { spend: 0.4, tokens: 300 },
          available: { spend: 0.4, tokens: 300 },
          createdAt: 2,
        })
        expect(l.get('root')).toMatchObject({ reserved: { spend: 0.4, tokens: 300 }, available: { spend: 0.6, tokens: 700 }, spent: { spend: 0, tokens: 0 } })
      }))

      it('should give a null request whatever the parent has left, and unlimited only under an unlimited parent', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.25, tokens: null }, 2)
        expect(l.reserve('b', 'root', UNLIMITED, 3).limit).toEqual({ spend: 0.75, tokens: null })
        expect(l.get('root')!.available).toEqual({ spend: 0, tokens: null })
      }))

      it('should reserve whole tokens only', withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: 100 }, 1)
        expect(l.reserve('child', 'root', { spend: null, tokens: 2.7 }, 2).limit.tokens).toBe(2)
        expect(l.get('root')!.available.tokens).toBe(98)
      }))

      it('should refuse a reservation the parent cannot cover with BUDGET_EXCEEDED saying what is left, and write nothing', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 100 }, 1)
        l.reserve('a', 'root', { spend: 0.7, tokens: null }, 2)
        l.record('root', { spend: 0.1, tokens: 5 }, 3)
        const before = l.get('root')
        let refusal: unknown
        try {
          l.reserve('b', 'root', { spend: 0.3, tokens: 10 }, 4)
        } catch (error) {
          refusal = error
        }
        expect(refusal).toMatchObject({
          name: 'SpindleError',
          code: 'BUDGET_EXCEEDED',
          details: { parentId: 'root', amount: 'spend', requested: 0.3 },
          message: expect.stringMatching(/root has \$0\.2 of its \$1 spend budget left/),
        })
        expect((refusal as { details: { available: number } }).details.available).toBeCloseTo(0.2, 12)
        expect(l.get('b')).toBeNull()
        expect(l.get('root')).toEqual(before)
        expect(l.children('root').map((a) => a.threadId)).toEqual(['a'])
      }))

      it('should name the amount the parent cannot cover', withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: 100 }, 1)
        expect(() => l.reserve('child', 'root', { spend: 5, tokens: 101 }, 2)).toThrow(
          expect.objectContaining({ code: 'BUDGET_EXCEEDED', details: { parentId: 'root', amount: 'tokens', requested: 101, available: 100 } }),
        )
      }))

      it('should refuse even "whatever is left" when nothing is', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 1, tokens: null }, 2)
        expect(() => l.reserve('b', 'root', UNLIMITED, 3)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED', details: expect.objectContaining({ amount: 'spend' }) }))
        expect(l.get('b')).toBeNull()
      }))

      it('should fit ten reservations of $0.10 into $1.00 despite floating point, and no eleventh', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        for (let i = 0; i < 10; i++) l.reserve(`c${i}`, 'root', { spend: 0.1, tokens: null }, 2 + i)
        expect(() => l.reserve('c10', 'root', { spend: 0.01, tokens: null }, 20)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
      }))

      it('should return the existing account for a child reserved again, reserving nothing more', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        const first = l.reserve('child', 'root', { spend: 0.3, tokens: null }, 2)
        expect(l.reserve('child', 'root', { spend: 0.9, tokens: null }, 3)).toEqual(first)
        expect(l.get('root')!.available.spend).toBeCloseTo(0.7, 12)
      }))

      it('should throw THREAD_NOT_FOUND naming a parent without an account, and write nothing', withLedger((l) => {
        expect(() => l.reserve('child', 'nobody', { spend: 0.1, tokens: null }, 1)).toThrow(
          expect.objectContaining({ code: 'THREAD_NOT_FOUND', details: { threadId: 'nobody' }, message: expect.stringContaining('nobody') }),
        )
        expect(l.get('child')).toBeNull()
      }))
    })

    describe('reserve with a spawn slot', () => {
      const slot = (max: number, known: string[] = []) => ({ max, known })

      it("should take one of the parent's spawn slots with the reservation and refuse a child past the limit with SPAWN_REFUSED, writing nothing", withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.1, tokens: null }, 2, slot(2))
        l.reserve('b', 'root', { spend: 0.1, tokens: null }, 3, slot(2))
        const before = l.get('root')
        expect(() => l.reserve('c', 'root', { spend: 0.1, tokens: null }, 4, slot(2))).toThrow(
          expect.objectContaining({
            name: 'SpindleError',
            code: 'SPAWN_REFUSED',
            message: 'Thread root has started 2 children, its spawns limit is 2.',
            details: { threadId: 'root', limit: 'spawns', started: 2, max: 2 },
          }),
        )
        expect(l.get('c')).toBeNull()
        expect(l.get('root')).toEqual(before)
      }))

      it('should count a released child as started: its slot stays taken', withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: null }, 1)
        l.reserve('a', 'root', UNLIMITED, 2, slot(1))
        l.release('a', 3)
        expect(() => l.reserve('b', 'root', UNLIMITED, 4, slot(1))).toThrow(expect.objectContaining({ code: 'SPAWN_REFUSED' }))
      }))

      it('should count children reserved without a slot, and the known ones it has no account of, each once', withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: null }, 1)
        l.reserve('a', 'root', UNLIMITED, 2)
        expect(() => l.reserve('b', 'root', UNLIMITED, 3, slot(2, ['a', 'old']))).toThrow(
          expect.objectContaining({ code: 'SPAWN_REFUSED', details: expect.objectContaining({ started: 2 }) }),
        )
        expect(l.reserve('b', 'root', UNLIMITED, 3, slot(3, ['a', 'old'])).threadId).toBe('b')
      }))

      it('should refuse every child under a limit of 0', withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: null }, 1)
        expect(() => l.reserve('a', 'root', UNLIMITED, 2, slot(0))).toThrow(expect.objectContaining({ code: 'SPAWN_REFUSED', details: expect.objectContaining({ started: 0, max: 0 }) }))
      }))

      it('should refuse the slot before the budget: a child past both limits is refused for its spawns', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 1, tokens: null }, 2, slot(1))
        expect(() => l.reserve('b', 'root', { spend: 1, tokens: null }, 3, slot(1))).toThrow(expect.objectContaining({ code: 'SPAWN_REFUSED' }))
      }))

      it('should take no slot for a reservation the budget refuses', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        expect(() => l.reserve('big', 'root', { spend: 5, tokens: null }, 2, slot(1))).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
        expect(l.reserve('small', 'root', { spend: 0.5, tokens: null }, 3, slot(1)).threadId).toBe('small')
      }))

      it('should return the existing account for a child reserved again, even with every slot taken', withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: null }, 1)
        const first = l.reserve('a', 'root', UNLIMITED, 2, slot(1))
        expect(l.reserve('a', 'root', UNLIMITED, 3, slot(1))).toEqual(first)
      }))

      it("should give an unborn child's slot back when it is dropped, once", withLedger((l) => {
        l.openRoot('root', { spend: null, tokens: null }, 1)
        l.reserve('a', 'root', UNLIMITED, 2, slot(2))
        l.reserve('b', 'root', UNLIMITED, 3, slot(2))
        expect(l.dropUnborn('b')).toBe(true)
        expect(l.dropUnborn('b')).toBe(false)
        expect(l.reserve('c', 'root', UNLIMITED, 4, slot(2)).threadId).toBe('c')
        expect(() => l.reserve('d', 'root', UNLIMITED, 5, slot(2))).toThrow(expect.objectContaining({ code: 'SPAWN_REFUSED' }))
      }))

      it('should throw THREAD_NOT_FOUND for a parent without an account, whatever its slots', withLedger((l) => {
        expect(() => l.reserve('a', 'nobody', UNLIMITED, 1, slot(0))).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
      }))
    })

    describe('record', () => {
      it("should add usage to the thread's own and spent and to every ancestor's spent, stamping each", withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
        l.reserve('child', 'root', { spend: 0.5, tokens: 400 }, 2)
        l.reserve('grandchild', 'child', { spend: 0.2, tokens: null }, 3)
        l.record('grandchild', { spend: 0.05, tokens: 30 }, 4)
        l.record('child', { spend: 0.1, tokens: 20 }, 5)
        expect(l.get('grandchild')).toMatchObject({ spent: { spend: 0.05, tokens: 30 }, ownSpent: { spend: 0.05, tokens: 30 }, updatedAt: 4 })
        const child = l.get('child')!
        expect(child).toMatchObject({ ownSpent: { spend: 0.1, tokens: 20 }, updatedAt: 5 })
        expect(child.spent.spend).toBeCloseTo(0.15, 12)
        expect(child.spent.tokens).toBe(50)
        const root = l.get('root')!
        expect(root).toMatchObject({ ownSpent: { spend: 0, tokens: 0 }, updatedAt: 5 })
        expect(root.spent.spend).toBeCloseTo(0.15, 12)
        expect(root.spent.tokens).toBe(50)
      }))

      it('should count what a child has spent once, not also as reserved', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
        l.reserve('child', 'root', { spend: 0.5, tokens: 400 }, 2)
        l.reserve('grandchild', 'child', { spend: 0.2, tokens: null }, 3)
        l.record('grandchild', { spend: 0.05, tokens: 30 }, 4)
        l.record('child', { spend: 0.1, tokens: 20 }, 5)
        // The grandchild holds 0.15 of its 0.2 and 370 of its 400 tokens ("whatever is left"),
        // so the child's own 20 tokens went beyond what it had: its available is negative.
        const child = l.get('child')!
        expect(child.reserved.spend).toBeCloseTo(0.15, 12)
        expect(child.reserved.tokens).toBe(370)
        expect(child.available.spend).toBeCloseTo(0.5 - 0.15 - 0.15, 12)
        expect(child.available.tokens).toBe(400 - 50 - 370)
        expect(l.get('root')!.available.spend).toBeCloseTo(1 - 0.15 - 0.35, 12)
        expect(l.get('root')!.available.tokens).toBe(1000 - 50 - 350)
      }))

      it('should let a thread spend beyond its limit, leaving a negative available', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.record('root', { spend: 1.5, tokens: 0 }, 2)
        expect(l.get('root')!.available.spend).toBeCloseTo(-0.5, 12)
      }))

      it('should throw THREAD_NOT_FOUND for a thread without an account', withLedger((l) => {
        expect(() => l.record('nobody', { spend: 0.1, tokens: 1 }, 1)).toThrow(
          expect.objectContaining({ code: 'THREAD_NOT_FOUND', details: { threadId: 'nobody' } }),
        )
      }))

      it('should refuse usage that is not a number with LEDGER_FAILED, and write nothing', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('child', 'root', { spend: 0.5, tokens: null }, 2)
        l.record('child', { spend: 0.1, tokens: 1 }, 3)
        const before = [l.get('root'), l.get('child')]
        expect(() => l.record('child', { spend: Number.NaN, tokens: 1 }, 4)).toThrow(expect.objectContaining({ code: 'LEDGER_FAILED' }))
        expect([l.get('root'), l.get('child')]).toEqual(before)
      }))
    })

    describe('release', () => {
      it("should return a released child's unspent reservation to its parent, once", withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.6, tokens: null }, 2)
        l.record('a', { spend: 0.25, tokens: 0 }, 3)
        expect(l.get('root')!.available.spend).toBeCloseTo(0.4, 12)
        l.release('a', 4)
        l.release('a', 5)
        expect(l.get('a')).toMatchObject({ released: true, updatedAt: 4 })
        expect(l.get('root')!.reserved.spend).toBe(0)
        expect(l.get('root')!.available.spend).toBeCloseTo(0.75, 12)
      }))

      it('should still count late usage of a released child, and keep its limit when it is reserved again', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.6, tokens: null }, 2)
        l.record('a', { spend: 0.25, tokens: 0 }, 3)
        l.release('a', 4)
        l.record('a', { spend: 0.05, tokens: 0 }, 6)
        expect(l.get('root')!.available.spend).toBeCloseTo(0.7, 12)
        expect(l.reserve('a', 'root', { spend: 0.9, tokens: null }, 7)).toMatchObject({ limit: { spend: 0.6 }, released: true })
      }))

      it('should do nothing for a thread without an account', withLedger((l) => {
        expect(() => l.release('nobody', 1)).not.toThrow()
        expect(l.get('nobody')).toBeNull()
      }))

      it('should keep counting what open descendants of an ended child hold, so the root never grants it twice', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
        l.reserve('child', 'root', { spend: 0.5, tokens: 500 }, 2)
        l.reserve('grandchild', 'child', { spend: 0.3, tokens: 200 }, 3)
        l.reserve('great', 'grandchild', { spend: 0.1, tokens: 50 }, 4)
        l.record('child', { spend: 0.1, tokens: 100 }, 5)
        l.release('child', 6)
        expect(l.get('root')!.reserved.spend).toBeCloseTo(0.3, 12)
        expect(l.get('root')!.reserved.tokens).toBe(200)
        expect(() => l.reserve('second', 'root', { spend: 0.7, tokens: null }, 7)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
        // Through two ended accounts, the great-grandchild still holds its 0.1 from the root.
        l.record('grandchild', { spend: 0.05, tokens: 10 }, 8)
        l.release('grandchild', 9)
        expect(l.get('root')!.reserved.spend).toBeCloseTo(0.1, 12)
        l.release('great', 10)
        expect(l.get('root')!.reserved).toEqual({ spend: 0, tokens: 0 })
        expect(l.get('root')!.available.spend).toBeCloseTo(1 - 0.15, 12)
      }))

      it('should count at most its unspent limit for an ended child whose children hold more than it has left', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('child', 'root', { spend: 0.5, tokens: null }, 2)
        l.reserve('grandchild', 'child', { spend: 0.4, tokens: null }, 3)
        l.record('child', { spend: 0.3, tokens: 0 }, 4)
        l.release('child', 5)
        expect(l.get('root')!.reserved.spend).toBeCloseTo(0.2, 12)
      }))
    })

    describe('raise', () => {
      it("should raise a root's limit, or make it unlimited, without asking anyone", withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 10 }, 1)
        l.record('root', { spend: 0.5, tokens: 0 }, 2)
        expect(l.raise('root', { spend: 2 }, 3)).toMatchObject({ limit: { spend: 2, tokens: 10 }, available: { spend: 1.5, tokens: 10 }, updatedAt: 3 })
        expect(l.raise('root', { tokens: null }, 4).limit).toEqual({ spend: 2, tokens: null })
      }))

      it("should reserve a child's raise from its parent, and refuse one the parent cannot cover, keeping the limit", withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.3, tokens: null }, 2)
        l.record('a', { spend: 0.3, tokens: 0 }, 3)
        expect(() => l.raise('a', { spend: 1.5 }, 4)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED', details: expect.objectContaining({ parentId: 'root', amount: 'spend' }) }))
        expect(l.get('a')).toMatchObject({ limit: { spend: 0.3 }, updatedAt: 3 })
        l.raise('a', { spend: 0.8 }, 5)
        expect(l.get('root')!.available.spend).toBeCloseTo(0.2, 12)
      }))

      it('should reserve only the growth beyond what an overspent child has spent', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.2, tokens: null }, 2)
        l.record('a', { spend: 0.5, tokens: 0 }, 3)
        // The root has 0.5 left; the child spent 0.5 of a 0.2 limit, so a limit of 0.9 holds 0.4 more.
        expect(l.get('root')!.available.spend).toBeCloseTo(0.5, 12)
        l.raise('a', { spend: 0.9 }, 4)
        expect(l.get('root')!.available.spend).toBeCloseTo(0.1, 12)
        expect(() => l.raise('a', { spend: 1.1 }, 5)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
      }))

      it('should refuse an unlimited amount for a child under a limited parent, and allow it under an unlimited one', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.2, tokens: 10 }, 2)
        expect(() => l.raise('a', { spend: null }, 3)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED', details: { parentId: 'root', amount: 'spend' } }))
        expect(l.raise('a', { tokens: null }, 4).limit).toEqual({ spend: 0.2, tokens: null })
      }))

      it('should keep an amount left out of the raise', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 100 }, 1)
        expect(l.raise('root', { tokens: 200 }, 2).limit).toEqual({ spend: 1, tokens: 200 })
      }))

      it('should raise a released child without reserving anything from its parent', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.2, tokens: null }, 2)
        l.release('a', 3)
        expect(l.raise('a', { spend: 5 }, 4).limit.spend).toBe(5)
        expect(l.get('root')!.available.spend).toBe(1)
      }))

      it('should throw THREAD_NOT_FOUND for a thread without an account', withLedger((l) => {
        expect(() => l.raise('nobody', { spend: 1 }, 1)).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND', details: { threadId: 'nobody' } }))
      }))
    })

    describe('reading', () => {
      it('should return null for a thread without an account', withLedger((l) => {
        expect(l.get('nobody')).toBeNull()
      }))

      it('should list only the direct children, oldest first, then by id', withLedger((l) => {
        l.openRoot('root', UNLIMITED, 1)
        l.reserve('c', 'root', UNLIMITED, 3)
        l.reserve('b', 'root', UNLIMITED, 2)
        l.reserve('a', 'root', UNLIMITED, 3)
        l.reserve('under-a', 'a', UNLIMITED, 4)
        expect(l.children('root').map((account) => account.threadId)).toEqual(['b', 'a', 'c'])
        expect(l.children('under-a')).toEqual([])
        expect(l.children('nobody')).toEqual([])
      }))

      it('should hand out accounts a caller cannot change the ledger through', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('a', 'root', { spend: 0.5, tokens: null }, 2)
        const root = l.get('root')!
        root.limit.spend = 100
        root.spent.spend = 100
        root.available.spend = 100
        root.reserved.spend = 0
        l.children('root')[0]!.limit.spend = 100
        expect(l.get('root')).toMatchObject({ limit: { spend: 1 }, spent: { spend: 0 }, available: { spend: 0.5 }, reserved: { spend: 0.5 } })
        expect(l.get('a')!.limit.spend).toBe(0.5)
      }))

      it('should find nothing wrong in balances built through its own operations', withLedger((l) => {
        l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
        l.reserve('child', 'root', { spend: 0.5, tokens: 500 }, 2)
        l.reserve('grandchild', 'child', { spend: 0.3, tokens: 200 }, 3)
        l.record('grandchild', { spend: 0.05, tokens: 30 }, 4)
        l.record('child', { spend: 0.1, tokens: 20 }, 5)
        l.release('grandchild', 6)
        l.raise('child', { spend: 0.6 }, 7)
        l.record('root', { spend: 0.01, tokens: 1 }, 8)
        expect(l.check()).toEqual([])
      }))
    })

    describe('untouched and dropUnborn', () => {
      /** root (spent) → spent; root → parent → kid; root → fresh; root → ended (released) */
      const tree = (l: Ledger) => {
        l.openRoot('root', { spend: 1, tokens: null }, 1)
        l.reserve('spent', 'root', { spend: 0.1, tokens: null }, 2)
        l.record('spent', { spend: 0.01, tokens: 1 }, 3)
        l.reserve('parent', 'root', { spend: 0.2, tokens: null }, 4)
        l.reserve('kid', 'parent', { spend: 0.1, tokens: null }, 5)
        l.reserve('fresh', 'root', { spend: 0.3, tokens: null }, 6)
        l.reserve('ended', 'root', { spend: 0.1, tokens: null }, 7)
        l.release('ended', 8)
      }

      it('should list the accounts not released, with nothing spent and no children', withLedger((l) => {
        tree(l)
        expect(l.untouched().sort()).toEqual(['fresh', 'kid'])
      }))

      it("should drop an unborn account, returning its reservation to the parent, and let the id be reserved again", withLedger((l) => {
        tree(l)
        const available = l.get('root')!.available.spend!
        expect(l.dropUnborn('fresh')).toBe(true)
        expect(l.get('fresh')).toBeNull()
        expect(l.get('root')!.available.spend).toBeCloseTo(available + 0.3, 12)
        expect(l.children('root').map((a) => a.threadId)).toEqual(['spent', 'parent', 'ended'])
        expect(l.reserve('fresh', 'root', { spend: 0.05, tokens: null }, 9)).toMatchObject({ limit: { spend: 0.05 }, createdAt: 9 })
        expect(l.check()).toEqual([])
      }))

      it('should keep an account that spent, has children, was released, or does not exist', withLedger((l) => {
        tree(l)
        const before = ['spent', 'parent', 'ended'].map((id) => l.get(id))
        expect(['spent', 'parent', 'ended', 'nobody'].map((id) => l.dropUnborn(id))).toEqual([false, false, false, false])
        expect(['spent', 'parent', 'ended'].map((id) => l.get(id))).toEqual(before)
      }))

      it('should drop an account whose only recorded usage was zero', withLedger((l) => {
        tree(l)
        l.record('fresh', { spend: 0, tokens: 0 }, 9)
        expect(l.dropUnborn('fresh')).toBe(true)
      }))
    })

    describe('accounts and restore (a copy to another backend)', () => {
      /** A root, an open child that spent, a released child, and a grandchild under the released one. */
      const copied = (l: Ledger) => {
        l.openRoot('root', { spend: 1, tokens: 1000 }, 1)
        l.reserve('open', 'root', { spend: 0.3, tokens: 100 }, 2)
        l.reserve('ended', 'root', { spend: 0.2, tokens: null }, 3)
        l.reserve('below', 'ended', { spend: 0.1, tokens: 10 }, 4)
        l.record('open', { spend: 0.05, tokens: 7 }, 5)
        l.record('below', { spend: 0.01, tokens: 2 }, 6)
        l.release('ended', 7)
      }

      it('should read every account as stored, in the order the accounts were opened', withLedger((l) => {
        copied(l)
        expect(l.accounts()).toEqual([
          { threadId: 'root', parentId: null, limit: { spend: 1, tokens: 1000 }, ownSpent: { spend: 0, tokens: 0 }, spent: { spend: 0.060000000000000005, tokens: 9 }, released: false, createdAt: 1, updatedAt: 6 },
          { threadId: 'open', parentId: 'root', limit: { spend: 0.3, tokens: 100 }, ownSpent: { spend: 0.05, tokens: 7 }, spent: { spend: 0.05, tokens: 7 }, released: false, createdAt: 2, updatedAt: 5 },
          { threadId: 'ended', parentId: 'root', limit: { spend: 0.2, tokens: 900 }, ownSpent: { spend: 0, tokens: 0 }, spent: { spend: 0.01, tokens: 2 }, released: true, createdAt: 3, updatedAt: 7 },
          { threadId: 'below', parentId: 'ended', limit: { spend: 0.1, tokens: 10 }, ownSpent: { spend: 0.01, tokens: 2 }, spent: { spend: 0.01, tokens: 2 }, released: false, createdAt: 4, updatedAt: 6 },
        ])
      }))

      it('should restore another ledger\'s accounts so that every balance and every account reads as it did there', () => {
        const from = create()
        const to = create()
        try {
          copied(from.ledger)
          to.ledger.restore(from.ledger.accounts())
          expect(to.ledger.accounts()).toEqual(from.ledger.accounts())
          for (const id of ['root', 'open', 'ended', 'below']) expect(to.ledger.get(id)).toEqual(from.ledger.get(id))
          expect(to.ledger.children('root')).toEqual(from.ledger.children('root'))
          expect(to.ledger.check()).toEqual([])
          // A reservation after the copy is held to what the copy holds.
          expect(() => to.ledger.reserve('more', 'root', { spend: 0.7, tokens: null }, 8)).toThrow(expect.objectContaining({ code: 'BUDGET_EXCEEDED' }))
        } finally {
          from.ledger.close()
          to.ledger.close()
          from.destroy?.()
          to.destroy?.()
        }
      })

      it('should leave an account that exists as it is, and restore the others', withLedger((l) => {
        l.openRoot('root', { spend: 5, tokens: null }, 1)
        l.restore([
          { threadId: 'root', parentId: null, limit: { spend: 1, tokens: null }, ownSpent: { spend: 0, tokens: 0 }, spent: { spend: 0, tokens: 0 }, released: true, createdAt: 9, updatedAt: 9 },
          { threadId: 'child', parentId: 'root', limit: { spend: 2, tokens: null }, ownSpent: { spend: 0.5, tokens: 3 }, spent: { spend: 0.5, tokens: 3 }, released: false, createdAt: 9, updatedAt: 9 },
        ])
        expect(l.get('root')).toMatchObject({ limit: { spend: 5, tokens: null }, released: false, createdAt: 1, reserved: { spend: 1.5, tokens: 0 } })
        expect(l.get('child')).toMatchObject({ limit: { spend: 2, tokens: null }, ownSpent: { spend: 0.5, tokens: 3 } })
      }))
    })

    it('should refuse reads and writes once closed', () => {
      const backend = create()
      try {
        backend.ledger.openRoot('root', UNLIMITED, 1)
        backend.ledger.close()
        expect(() => backend.ledger.get('root')).toThrow()
        expect(() => backend.ledger.openRoot('other', UNLIMITED, 1)).toThrow()
      } finally {
        backend.destroy?.()
      }
    })

    it('should allow close to be called twice', () => {
      const backend = create()
      try {
        backend.ledger.close()
        expect(() => backend.ledger.close()).not.toThrow()
      } finally {
        backend.destroy?.()
      }
    })
  })
}
