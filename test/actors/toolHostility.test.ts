/**
 * executeToolCall against careless and hostile tools: whatever a tool, its schema or its result do,
 * the call settles with an outcome for the model — it never throws — and what the model gets is
 * what the transcript records.
 */
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { MAX_TOOL_OUTPUT_CHARS, defineTool, executeToolCall } from '../../actors/tools.js'
import type { Tool, ToolSpec } from '../../actors/tools.js'
import { childTools } from '../../src/thread/childTools.js'

const context = () => ({ signal: new AbortController().signal, idempotencyKey: 't:1:c1', threadId: 't' })

function run<S extends z.ZodType>(spec: Omit<ToolSpec<S>, 'name' | 'description'>, input: unknown = {}, defaultTimeoutMs = 10_000) {
  const tool = defineTool({ name: 'hostile', description: 'Misbehaves', ...spec } as ToolSpec<S>)
  const tools = new Map<string, Tool>([[tool.name, tool as Tool]])
  return executeToolCall(tools, { id: 'c1', name: 'hostile', input }, context(), defaultTimeoutMs)
}

describe('a tool that throws something that is not an Error', () => {
  const hostile: Array<[string, () => unknown]> = [
    ['an object without a prototype', () => Object.create(null)],
    ['an Error whose message getter throws', () => Object.create(Error.prototype, { message: { get: () => { throw new Error('getter') } } })],
    ['a Proxy whose every trap throws', () => new Proxy({}, { get: () => { throw new Error('trap') }, getPrototypeOf: () => { throw new Error('trap') } })],
    ['an object whose toString throws', () => ({ toString: () => { throw new Error('toString') } })],
  ]
  for (const [what, value] of hostile) {
    it(`gives the model TOOL_FAILED for ${what}, without throwing`, async () => {
      const outcome = await run({ input: z.object({}), execute: () => { throw value() } })
      expect(outcome).toEqual({ ok: false, output: { error: 'TOOL_FAILED', message: expect.stringContaining('Tool "hostile" failed') } })
    })
  }

  it('quotes a string, undefined and a huge message, the last one cut short', async () => {
    expect((await run({ input: z.object({}), execute: () => { throw 'boom' } })).output).toMatchObject({ message: 'Tool "hostile" failed: boom' })
    expect((await run({ input: z.object({}), execute: () => Promise.reject(undefined) })).output).toMatchObject({ error: 'TOOL_FAILED' })
    const huge = await run({ input: z.object({}), execute: () => { throw new Error('x'.repeat(10_000_000)) } })
    expect(huge.output).toMatchObject({ error: 'TOOL_FAILED', message: expect.stringMatching(/more characters not shown\]$/) })
    expect((huge.output as { message: string }).message.length).toBeLessThan(100_000)
  })
})

describe('a tool whose schema throws while checking the input', () => {
  // A bug in the tool's own code outside execute: rethrown, so the thread crashes for its supervisor.
  it('rethrows what a refinement threw, and does not run the tool', async () => {
    let ran = false
    const thrown = new TypeError('refinement broke')
    const outcome = run({ input: z.object({ a: z.string().refine(() => { throw thrown }) }), execute: () => (ran = true) }, { a: 'x' })
    await expect(outcome).rejects.toBe(thrown)
    expect(ran).toBe(false)
  })

  it('rethrows an Error describing it when a refinement throws a value describeError cannot read', async () => {
    const outcome = run({ input: z.object({}).superRefine(() => { throw Object.create(null) }), execute: () => 1 })
    await expect(outcome).rejects.toThrow(/input schema of tool "hostile" threw a thrown object that cannot be described/)
  })

  it('runs a schema with an async refinement', async () => {
    const outcome = await run({ input: z.object({ a: z.string().refine(async (a) => a === 'ok') }), execute: ({ a }: { a: string }) => ({ a }) }, { a: 'ok' })
    expect(outcome).toEqual({ ok: true, output: { a: 'ok' } })
    const refused = await run({ input: z.object({ a: z.string().refine(async (a) => a === 'ok') }), execute: () => 1 }, { a: 'no' })
    expect(refused.output).toMatchObject({ error: 'TOOL_INPUT_INVALID' })
  })
})

