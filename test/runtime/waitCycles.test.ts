/**
 * Waits that wait on each other. A `wait_threads` call that would close a cycle of waits — A waits
 * for B while B waits for A, through any number of threads and continuations — could only end at
 * its timeout: it is refused at once with WAIT_CYCLE naming the cycle, and the other waits go on.
 *
 * Real clock, files and SQLite. A `gate` tool holds each thread until the test opens it, so the
 * waits start in a known order. The wait that should be refused has a short timeout: without the
 * refusal it times out instead (the test then fails on what the thread saw, in 2 s); the waits
 * that should end normally have a long one, so that nothing here depends on how fast it runs.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel, verifyReplay } from '../../src/index.js'
import type { ModelAdapter, ModelRequest, Runtime, ScriptedTurn } from '../../src/index.js'
import { findWaitCycle } from '../../src/thread/waits.js'
import type { WaitGraph, WaitInProgress } from '../../src/thread/waits.js'
import { recordedToolResults, sawOfWait, toolResultsOf } from '../helpers/waits.js'
import { introspect } from '../../src/runtime/introspect.js'

const opened: Runtime[] = []
const dirs: string[] = []
afterEach(async () => {
  while (opened.length) await opened.pop()!.close()
  while (dirs.length) fs.rmSync(dirs.pop()!, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-wait-cycles-'))
  dirs.push(dir)
  return dir
}

/** Holds a thread in a tool call until the test opens its gate. */
function gates() {
  const all = new Map<string, { promise: Promise<void>; open: () => void }>()
  const gate = (name: string) => {
    let found = all.get(name)
    if (!found) {
      let open!: () => void
      const promise = new Promise<void>((resolve) => (open = resolve))
      all.set(name, (found = { promise, open }))
    }
    return found
  }
  const tool = defineTool({
    name: 'gate',
    description: 'waits for the test',
    input: z.object({ name: z.string() }),
    idempotent: true,
    timeoutMs: 600_000,
    execute: async ({ name }) => {
      await gate(name).promise
      return 'open'
    },
  })
  return { tool, open: (name: string) => gate(name).open() }
}

type Handle = Awaited<ReturnType<Runtime['spawn']>>

/** Spawns x, y and z, and lets x start its wait for y, then y its wait for z; z's gate stays shut. */
async function chainOfWaits(rt: Runtime, gate: ReturnType<typeof gates>): Promise<[Handle, Handle, Handle]> {
  const [x, y, z] = (await Promise.all(['x', 'y', 'z'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))) as [Handle, Handle, Handle]
  gate.open('x')
  await until(() => graph(rt)[x.id] !== undefined, 'x waits')
  gate.open('y')
  await until(() => graph(rt)[y.id] !== undefined, 'y waits')
  expect(graph(rt)).toEqual({ [x.id]: [y.id], [y.id]: [z.id] })
  return [x, y, z]
}

async function runtime(model: ModelAdapter, gate: ReturnType<typeof gates>, dir = tempDir()): Promise<Runtime> {
  const rt = await createRuntime({ dir, model, tools: [gate.tool], durability: 'process', userConfig: null })
  opened.push(rt)
  return rt
}

/** The runtime's wait-for graph: waiting thread → the threads it still waits for. */
function graph(rt: Runtime): Record<string, string[]> {
  return introspect(rt).waitGraph()
}

/** Polls `condition` for up to `ms` of wall-clock time (a bound for a stuck test, not a speed check). */
async function until(condition: () => boolean, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

function idOf(rt: Runtime, name: string): string {
  const found = rt.list().find((r) => r.directiveName === name)
  if (!found) throw new Error(`no thread ${name} yet`)
  return found.id
}

/** gate → wait for `targets()` → reply with what the wait gave. */
function gatedWaiter(r: ModelRequest, targets: () => string[], timeoutSeconds: number, firstTurn = 1, failFast = false): ScriptedTurn {
  if (r.turn === firstTurn) return { toolCalls: [{ name: 'gate', input: { name: r.directiveName } }] }
  if (r.turn === firstTurn + 1) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: targets(), timeoutSeconds, ...(failFast ? { failFast } : {}) } }] }
  return { text: sawOfWait(r.messages) }
}

