/**
 * Budgets, children and retries in view, through the public API: `rt.budget(id)` as children
 * reserve, spend and end; `rt.children(id)`; the retries and last error a thread's view and `done`
 * report; the same figures from a second runtime on the directory. Files and SQLite are real; the
 * model answers a thread when the test lets it.
 */
import { describe, expect, it } from 'vitest'
import type { ModelAdapter, ModelRequest, ModelResponse } from '../../src/index.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'
import { eventually } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

/** A model whose every call waits until the test answers it, with the cost the test names. */
function gatedModel(): ModelAdapter & { waiting(id: string): boolean; answer(id: string, cost: number): void } {
  const gates = new Map<string, (response: ModelResponse) => void>()
  return {
    name: 'gated',
    generate(request: ModelRequest) {
      return new Promise<ModelResponse>((resolve) => gates.set(request.threadId, resolve))
    },
    waiting: (id) => gates.has(id),
    answer(id, cost) {
      const resolve = gates.get(id)
      if (!resolve) throw new Error(`no call of ${id} waits`)
      gates.delete(id)
      resolve({ text: `done ${id}`, toolCalls: [], usage: { inputTokens: 100, outputTokens: 10, cost } })
    },
  }
}

async function familyUnderBudget(rt: Awaited<ReturnType<typeof runtime>>, model: ReturnType<typeof gatedModel>) {
  const parent = await rt.spawn({ directive: { name: 'lead', prompt: 'plan' }, limits: { spend: 1 } })
  const first = await rt.spawn({ directive: { name: 'first', prompt: 'a' }, parentId: parent.id, limits: { spend: 0.3 } })
  const second = await rt.spawn({ directive: { name: 'second', prompt: 'b' }, parentId: parent.id, limits: { spend: 0.2 } })
  expect(await eventually(rt, () => [parent, first, second].every((t) => model.waiting(t.id)))).toBe(true)
  return { parent, first, second }
}

