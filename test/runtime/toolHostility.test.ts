/**
 * Threads whose tools or model misbehave, run through the whole runtime: each misdeed becomes an
 * error tool result, the loop goes on, the thread's transcript replays, and other threads are not
 * touched (no crash, no restart).
 */
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineTool, readThreadFiles, scriptedModel } from '../../src/index.js'
import type { Message, ModelRequest } from '../../src/index.js'
import type { TestRuntime } from '../../src/testing.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const open = testRuntimes()

const echo = defineTool({
  name: 'echo',
  description: 'Echoes its input',
  input: z.object({ text: z.string() }),
  idempotent: true,
  execute: ({ text }) => ({ text }),
})

function toolResults(rt: TestRuntime, threadId: string): Array<{ callId: string; ok: boolean; output: unknown }> {
  return readThreadFiles(rt.dir, threadId)
    .entries.filter((e) => e.type === 'TOOL_DONE')
    .map((e) => {
      const { callId, ok, output } = e.data as { callId: string; ok: boolean; output: unknown }
      return { callId, ok, output }
    })
}

function crashes(rt: TestRuntime, threadId: string): number {
  return readThreadFiles(rt.dir, threadId).entries.filter((e) => e.type === 'thread_crashed').length
}

describe('a tool that throws a value describeError cannot describe', () => {
  it('gives its thread a TOOL_FAILED result and the thread completes; a thread beside it is untouched', async () => {
    const hostile = defineTool({
      name: 'hostile',
      description: 'Throws an object without a prototype',
      input: z.object({}),
      idempotent: true,
      execute: () => {
        throw Object.create(null)
      },
    })
    const model = scriptedModel((request) =>
      request.turn === 1
        ? { toolCalls: [request.directiveName === 'bad' ? { name: 'hostile', input: {} } : { name: 'echo', input: { text: 'hi' } }] }
        : { text: 'done' },
    )
    const rt = await open({ model, tools: [hostile, echo] })
    const bad = await rt.spawn({ directive: { name: 'bad', prompt: 'Call hostile' } })
    const good = await rt.spawn({ directive: { name: 'good', prompt: 'Call echo' } })
    const [badOutcome, goodOutcome] = await Promise.all([bad.done, good.done])

    expect(badOutcome.status).toBe('completed')
    expect(toolResults(rt, bad.id)).toEqual([{ callId: 'call_1_1', ok: false, output: { error: 'TOOL_FAILED', message: expect.stringContaining('cannot be described') } }])
    expect(crashes(rt, bad.id)).toBe(0)
    expect(goodOutcome.status).toBe('completed')
    expect(toolResults(rt, good.id)).toEqual([{ callId: 'call_1_1', ok: true, output: { text: 'hi' } }])
    expect(rt.checkReplay(bad.id).matches).toBe(true)
  })
})

describe('a tool whose input schema throws a value describeError cannot describe', () => {
  it('crashes only its own thread (supervised, then given up), while the runtime and a thread beside it go on', async () => {
    const brokenSchema = defineTool({
      name: 'broken',
      description: 'Its schema throws an object without a prototype',
      input: z.object({}).superRefine(() => {
        throw Object.create(null)
      }),
      idempotent: true,
      execute: () => 1,
    })
    const model = scriptedModel((request) =>
      request.turn === 1
        ? { toolCalls: [request.directiveName === 'bad' ? { name: 'broken', input: {} } : { name: 'echo', input: { text: 'hi' } }] }
        : { text: 'done' },
    )
    const rt = await open({ model, tools: [brokenSchema, echo] })
    const bad = await rt.spawn({ directive: { name: 'bad', prompt: 'Call broken' } })
    const good = await rt.spawn({ directive: { name: 'good', prompt: 'Call echo' } })
    const [badOutcome, goodOutcome] = await Promise.all([bad.done, good.done])

    expect(badOutcome).toMatchObject({ status: 'error', error: { code: 'SUPERVISION_GAVE_UP', message: expect.stringContaining('input schema of tool "broken" threw') } })
    expect(goodOutcome.status).toBe('completed')
    // The runtime is still up: it takes and finishes new work.
    const after = await rt.spawn({ directive: { name: 'good', prompt: 'Again' } })
    expect((await after.done).status).toBe('completed')
  })
})