describe('a wait that would close a cycle of waits', () => {
  it('should refuse the second of two siblings waiting on each other at once, naming both, and let the first wait end', async () => {
    const gate = gates()
    let rt!: Runtime
    const model = scriptedModel((r) => {
      if (r.directiveName === 'lead') {
        if (r.turn === 1) return { toolCalls: ['alpha', 'beta'].map((name) => ({ name: 'spawn_thread', input: { name, prompt: name } })) }
        if (r.turn === 2) {
          const kids = toolResultsOf(r.messages, 'spawn_thread').map((x) => x.threadId as string)
          return { toolCalls: [{ name: 'wait_threads', input: { threadIds: kids, timeoutSeconds: 60 } }] }
        }
        return { text: 'lead done' }
      }
      if (r.directiveName === 'alpha') return gatedWaiter(r, () => [idOf(rt, 'beta')], 60)
      return gatedWaiter(r, () => [idOf(rt, 'alpha')], 2)
    })
    rt = await runtime(model, gate)
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'p' } })
    await until(() => rt.list().filter((r) => r.parentId === lead.id).length === 2, 'both children exist')
    const alpha = idOf(rt, 'alpha')
    const beta = idOf(rt, 'beta')
    gate.open('alpha')
    await until(() => graph(rt)[alpha] !== undefined && graph(rt)[lead.id] !== undefined, 'alpha and lead wait')
    expect(graph(rt)).toEqual({ [lead.id]: [alpha, beta].sort(), [alpha]: [beta] })
    gate.open('beta')

    expect(await lead.done).toMatchObject({ status: 'completed', result: 'lead done' })
    const refused = recordedToolResults(rt.dir, beta, 'wait_threads')
    expect(refused).toEqual([
      {
        ok: false,
        output: expect.objectContaining({ error: 'WAIT_CYCLE', threadId: beta, waitedOn: alpha, cycle: [beta, alpha], message: expect.stringContaining(`${beta} → ${alpha} → ${beta}`) }),
      },
    ])
    // The refused thread's loop went on; the wait it would have deadlocked ended when it completed.
    expect(await rt.get(beta).done).toMatchObject({ status: 'completed', result: 'refused WAIT_CYCLE' })
    expect(await rt.get(alpha).done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(recordedToolResults(rt.dir, alpha, 'wait_threads')[0]!.output).toMatchObject({ settled: [{ threadId: beta, status: 'completed' }], timedOut: false })
    expect(graph(rt)).toEqual({})
    for (const id of [lead.id, alpha, beta]) expect(verifyReplay(rt.dir, id).matches).toBe(true)
  })

  it('should refuse the wait that closes a cycle of three threads, naming them in wait order', async () => {
    const gate = gates()
    let rt!: Runtime
    const next = { x: 'y', y: 'z', z: 'x' } as Record<string, string>
    const model = scriptedModel((r) => gatedWaiter(r, () => [idOf(rt, next[r.directiveName]!)], r.directiveName === 'z' ? 2 : 60))
    rt = await runtime(model, gate)
    const [x, y, z] = await chainOfWaits(rt, gate)
    gate.open('z')

    expect(await z.done).toMatchObject({ status: 'completed', result: 'refused WAIT_CYCLE' })
    expect(recordedToolResults(rt.dir, z.id, 'wait_threads')[0]!.output).toMatchObject({
      error: 'WAIT_CYCLE',
      cycle: [z.id, x.id, y.id],
      message: expect.stringContaining(`${z.id} → ${x.id} → ${y.id} → ${z.id}`),
    })
    expect(await y.done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(await x.done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(graph(rt)).toEqual({})
  })

  it('should see a cycle through a continuation: a wait for a thread that continued is a wait for its successor', async () => {
    // pred fills the context window on its first turn and continues into a successor, which then
    // waits for other; other asks to wait for pred (the chain), that is for the successor.
    const gate = gates()
    let rt!: Runtime
    const model = Object.assign(
      scriptedModel((r) => {
        if (r.directiveName === 'pred') {
          if (r.turn === 1) return { toolCalls: [{ name: 'gate', input: { name: 'first' } }], usage: { inputTokens: 950, outputTokens: 10 } }
          return gatedWaiter(r, () => [idOf(rt, 'other')], 60, 2)
        }
        return gatedWaiter(r, () => [rt.list().find((t) => t.directiveName === 'pred' && t.previousThreadId === null)!.id], 2)
      }),
      { contextWindow: 1000 },
    )
    rt = await runtime(model, gate)
    const pred = await rt.spawn({ directive: { name: 'pred', prompt: 'p' } })
    const other = await rt.spawn({ directive: { name: 'other', prompt: 'p' } })
    gate.open('first')
    expect(await pred.done).toMatchObject({ status: 'continued' })
    const successor = (await pred.done).nextThreadId!
    gate.open('pred')
    await until(() => graph(rt)[successor] !== undefined, 'the successor waits')
    gate.open('other')

    expect(await other.done).toMatchObject({ status: 'completed', result: 'refused WAIT_CYCLE' })
    expect(recordedToolResults(rt.dir, other.id, 'wait_threads')[0]!.output).toMatchObject({
      error: 'WAIT_CYCLE',
      waitedOn: pred.id,
      cycle: [other.id, successor],
      message: expect.stringContaining(`${other.id} waits for ${pred.id} (continued as ${successor})`),
    })
    expect(await rt.get(successor).done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(graph(rt)).toEqual({})
  })

  it('should refuse a wait run again after a restart that closes a cycle with another recovered wait', async () => {
    // x waits for y while y is held at its gate; the process stops (close: the checkpoints stay,
    // as after a kill -9). The next one runs x's wait again — it is back in the graph — and y's
    // wait for x, once y goes on, is refused.
    const dir = tempDir()
    let rt!: Runtime
    const script = (r: ModelRequest) =>
      r.directiveName === 'x' ? gatedWaiter(r, () => [idOf(rt, 'y')], 60) : gatedWaiter(r, () => [idOf(rt, 'x')], 2)
    const firstGates = gates()
    rt = await runtime(scriptedModel(script), firstGates, dir)
    const x = await rt.spawn({ directive: { name: 'x', prompt: 'p' } })
    const y = await rt.spawn({ directive: { name: 'y', prompt: 'p' } })
    firstGates.open('x')
    await until(() => graph(rt)[x.id] !== undefined, 'x waits')
    await rt.close()
    expect(graph(rt)).toEqual({})

    const secondGates = gates()
    rt = await runtime(scriptedModel(script), secondGates, dir)
    expect(rt.lastRecovery.resumed).toEqual(expect.arrayContaining([x.id, y.id]))
    await until(() => graph(rt)[x.id] !== undefined, 'x waits again')
    secondGates.open('y')

    expect(await rt.get(y.id).done).toMatchObject({ status: 'completed', result: 'refused WAIT_CYCLE' })
    expect(recordedToolResults(rt.dir, y.id, 'wait_threads')[0]!.output).toMatchObject({ error: 'WAIT_CYCLE', cycle: [y.id, x.id] })
    expect(await rt.get(x.id).done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(graph(rt)).toEqual({})
  })
})

describe('waits that can end', () => {
  it('should let a chain of waits through (x waits for y, y for z) and end them as z completes', async () => {
    const gate = gates()
    let rt!: Runtime
    const model = scriptedModel((r) => {
      if (r.directiveName === 'z') return r.turn === 1 ? { toolCalls: [{ name: 'gate', input: { name: 'z' } }] } : { text: 'z done' }
      return gatedWaiter(r, () => [idOf(rt, r.directiveName === 'x' ? 'y' : 'z')], 60)
    })
    rt = await runtime(model, gate)
    const [x, y, z] = await chainOfWaits(rt, gate)
    gate.open('z')

    expect(await x.done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(await y.done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(await z.done).toMatchObject({ status: 'completed', result: 'z done' })
    expect(graph(rt)).toEqual({})
  })

  it("should let through a wait for threads that wait for the waiter's parent or for its child", async () => {
    // kid waits for up (which waits for lead, kid's parent) and for down (which waits for gk, kid's
    // own child). Neither is a cycle: lead completes without waiting for kid, and gk cannot wait
    // for its ancestors; so each of those waits can end, and kid's with them.
    const gate = gates()
    let rt!: Runtime
    const model = scriptedModel((r) => {
      switch (r.directiveName) {
        case 'lead':
          if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'k' } }] }
          if (r.turn === 2) return { toolCalls: [{ name: 'gate', input: { name: 'lead' } }] }
          return { text: 'lead done' }
        case 'kid':
          if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'gk', prompt: 'g' } }] }
          return gatedWaiter(r, () => [idOf(rt, 'up'), idOf(rt, 'down')], 60, 2)
        case 'gk':
          return r.turn === 1 ? { toolCalls: [{ name: 'gate', input: { name: 'gk' } }] } : { text: 'gk done' }
        case 'up':
          return gatedWaiter(r, () => [idOf(rt, 'lead')], 60)
        default:
          return gatedWaiter(r, () => [idOf(rt, 'gk')], 60)
      }
    })
    rt = await runtime(model, gate)
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'p' } })
    const up = await rt.spawn({ directive: { name: 'up', prompt: 'p' } })
    const down = await rt.spawn({ directive: { name: 'down', prompt: 'p' } })
    await until(() => rt.list().some((r) => r.directiveName === 'gk'), 'gk exists')
    const kid = idOf(rt, 'kid')
    const gk = idOf(rt, 'gk')
    gate.open('up')
    gate.open('down')
    await until(() => graph(rt)[up.id] !== undefined && graph(rt)[down.id] !== undefined, 'up and down wait')
    gate.open('kid')
    await until(() => graph(rt)[kid] !== undefined, 'kid waits')
    expect(graph(rt)).toEqual({ [up.id]: [lead.id], [down.id]: [gk], [kid]: [up.id, down.id].sort() })
    gate.open('lead')
    gate.open('gk')

    expect(await rt.get(kid).done).toMatchObject({ status: 'completed', result: 'settled completed,completed' })
    expect(await up.done).toMatchObject({ result: 'settled completed' })
    expect(await down.done).toMatchObject({ result: 'settled completed' })
    expect(await lead.done).toMatchObject({ status: 'completed' })
    expect(graph(rt)).toEqual({})
  })

  it('should take a wait out of the graph however it ends: by its timeout, by a cancel of the waiter, by a close', async () => {
    const gate = gates()
    let rt!: Runtime
    const model = scriptedModel((r) => (r.directiveName === 'held' ? { toolCalls: [{ name: 'gate', input: { name: 'held' } }] } : gatedWaiter(r, () => [idOf(rt, 'held')], r.directiveName === 'brief' ? 1 : 60)))
    rt = await runtime(model, gate)
    const held = await rt.spawn({ directive: { name: 'held', prompt: 'p' } })
    const waiters = await Promise.all(['brief', 'cancelled', 'open'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))
    for (const name of ['brief', 'cancelled', 'open']) gate.open(name)
    const [brief, cancelled, left] = waiters
    await until(() => Object.keys(graph(rt)).length === 3, 'all three wait')
    expect(graph(rt)).toEqual({ [brief!.id]: [held.id], [cancelled!.id]: [held.id], [left!.id]: [held.id] })

    expect(await brief!.done).toMatchObject({ status: 'completed', result: 'timed out' })
    expect(graph(rt)).toEqual({ [cancelled!.id]: [held.id], [left!.id]: [held.id] })
    expect(await rt.cancel(cancelled!.id, 'stop waiting')).toMatchObject({ status: 'cancelled' })
    await until(() => graph(rt)[cancelled!.id] === undefined, 'the cancelled wait has left the graph')
    expect(graph(rt)).toEqual({ [left!.id]: [held.id] })
    await rt.close()
    expect(graph(rt)).toEqual({})
  })
})