describe('a tool whose result has no faithful JSON form', () => {
  for (const [what, value] of [
    ['a function', () => 1],
    ['a symbol', Symbol('s')],
    ['an object whose toJSON returns undefined', { toJSON: () => undefined }],
  ] as Array<[string, unknown]>) {
    it(`gives TOOL_OUTPUT_INVALID for ${what} instead of a result that records as nothing`, async () => {
      const outcome = await run({ input: z.object({}), execute: () => value })
      expect(outcome).toEqual({ ok: false, output: { error: 'TOOL_OUTPUT_INVALID', message: expect.stringContaining('no JSON form') } })
    })
  }

  it('gives TOOL_OUTPUT_INVALID when toJSON throws a value without a prototype', async () => {
    const outcome = await run({ input: z.object({}), execute: () => ({ toJSON: () => { throw Object.create(null) } }) })
    expect(outcome.output).toMatchObject({ error: 'TOOL_OUTPUT_INVALID' })
  })

  it('hands on the JSON form, so the model sees now what the transcript gives back later', async () => {
    let reads = 0
    const outcome = await run({
      input: z.object({}),
      execute: () => ({ get n() { return ++reads }, when: new Date(0), map: new Map([[1, 2]]), skip: undefined, f: () => 1 }),
    })
    expect(outcome).toEqual({ ok: true, output: { n: 1, when: '1970-01-01T00:00:00.000Z', map: {} } })
    expect(JSON.stringify(outcome.output)).toBe('{"n":1,"when":"1970-01-01T00:00:00.000Z","map":{}}')
  })

  it(`refuses a result of more than ${MAX_TOOL_OUTPUT_CHARS} characters of JSON with TOOL_OUTPUT_TOO_LARGE`, async () => {
    const outcome = await run({ input: z.object({}), execute: () => 'x'.repeat(100 * 1024 * 1024) })
    expect(outcome.ok).toBe(false)
    expect(outcome.output).toMatchObject({ error: 'TOOL_OUTPUT_TOO_LARGE', message: expect.stringContaining('104857602 characters') })
    const fits = await run({ input: z.object({}), execute: () => 'y'.repeat(MAX_TOOL_OUTPUT_CHARS - 2) })
    expect(fits.ok).toBe(true)
  })
})

describe('tool timeouts', () => {
  it('does not time a tool out at once when its timeout is beyond a timer range (over 24.8 days)', async () => {
    const outcome = await run({ input: z.object({}), timeoutMs: 3_000_000_000, execute: () => new Promise((r) => setTimeout(() => r('finished'), 50)) })
    expect(outcome).toEqual({ ok: true, output: 'finished' })
  })

  it('does not time a tool out at once when the runtime default is beyond a timer range', async () => {
    const outcome = await run({ input: z.object({}), execute: () => new Promise((r) => setTimeout(() => r('finished'), 50)) }, {}, 5_000_000_000)
    expect(outcome).toEqual({ ok: true, output: 'finished' })
  })

  it('refuses a timeout of 0, negative, NaN or -Infinity when the tool is defined', () => {
    for (const timeoutMs of [0, -1, Number.NaN, Number.NEGATIVE_INFINITY, '5' as unknown as number]) {
      expect(() => defineTool({ name: 't', description: 'd', input: z.object({}), timeoutMs, execute: () => 1 })).toThrow(/timeoutMs/)
    }
  })

  it('never times out a tool defined with timeoutMs Infinity, whatever the runtime default', async () => {
    const slow = () => new Promise((r) => setTimeout(() => r('finished'), 100))
    expect(await run({ input: z.object({}), timeoutMs: Infinity, execute: slow }, {}, 10)).toEqual({ ok: true, output: 'finished' })
    // The same tool with the default: the 10 ms default applies.
    expect((await run({ input: z.object({}), execute: slow }, {}, 10)).output).toMatchObject({ error: 'TOOL_TIMEOUT' })
  })

  it('gives wait_threads no tool timeout: its wait keeps its own, so one of months is not cut at 24.8 days', () => {
    const host = { spawnChild: () => Promise.reject(new Error('unused')), waitThreads: () => Promise.reject(new Error('unused')) }
    expect(childTools(host).find((t) => t.name === 'wait_threads')!.timeoutMs).toBe(Infinity)
  })

  it('stops waiting for a tool that ignores its signal and never settles, and handles its rejection after the timeout', async () => {
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown): void => void unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    try {
      let rejectLate: (error: unknown) => void = () => {}
      const outcome = await run({ input: z.object({}), timeoutMs: 50, execute: () => new Promise((_, reject) => (rejectLate = reject)) })
      expect(outcome.output).toMatchObject({ error: 'TOOL_TIMEOUT', message: expect.stringContaining('50 ms') })
      rejectLate(new Error('too late'))
      await new Promise((r) => setTimeout(r, 50))
      expect(unhandled).toEqual([])
    } finally {
      process.off('unhandledRejection', onUnhandled)
    }
  })
})