describe('a tool that returns a function', () => {
  it('gives the model a TOOL_OUTPUT_INVALID result with text content, and the thread completes', async () => {
    const careless = defineTool({ name: 'careless', description: 'Returns a function', input: z.object({}), execute: () => () => 42 })
    const seen: Array<readonly Message[]> = []
    const model = scriptedModel((request: ModelRequest) => {
      seen.push(request.messages)
      return request.turn === 1 ? { toolCalls: [{ name: 'careless', input: {} }] } : { text: 'done' }
    })
    const rt = await open({ model, tools: [careless] })
    const thread = await rt.spawn({ directive: { name: 'careless', prompt: 'Call it' } })
    const outcome = await thread.done

    expect(outcome.status).toBe('completed')
    const toolMessage = seen.at(-1)!.find((m) => m.role === 'tool')
    expect(toolMessage).toMatchObject({ role: 'tool', isError: true, content: expect.stringContaining('TOOL_OUTPUT_INVALID') })
    expect(toolResults(rt, thread.id)).toEqual([{ callId: 'call_1_1', ok: false, output: { error: 'TOOL_OUTPUT_INVALID', message: expect.any(String) } }])
    expect(crashes(rt, thread.id)).toBe(0)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('a model that asks for tool calls that cannot run', () => {
  it('gives an unknown tool, invalid input, non-object input, a repeated id and hundreds of calls each an error or result, and goes on', async () => {
    const many = Array.from({ length: 300 }, (_, i) => ({ name: 'echo', input: { text: `n${i}` }, id: `m${i}` }))
    const model = scriptedModel([
      {
        toolCalls: [
          { name: 'no_such_tool', input: {}, id: 'a' },
          { name: 'echo', input: { text: 5 }, id: 'b' },
          { name: 'echo', input: 'not an object', id: 'c' },
          { name: 'echo', input: { text: 'first' }, id: 'dup' },
          { name: 'echo', input: { text: 'second' }, id: 'dup' },
          ...many,
        ],
      },
      { text: 'done' },
    ])
    const rt = await open({ model, tools: [echo], defaultLimits: { turns: null } })
    const thread = await rt.spawn({ directive: { name: 'sloppy', prompt: 'Call things' } })
    const outcome = await thread.done

    expect(outcome.status).toBe('completed')
    const results = toolResults(rt, thread.id)
    expect(results).toHaveLength(305)
    const byId = new Map(results.map((r) => [r.callId, r]))
    expect(byId.get('a')).toMatchObject({ ok: false, output: { error: 'TOOL_UNKNOWN' } })
    expect(byId.get('b')).toMatchObject({ ok: false, output: { error: 'TOOL_INPUT_INVALID' } })
    expect(byId.get('c')).toMatchObject({ ok: false, output: { error: 'TOOL_INPUT_INVALID' } })
    expect(byId.get('dup')).toMatchObject({ ok: true, output: { text: 'first' } })
    expect(byId.get('dup_2')).toMatchObject({ ok: true, output: { text: 'second' } })
    expect(byId.get('m299')).toMatchObject({ ok: true, output: { text: 'n299' } })
    expect(crashes(rt, thread.id)).toBe(0)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('a tool that ignores its AbortSignal and never returns', () => {
  it('lets its thread be cancelled at once, and its late result is never recorded', async () => {
    let finishLate: (value: unknown) => void = () => {}
    let started = false
    const stubborn = defineTool({
      name: 'stubborn',
      description: 'Ignores cancellation',
      input: z.object({}),
      execute: () =>
        new Promise((resolve) => {
          started = true
          finishLate = resolve
        }),
    })
    const model = scriptedModel([{ toolCalls: [{ name: 'stubborn', input: {} }] }, { text: 'done' }])
    const rt = await open({ model, tools: [stubborn] })
    const thread = await rt.spawn({ directive: { name: 'stubborn', prompt: 'Call it' } })
    const deadline = Date.now() + 20_000
    while (!started && Date.now() < deadline) await rt.settle()
    expect(started).toBe(true)

    await rt.cancel(thread.id, 'operator said stop')
    const outcome = await thread.done
    expect(outcome.status).toBe('cancelled')
    finishLate({ late: true })
    await rt.settle()
    expect(toolResults(rt, thread.id)).toEqual([])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('a model adapter whose tool call input has no JSON form', () => {
  it('ends its thread in error naming the adapter and the call, without a crash or restart; a thread beside it completes', async () => {
    const cycle: Record<string, unknown> = {}
    cycle.self = cycle
    const inputs: Record<string, unknown> = { bigint: { n: 1n }, cycle, fn: () => 1 }
    const model = {
      name: 'hostile-adapter',
      generate: async (request: ModelRequest) => {
        if (request.directiveName === 'good') return request.turn === 1 ? { text: '', toolCalls: [{ id: 'c1', name: 'echo', input: { text: 'hi' } }], usage: { inputTokens: 1, outputTokens: 1 } } : { text: 'done', toolCalls: [], usage: { inputTokens: 1, outputTokens: 1 } }
        return { text: '', toolCalls: [{ id: 'c1', name: 'echo', input: inputs[request.directiveName] }], usage: { inputTokens: 1, outputTokens: 1 } }
      },
    }
    const rt = await open({ model, tools: [echo] })
    const bad = await Promise.all(Object.keys(inputs).map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))
    const good = await rt.spawn({ directive: { name: 'good', prompt: 'p' } })
    const outcomes = await Promise.all(bad.map((t) => t.done))
    for (const [i, outcome] of outcomes.entries()) {
      expect(outcome.status, Object.keys(inputs)[i]).toBe('error')
      expect(outcome.error?.message).toMatch(/Model adapter "hostile-adapter" returned an invalid response: toolCalls: the input of call c1 \(echo\) (cannot be recorded as JSON|has no JSON form)/)
      expect(crashes(rt, bad[i]!.id)).toBe(0)
      expect(rt.checkReplay(bad[i]!.id).matches).toBe(true)
    }
    expect((await good.done).status).toBe('completed')
  })
})