describe("a fail-fast wait whose way out closes", () => {
  it('should end the wait with WAIT_CYCLE when the last thread that could have failed completes, and let the cycle unwind', async () => {
    const gate = gates()
    let rt!: Runtime
    const model = scriptedModel((r) => {
      // x waits fail-fast for y and z; y waits for x. Let through: z may fail, which ends x's wait.
      if (r.directiveName === 'x') return gatedWaiter(r, () => [idOf(rt, 'y'), idOf(rt, 'z')], 20, 1, true)
      if (r.directiveName === 'y') return gatedWaiter(r, () => [idOf(rt, 'x')], 60)
      return r.turn === 1 ? { toolCalls: [{ name: 'gate', input: { name: 'z' } }] } : { text: 'z done' }
    })
    rt = await runtime(model, gate)
    const [x, y, z] = (await Promise.all(['x', 'y', 'z'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))) as [Handle, Handle, Handle]
    gate.open('x')
    await until(() => graph(rt)[x.id] !== undefined, 'x waits')
    gate.open('y')
    await until(() => graph(rt)[y.id] !== undefined, 'y waits')
    expect(graph(rt)).toEqual({ [x.id]: [y.id, z.id].sort(), [y.id]: [x.id] })

    // z completes without failing: x's wait could now only end at its timeout (20 s).
    gate.open('z')
    expect(await z.done).toMatchObject({ status: 'completed' })
    expect(await x.done).toMatchObject({ status: 'completed', result: 'cycle WAIT_CYCLE' })
    const [ended] = recordedToolResults(rt.dir, x.id, 'wait_threads')
    expect(ended).toEqual({
      ok: true,
      output: expect.objectContaining({
        settled: [expect.objectContaining({ threadId: z.id, status: 'completed', result: 'z done' })],
        pending: [y.id],
        timedOut: false,
        cycle: { code: 'WAIT_CYCLE', cycle: [x.id, y.id], message: expect.stringContaining(`${z.id} completed without failing`) },
      }),
    })
    expect(ended!.output.cycle.message).toContain(`${x.id} → ${y.id} → ${x.id}`)
    // The other wait of the cycle goes on, and ends as x completes.
    expect(await y.done).toMatchObject({ status: 'completed', result: 'settled completed' })
    expect(graph(rt)).toEqual({})
    for (const id of [x.id, y.id, z.id]) expect(verifyReplay(rt.dir, id).matches).toBe(true)
  })

  it('should leave a fail-fast wait alone while a thread it waits for can still fail', async () => {
    const gate = gates()
    let rt!: Runtime
    const model = scriptedModel((r) => {
      // x waits fail-fast for y, z and w; y waits for x. z completes; w, still running, is a way out.
      if (r.directiveName === 'x') return gatedWaiter(r, () => ['y', 'z', 'w'].map((n) => idOf(rt, n)), 60, 1, true)
      if (r.directiveName === 'y') return gatedWaiter(r, () => [idOf(rt, 'x')], 60)
      if (r.directiveName === 'w' && r.turn === 2) throw Object.assign(new Error('w broke'), { status: 400 })
      return r.turn === 1 ? { toolCalls: [{ name: 'gate', input: { name: r.directiveName } }] } : { text: `${r.directiveName} done` }
    })
    rt = await runtime(model, gate)
    const [x, y, z, w] = (await Promise.all(['x', 'y', 'z', 'w'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))) as Handle[]
    gate.open('x')
    await until(() => graph(rt)[x!.id] !== undefined, 'x waits')
    gate.open('y')
    await until(() => graph(rt)[y!.id] !== undefined, 'y waits')
    gate.open('z')
    expect(await z!.done).toMatchObject({ status: 'completed' })
    await until(() => graph(rt)[x!.id]?.length === 2, "z has left x's wait")
    expect(graph(rt)).toEqual({ [x!.id]: [y!.id, w!.id].sort(), [y!.id]: [x!.id] })
    // w fails: that is the way out x's wait was let through for.
    gate.open('w')
    expect(await w!.done).toMatchObject({ status: 'error' })
    expect(await x!.done).toMatchObject({ status: 'completed', result: 'settled completed,error' })
    expect(recordedToolResults(rt.dir, x!.id, 'wait_threads')[0]!.output).not.toHaveProperty('cycle')
    expect(await y!.done).toMatchObject({ status: 'completed', result: 'settled completed' })
  })
})

