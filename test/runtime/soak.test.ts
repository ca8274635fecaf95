/**
 * A host runs one runtime for months: every thread that ends must leave nothing behind in the
 * process — no entry in the runtime's per-thread collections, no open file descriptor, no timer.
 * (`npm run soak` measures the same over thousands of threads; these tests pin what it found.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { commandTool, createRuntime, defineTool, requestCancel, scriptedModel } from '../../src/index.js'
import type { ModelAdapter, Runtime, RuntimeOptions } from '../../src/index.js'
import { introspect } from '../../src/runtime/introspect.js'

const open: Array<{ rt: Runtime; dir: string }> = []
afterEach(async () => {
  while (open.length) {
    const { rt, dir } = open.pop()!
    await rt.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

async function runtime(options: Omit<RuntimeOptions, 'dir'>): Promise<Runtime> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-soak-'))
  const rt = await createRuntime({ durability: 'process', userConfig: null, ...options, dir })
  open.push({ rt, dir })
  return rt
}

/**
 * Every entry of the runtime's parts' Maps, Sets and arrays that names one of `ids` (as a key, or
 * as a string value), by part and field: what a finished thread left behind.
 */
function heldFor(rt: Runtime, ids: readonly string[]): Record<string, string[]> {
  return introspect(rt).retained(ids)
}

function fdCount(): number {
  return fs.readdirSync('/proc/self/fd').length
}

async function durable(rt: Runtime): Promise<void> {
  await introspect(rt).whenDurable()
}

const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n }) })

describe('threads that ended leave nothing in the runtime', () => {
  it('should forget the budget account of a continuation chain once the chain has ended', async () => {
    // The first thread fills the context window; its successor spends from the chain's account
    // (the first thread's), which the runtime looked up and cached under the first thread's id.
    const model: ModelAdapter = {
      ...scriptedModel((r) => {
        if (r.messages[0]!.content === 'fill' && r.turn === 1) {
          return { toolCalls: [{ name: 'echo', input: { n: 1 } }], usage: { inputTokens: 950, outputTokens: 10, cost: 0.001 } }
        }
        return r.turn < 4
          ? { toolCalls: [{ name: 'echo', input: { n: r.turn } }], usage: { inputTokens: 10, outputTokens: 10, cost: 0.001 } }
          : { text: 'done', usage: { inputTokens: 10, outputTokens: 10, cost: 0.001 } }
      }),
      contextWindow: 1000,
    }
    const rt = await runtime({ model, tools: [echo] })
    const ids: string[] = []
    for (let i = 0; i < 5; i++) {
      const first = await rt.spawn({ directive: { name: 'chain', prompt: 'fill' }, limits: { spend: 1, tokens: 1_000_000 } })
      expect((await first.done).status).toBe('continued')
      const chain = rt.chain(first.id)
      expect(chain).toHaveLength(2)
      expect((await rt.waitThreads([first.id])).settled[0]!.status).toBe('completed')
      ids.push(...chain.map((r) => r.id))
    }
    await durable(rt)
    expect(rt.stats().live).toBe(0)
    expect(heldFor(rt, ids)).toEqual({})
  })

  it('should hold nothing for threads that completed, failed, were cancelled, denied or approved', async () => {
    const model = scriptedModel((r) => {
      if (r.directiveName === 'fail') return { faults: [{ fault: 'http', status: 400 }], reply: { text: 'never' } }
      if (r.directiveName === 'hang') return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
      return r.turn === 1 ? { toolCalls: [{ name: 'echo', input: { n: 1 } }] } : { text: 'done' }
    })
    const rt = await runtime({ model, tools: [echo] })
    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      const done = await rt.spawn({ directive: { name: 'ok', prompt: 'p' }, limits: { spend: 1 } })
      const failed = await rt.spawn({ directive: { name: 'fail', prompt: 'p' } })
      const hung = await rt.spawn({ directive: { name: 'hang', prompt: 'p' } })
      const approved = await rt.spawn({ directive: { name: 'ok', prompt: 'p' }, limits: { turns: 1, spend: 1 } })
      const denied = await rt.spawn({ directive: { name: 'ok', prompt: 'p' }, limits: { turns: 1, spend: 1 } })
      const kid = await rt.spawn({ directive: { name: 'ok', prompt: 'kid' }, parentId: hung.id })
      ids.push(done.id, failed.id, hung.id, approved.id, denied.id, kid.id)
      expect((await done.done).status).toBe('completed')
      expect((await failed.done).status).toBe('error')
      expect((await rt.waitThreads([kid.id])).settled[0]!.status).toBe('completed')
      await rt.cancel(hung.id, 'stop')
      expect((await hung.done).status).toBe('cancelled')
      expect((await approved.done).status).toBe('suspended')
      expect((await (await rt.approve(approved.id, { limits: { turns: 5 } })).done).status).toBe('completed')
      expect((await denied.done).status).toBe('suspended')
      expect((await rt.deny(denied.id, 'no')).status).toBe('cancelled')
    }
    await durable(rt)
    expect(rt.stats().live).toBe(0)
    expect(heldFor(rt, ids)).toEqual({})
  })

  it('should leave no file descriptor, timer or handle behind after process tools, retries and cancel files', async () => {
    const proc = commandTool({ name: 'proc', description: 'runs true', input: z.object({}), idempotent: true, command: () => ({ command: 'true', args: [] }) })
    const model = scriptedModel((r) => {
      if (r.directiveName === 'hang') return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
      if (r.directiveName === 'retry') return { faults: [{ fault: 'http', status: 429, headers: { 'retry-after-ms': '1' } }], reply: { text: 'after 429' } }
      return r.turn === 1 ? { toolCalls: [{ name: 'proc', input: {} }] } : { text: 'ran' }
    })
    const rt = await runtime({ model, tools: [proc], durability: 'fsync', retry: { baseMs: 1, capMs: 5 } })
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
    // One of each first: the runtime opens its journal and request log once, on first use.
    const warm = await rt.spawn({ directive: { name: 'proc', prompt: 'p' } })
    const warmHung = await rt.spawn({ directive: { name: 'hang', prompt: 'p' } })
    requestCancel(rt.dir, warmHung.id, { reason: 'by file' })
    await rt.checkRequests()
    await Promise.all([warm.done, warmHung.done])
    await durable(rt)
    await durable(rt)
    const fdsBefore = fdCount()
    const timersBefore = timers()
    const ids: string[] = []
    for (let i = 0; i < 3; i++) {
      const ran = await rt.spawn({ directive: { name: 'proc', prompt: 'p' } })
      const retried = await rt.spawn({ directive: { name: 'retry', prompt: 'p' } })
      const hung = await rt.spawn({ directive: { name: 'hang', prompt: 'p' } })
      ids.push(ran.id, retried.id, hung.id)
      requestCancel(rt.dir, hung.id, { reason: 'by file' })
      await rt.checkRequests()
      expect((await ran.done).status).toBe('completed')
      expect((await retried.done).status).toBe('completed')
      expect((await hung.done).status).toBe('cancelled')
    }
    // A stopped thread keeps its transcript open until a checkpoint round has fdatasynced it.
    await durable(rt)
    await durable(rt)
    expect(heldFor(rt, ids)).toEqual({})
    // A descriptor under an fdatasync on the threadpool when its thread closed is closed as that
    // ends, a moment later: a leak is one that stays.
    for (let i = 0; i < 100 && fdCount() !== fdsBefore; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(fdCount()).toBe(fdsBefore)
    expect(timers()).toBeLessThanOrEqual(timersBefore)
  })
})