describe('rt.budget', () => {
  it('should show what open children hold reserved before they spend', async () => {
    const model = gatedModel()
    const rt = await runtime({ model })
    const { parent } = await familyUnderBudget(rt, model)

    const budget = rt.budget(parent.id)
    expect(budget).toMatchObject({ threadId: parent.id, accountId: parent.id, parentId: null, limit: { spend: 1, tokens: null }, released: false })
    expect(budget.spent.own.spend).toBe(0)
    expect(budget.spent.total.spend).toBe(0)
    expect(budget.reserved.spend).toBeCloseTo(0.5)
    expect(budget.available.spend).toBeCloseTo(0.5)
    expect(budget.available.tokens).toBeNull()
  })

  it('should count a child spend in the total and give back what it did not use once it ends', async () => {
    const model = gatedModel()
    const rt = await runtime({ model })
    const { parent, first, second } = await familyUnderBudget(rt, model)

    model.answer(first.id, 0.1)
    await first.done
    const meanwhile = rt.budget(parent.id)
    expect(meanwhile.spent.own.spend).toBe(0)
    expect(meanwhile.spent.total.spend).toBeCloseTo(0.1)
    expect(meanwhile.reserved.spend).toBeCloseTo(0.2)
    expect(meanwhile.available.spend).toBeCloseTo(1 - 0.1 - 0.2)

    model.answer(second.id, 0.05)
    await second.done
    model.answer(parent.id, 0.02)
    await parent.done
    const after = rt.budget(parent.id)
    expect(after.spent.own.spend).toBeCloseTo(0.02)
    expect(after.spent.total.spend).toBeCloseTo(0.17)
    expect(after.spent.total.tokens).toBe(330)
    expect(after.reserved.spend).toBe(0)
    expect(after.available.spend).toBeCloseTo(1 - 0.17)
    expect(after.released).toBe(true)
    const child = rt.budget(first.id)
    expect(child).toMatchObject({ parentId: parent.id, limit: { spend: 0.3 }, released: true })
    expect(child.spent.own.spend).toBeCloseTo(0.1)
  })

  it('should show an unlimited root that never spawned as unlimited, with what it spent', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: 'hi', usage: { inputTokens: 7, outputTokens: 3, cost: 0.01 } }]) })
    const thread = await rt.spawn({ directive: { name: 'solo', prompt: 'hi' } })
    await thread.done
    const budget = rt.budget(thread.id)
    expect(budget.limit).toEqual({ spend: null, tokens: null })
    expect(budget.available).toEqual({ spend: null, tokens: null })
    expect(budget.spent.own).toEqual({ spend: 0.01, tokens: 10 })
    expect(budget.spent.total).toEqual({ spend: 0.01, tokens: 10 })
    expect(budget.reserved).toEqual({ spend: 0, tokens: 0 })
  })

  it('should show the reservations of open children in a memory-store runtime too', async () => {
    const model = gatedModel()
    const rt = await runtime({ model, store: 'memory' })
    const { parent } = await familyUnderBudget(rt, model)
    expect(rt.budget(parent.id).reserved.spend).toBeCloseTo(0.5)
    expect(rt.children(parent.id)).toHaveLength(2)
  })

  it("should show a follow-up its conversation's one budget, kept under the first thread", async () => {
    const reply = { text: 'ok', usage: { inputTokens: 10, outputTokens: 0, cost: 0.1 } }
    const rt = await runtime({ model: scriptedModel([reply, reply]) })
    const first = await rt.spawn({ directive: { name: 'chat', prompt: 'hi' }, limits: { spend: 1 } })
    await first.done
    const next = await rt.followUp(first.id, 'and then?')
    await next.done
    const budget = rt.budget(next.id)
    expect(budget).toMatchObject({ threadId: next.id, accountId: first.id, limit: { spend: 1 } })
    expect(budget.spent.own.spend).toBeCloseTo(0.2)
    expect(budget.available.spend).toBeCloseTo(0.8)
  })

  it('should refuse an unknown thread with THREAD_NOT_FOUND', async () => {
    const rt = await runtime({ model: scriptedModel([]) })
    expect(() => rt.budget('nobody')).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
    expect(() => rt.children('nobody')).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
  })

  it('should give the same figures from a second runtime on the directory while the first runs the tree', async () => {
    const model = gatedModel()
    const dir = tempDir('budget-view')
    const rt = await runtime({ model, dir })
    const { parent, first } = await familyUnderBudget(rt, model)
    model.answer(first.id, 0.1)
    await first.done

    const other = await createRuntime({ dir, model: scriptedModel([]), recover: false, userConfig: null, shutdownSignals: [], durability: 'process' })
    try {
      expect(other.budget(parent.id)).toEqual(rt.budget(parent.id))
      expect(other.budget(parent.id).reserved.spend).toBeCloseTo(0.2)
      expect(other.children(parent.id)).toEqual(rt.children(parent.id))
    } finally {
      await other.close()
    }
  })
})

describe('rt.children', () => {
  it('should list the direct children in spawn order with their directive, status and cost', async () => {
    const model = gatedModel()
    const rt = await runtime({ model })
    const { parent, first, second } = await familyUnderBudget(rt, model)
    model.answer(first.id, 0.1)
    await first.done

    const children = rt.children(parent.id)
    expect(children.map((c) => [c.id, c.directiveName, c.status])).toEqual([
      [first.id, 'first', 'completed'],
      [second.id, 'second', 'running'],
    ])
    expect(children[0]!.cost).toMatchObject({ spend: 0.1, inputTokens: 100, outputTokens: 10 })
    expect(rt.children(first.id)).toEqual([])
  })
})

describe('retries in view', () => {
  it('should report two retries and the last error category in the view and in done after a model failed twice', async () => {
    const unavailable = { fault: 'http' as const, status: 503, message: 'overloaded' }
    const rt = await runtime({ model: scriptedModel([{ faults: [unavailable, unavailable], reply: { text: 'ok' } }]) })
    const thread = await rt.spawn({ directive: { name: 'flaky', prompt: 'go' } })
    let outcome
    const done = thread.done.then((o) => (outcome = o))
    for (let i = 0; i < 50 && outcome === undefined; i++) await rt.advance(10_000)
    await done

    expect(outcome).toMatchObject({ status: 'completed', retries: 2, lastError: { category: 'transient' } })
    expect(rt.get(thread.id).getSnapshot()).toMatchObject({ retries: 2, lastError: { category: 'transient', message: expect.stringContaining('overloaded') } })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should report no retries and no last error for a thread whose calls all succeeded', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: 'ok' }]) })
    const outcome = await (await rt.spawn({ directive: { name: 'steady', prompt: 'go' } })).done
    expect(outcome).toMatchObject({ retries: 0, lastError: null })
  })
})