describe('findWaitCycle', () => {
  const waits = (edges: Record<string, Array<string[] | { open: string[]; failFast: boolean }>>) =>
    new Map(
      Object.entries(edges).map(([id, list]) => [
        id,
        new Set(list.map((w) => (Array.isArray(w) ? { open: new Set(w), failFast: false } : { open: new Set(w.open), failFast: w.failFast }))),
      ]),
    )
  const graphOf = (
    edges: Record<string, Array<string[] | { open: string[]; failFast: boolean }>>,
    options: { tails?: Record<string, string>; stopped?: string[] } = {},
  ): WaitGraph => ({
    waits: waits(edges),
    tail: (id) => options.tails?.[id] ?? id,
    stopped: (id) => options.stopped?.includes(id) ?? false,
  })
  const ids = (found: ReturnType<typeof findWaitCycle>) => found && { cycle: found.cycle.map((h) => h.thread), path: found.path.map((h) => h.thread) }

  it('should look nothing up when no other thread waits', () => {
    const graph: WaitGraph = { waits: waits({ a: [['b']] }), tail: () => { throw new Error('looked up') }, stopped: () => { throw new Error('looked up') } }
    expect(findWaitCycle('a', ['b'], false, graph)).toBeNull()
  })

  it("should not refuse a wait run again because of the waiter's own wait still in the graph", () => {
    expect(findWaitCycle('a', ['b'], false, graphOf({ a: [['b']], b: [['c']] }))).toBeNull()
  })

  it('should let a cycle through while a fail-fast wait in it has a way out, and refuse it when it has none', () => {
    // a waits fail-fast for b and c; c runs free and may fail, which ends a's wait.
    expect(findWaitCycle('b', ['a'], false, graphOf({ a: [{ open: ['b', 'c'], failFast: true }] }))).toBeNull()
    expect(ids(findWaitCycle('b', ['a'], false, graphOf({ a: [['b', 'c']] })))).toEqual({ cycle: ['b', 'a'], path: [] })
    // The new wait fail-fast: d still running is a way out; d already settled is not.
    expect(findWaitCycle('b', ['a', 'd'], true, graphOf({ a: [['b']] }))).toBeNull()
    expect(ids(findWaitCycle('b', ['a', 'd'], true, graphOf({ a: [['b']] }, { stopped: ['d'] })))).toEqual({ cycle: ['b', 'a'], path: [] })
  })

  it("should not count a thread that settled without failing as a way out of another process's fail-fast wait", () => {
    // Another process records a wait as asked: c, which completed since, is still named in it.
    expect(ids(findWaitCycle('b', ['a'], false, graphOf({ a: [{ open: ['b', 'c'], failFast: true }] }, { stopped: ['c'] })))).toEqual({ cycle: ['b', 'a'], path: [] })
    // Through a thread between: e's fail-fast wait had c as its way out.
    expect(ids(findWaitCycle('b', ['e'], false, graphOf({ e: [{ open: ['a', 'c'], failFast: true }], a: [['b']] }, { stopped: ['c'] })))).toEqual({
      cycle: ['b', 'e', 'a'],
      path: [],
    })
    expect(findWaitCycle('b', ['e'], false, graphOf({ e: [{ open: ['a', 'c'], failFast: true }], a: [['b']] }))).toBeNull()
  })

  it('should follow continuations of the threads a wait in progress waits for', () => {
    const found = findWaitCycle('b1', ['a'], false, graphOf({ a: [['b0']] }, { tails: { b0: 'b1' } }))
    expect(found?.cycle).toEqual([
      { thread: 'b1', waitsFor: 'a', tail: 'a' },
      { thread: 'a', waitsFor: 'b0', tail: 'b1' },
    ])
  })

  it('should follow a long chain of waits to its end, and count a wait whose threads have all settled as ending', () => {
    const chain: Record<string, string[][]> = {}
    for (let i = 0; i < 2000; i++) chain[`t${i}`] = [[`t${i + 1}`]]
    expect(findWaitCycle('w', ['t0'], false, graphOf(chain))).toBeNull()
    expect(findWaitCycle('w', ['t0'], false, graphOf({ ...chain, t2000: [[]] }))).toBeNull()
    const closed = findWaitCycle('w', ['t0'], false, graphOf({ ...chain, t2000: [['w']] }))
    expect(closed?.cycle.map((hop) => hop.thread)).toEqual(['w', ...Array.from({ length: 2001 }, (_, i) => `t${i}`)])
  })

  it('should refuse a wait for threads stuck in a cycle the waiter is not part of, naming the way there', () => {
    expect(ids(findWaitCycle('a', ['b'], false, graphOf({ b: [['c']], c: [['d']], d: [['c']] })))).toEqual({ cycle: ['c', 'd'], path: ['a', 'b'] })
  })
})
