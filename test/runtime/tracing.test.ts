/**
 * OpenTelemetry traces (issue 24, item 4), read through the SDK's own in-memory exporter: the span
 * tree of a thread, the generative-AI attributes, content only when the host opts in, children
 * under their parent's spawn_thread call, failures with error status, the trace continued by a
 * run in a new runtime, and nothing at all when no tracer provider is registered.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { context, trace, SpanStatusCode } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { AlwaysOffSampler, BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { Message, ModelRequest, ScriptedTurn } from '../../src/index.js'
import { defineTool, scriptedModel } from '../../src/index.js'
import type { TestRuntime } from '../../src/testing.js'
import { SPAWN_ENTRY } from '../../src/thread/replay.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()
const exporter = new InMemorySpanExporter()
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
const contextManager = new AsyncLocalStorageContextManager()

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable())
  trace.setGlobalTracerProvider(provider)
})
afterAll(async () => {
  trace.disable()
  context.disable()
  await provider.shutdown()
})
afterEach(() => exporter.reset())

const lookup = defineTool({
  name: 'lookup',
  description: 'Looks a word up.',
  input: z.object({ word: z.string() }),
  execute: ({ word }) => ({ word, meaning: `the meaning of ${word}` }),
})

/** research: looks "spindle" up, then answers. */
const researchScript = (request: ModelRequest): ScriptedTurn =>
  request.turn === 1
    ? { toolCalls: [{ name: 'lookup', input: { word: 'spindle' }, id: 'call-1' }], usage: { inputTokens: 11, outputTokens: 7 } }
    : { text: 'A spindle spins.', usage: { inputTokens: 23, outputTokens: 5 } }

function spans(): ReadableSpan[] {
  return exporter.getFinishedSpans()
}

function named(name: string): ReadableSpan[] {
  return spans().filter((s) => s.name === name)
}

function one(name: string): ReadableSpan {
  const found = named(name)
  expect(found.map((s) => s.name)).toEqual([name])
  return found[0]!
}

function parentOf(span: ReadableSpan): string | undefined {
  return span.parentSpanContext?.spanId
}

function spawnEntry(rt: TestRuntime, id: string): { traceparent?: string } {
  const first = fs.readFileSync(path.join(rt.dir, 'threads', id, 'transcript.jsonl'), 'utf8').split('\n')[0]!
  const entry = JSON.parse(first) as { type: string; data: { traceparent?: string } }
  expect(entry.type).toBe(SPAWN_ENTRY)
  return entry.data
}

/** The ids the parent's spawn_thread calls returned, read from its conversation. */
function spawnedIds(messages: readonly Message[]): string[] {
  return messages
    .filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === 'spawn_thread')
    .map((m) => JSON.parse(m.content).threadId as string)
}

describe('tracing a thread', () => {
  it('should make a run span holding a span per turn, with the model and tool calls of each turn under it', async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup] })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
    expect((await thread.done).status).toBe('completed')

    const run = one('invoke_agent research')
    expect(parentOf(run)).toBeUndefined()
    const turn1 = one('turn 1')
    const turn2 = one('turn 2')
    expect([parentOf(turn1), parentOf(turn2)]).toEqual([run.spanContext().spanId, run.spanContext().spanId])
    const chats = named('chat default')
    expect(chats.map(parentOf).sort()).toEqual([turn1.spanContext().spanId, turn2.spanContext().spanId].sort())
    expect(parentOf(one('execute_tool lookup'))).toBe(turn1.spanContext().spanId)
    // One trace, every span ended.
    expect(new Set(spans().map((s) => s.spanContext().traceId)).size).toBe(1)
    expect(spans()).toHaveLength(6)
  })

  it('should put the generative-AI attributes on the run, model call and tool call spans', async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup] })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
    await thread.done

    expect(one('invoke_agent research').attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'research',
      'gen_ai.agent.id': thread.id,
      'spindle.thread.id': thread.id,
      'spindle.thread.status': 'completed',
      'gen_ai.usage.input_tokens': 34,
      'gen_ai.usage.output_tokens': 12,
    })
    const [first, second] = named('chat default').sort((a, b) => (a.attributes['spindle.turn'] as number) - (b.attributes['spindle.turn'] as number))
    expect(first!.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'scripted',
      'gen_ai.request.model': 'default',
      'gen_ai.usage.input_tokens': 11,
      'gen_ai.usage.output_tokens': 7,
      'gen_ai.response.finish_reasons': ['tool_calls'],
      'spindle.thread.id': thread.id,
      'spindle.turn': 1,
      'spindle.attempt': 1,
    })
    expect(second!.attributes).toMatchObject({ 'gen_ai.response.finish_reasons': ['stop'], 'gen_ai.usage.output_tokens': 5, 'spindle.turn': 2 })
    expect(one('execute_tool lookup').attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'lookup',
      'gen_ai.tool.call.id': 'call-1',
    })
    expect(spans().every((s) => s.status.code !== SpanStatusCode.ERROR)).toBe(true)
  })

  it('should keep the first run span as the traceparent of the thread in its spawn entry', async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup] })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
    await thread.done
    const run = one('invoke_agent research').spanContext()
    expect(spawnEntry(rt, thread.id).traceparent).toBe(`00-${run.traceId}-${run.spanId}-01`)
  })
})

describe('content on spans', () => {
  const contentKeys = ['gen_ai.input.messages', 'gen_ai.output.messages', 'gen_ai.system_instructions', 'gen_ai.tool.call.arguments', 'gen_ai.tool.call.result']

  it('should record no prompt, reply, instructions or tool input and output by default', async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup] })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?', instructions: 'Be brief.' } })
    await thread.done
    expect(spans().length).toBeGreaterThan(0)
    for (const span of spans()) for (const key of contentKeys) expect(span.attributes[key], `${span.name} ${key}`).toBeUndefined()
    expect(JSON.stringify(spans().map((s) => s.attributes))).not.toContain('spindle spins')
  })

  it('should record them when the host opts in with recordContent', async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup], telemetry: { recordContent: true } })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?', instructions: 'Be brief.' } })
    await thread.done
    const last = named('chat default').find((s) => s.attributes['spindle.turn'] === 2)!
    expect(JSON.parse(last.attributes['gen_ai.input.messages'] as string)[0]).toEqual({ role: 'user', content: 'What is a spindle?' })
    expect(last.attributes['gen_ai.system_instructions']).toBe('Be brief.')
    expect(JSON.parse(last.attributes['gen_ai.output.messages'] as string)).toEqual([{ role: 'assistant', parts: [{ type: 'text', content: 'A spindle spins.' }], finish_reason: 'stop' }])
    const tool = one('execute_tool lookup')
    expect(JSON.parse(tool.attributes['gen_ai.tool.call.arguments'] as string)).toEqual({ word: 'spindle' })
    expect(JSON.parse(tool.attributes['gen_ai.tool.call.result'] as string)).toEqual({ word: 'spindle', meaning: 'the meaning of spindle' })
  })
})

describe('tracing a tree of threads', () => {
  /** lead spawns a child, waits for it, then answers. */
  const treeScript = (request: ModelRequest): ScriptedTurn => {
    if (request.directiveName === 'lead') {
      if (request.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'helper', prompt: 'help' } }] }
      if (request.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(request.messages) } }] }
      return { text: 'done with help' }
    }
    return { text: 'helped' }
  }

  it("should put a child thread's run under its parent's spawn_thread call, in the parent's trace", async () => {
    const rt = await runtime({ model: scriptedModel(treeScript) })
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'lead' } })
    expect((await lead.done).status).toBe('completed')

    const spawnCall = one('execute_tool spawn_thread')
    const child = one('invoke_agent helper')
    expect(parentOf(child)).toBe(spawnCall.spanContext().spanId)
    expect(child.spanContext().traceId).toBe(one('invoke_agent lead').spanContext().traceId)
    expect(child.attributes['spindle.thread.parent_id']).toBe(lead.id)
  })

  it("should put a thread under the host's active span at rt.spawn", async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup] })
    const tracer = trace.getTracer('host')
    const thread = await tracer.startActiveSpan('POST /ask', async (request) => {
      try {
        return await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
      } finally {
        request.end()
      }
    })
    await thread.done
    const host = one('POST /ask')
    const run = one('invoke_agent research')
    expect(parentOf(run)).toBe(host.spanContext().spanId)
    expect(run.spanContext().traceId).toBe(host.spanContext().traceId)
  })
})

describe('tracing a continuation', () => {
  it("should put a continuation's run under its predecessor's, in the same trace", async () => {
    const note = defineTool({ name: 'note', description: 'n', input: z.object({}), idempotent: true, execute: () => 'ok' })
    const rt = await runtime({
      model: scriptedModel((r) =>
        r.messages[0]!.content.includes('Continued from thread')
          ? { text: 'finished in the successor' }
          : r.turn === 1
            ? { text: 'first', toolCalls: [{ name: 'note', input: {} }] }
            : { faults: [{ fault: 'http', status: 400, code: 'context_length_exceeded', message: "This model's maximum context length is 8192 tokens" }], reply: {} },
      ),
      tools: [note],
    })
    const thread = await rt.spawn({ directive: { name: 'big', prompt: 'p' } })
    expect((await thread.done).status).toBe('continued')
    const report = await rt.waitThreads([thread.id])
    expect(report.settled[0]).toMatchObject({ status: 'completed' })
    const [first, successor] = named('invoke_agent big').sort((a, b) => (a.attributes['spindle.thread.previous_id'] ? 1 : 0) - (b.attributes['spindle.thread.previous_id'] ? 1 : 0))
    expect(successor!.attributes['spindle.thread.previous_id']).toBe(thread.id)
    expect(first!.attributes['spindle.thread.status']).toBe('continued')
    expect(parentOf(successor!)).toBe(first!.spanContext().spanId)
    expect(successor!.spanContext().traceId).toBe(first!.spanContext().traceId)
    // The call refused for its context length is a failed call, handed off or not.
    const refused = named('chat default').filter((c) => c.attributes['spindle.error.category'] === 'context_length')
    expect(refused.map((c) => c.status.code)).toEqual([SpanStatusCode.ERROR])
  })
})

describe('tracing failures', () => {
  it("should give a failed model call's span error status and type, and the thread's run too when it ends in error", async () => {
    const script: ScriptedTurn[] = [{ faults: [{ fault: 'http', status: 401, message: 'bad key' }], reply: { text: 'never' } }]
    const rt = await runtime({ model: scriptedModel(script), retry: { maxRetries: 0 } })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
    const outcome = await thread.done
    const chat = one('chat default')
    expect(chat.status.code).toBe(SpanStatusCode.ERROR)
    expect(chat.status.message).toContain('bad key')
    expect(chat.attributes).toMatchObject({ 'http.response.status_code': 401 })
    expect(chat.attributes).toMatchObject({ 'error.type': 'permanent', 'spindle.error.category': 'permanent' })
    const run = one('invoke_agent research')
    expect(run.attributes['spindle.thread.status']).toBe(outcome.status)
    expect(outcome.status).toBe('error')
    expect(run.status.code).toBe(SpanStatusCode.ERROR)
    expect(run.attributes['error.type']).toBe(outcome.error!.code)
  })

  it("should give a failed tool call's span error status with the tool's error code", async () => {
    const broken = defineTool({
      name: 'broken',
      description: 'Always fails.',
      input: z.object({}),
      execute: () => {
        throw new Error('the disk is on fire')
      },
    })
    const script: ScriptedTurn[] = [{ toolCalls: [{ name: 'broken', input: {} }] }, { text: 'gave up' }]
    const rt = await runtime({ model: scriptedModel(script), tools: [broken] })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'go' } })
    await thread.done
    const tool = one('execute_tool broken')
    expect(tool.status.code).toBe(SpanStatusCode.ERROR)
    expect(tool.status.message).toContain('the disk is on fire')
    expect(tool.attributes['error.type']).toBe('TOOL_FAILED')
  })
})

describe('a thread resumed by a new runtime', () => {
  it('should continue its trace: a new run span in the same trace, under the stored traceparent', async () => {
    const dir = tempDir('spindle-trace-resume')
    // approve: the lookup waits for a person's approval, so the thread suspends in the first runtime.
    const script = researchScript
    const first = await runtime({ dir, model: scriptedModel(script), tools: [lookup], config: { approvals: { tools: ['lookup'] } } })
    const thread = await first.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
    expect((await thread.done).status).toBe('suspended')
    const stored = spawnEntry(first, thread.id).traceparent!
    await first.close()
    const firstRun = one('invoke_agent research')
    expect(one('execute_tool lookup').attributes['spindle.tool.paused']).toBe('approval')
    expect(firstRun.attributes).toMatchObject({ 'spindle.thread.status': 'suspended', 'spindle.thread.suspend_reason': 'tool_approval' })
    expect(stored).toBe(`00-${firstRun.spanContext().traceId}-${firstRun.spanContext().spanId}-01`)
    exporter.reset()

    const second = await runtime({ dir, model: scriptedModel(script), tools: [lookup] })
    await second.approve(thread.id)
    const resumed = second.get(thread.id)!
    expect((await resumed.done).status).toBe('completed')
    const run = one('invoke_agent research')
    expect(run.spanContext().traceId).toBe(firstRun.spanContext().traceId)
    expect(parentOf(run)).toBe(firstRun.spanContext().spanId)
    expect(run.attributes['spindle.run.resumed']).toBe(true)
    expect(parentOf(one('execute_tool lookup'))).toBe(one('turn 1').spanContext().spanId)
  })
})

describe('tracing without a tracer provider', () => {
  it('should make no span and keep no traceparent, and the thread should run as before', async () => {
    trace.disable()
    try {
      const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup] })
      const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
      const outcome = await thread.done
      expect(outcome).toMatchObject({ status: 'completed', result: 'A spindle spins.' })
      expect(spawnEntry(rt, thread.id).traceparent).toBeUndefined()
      expect(spans()).toEqual([])
    } finally {
      trace.setGlobalTracerProvider(provider)
    }
  })

  it('should trace through a provider given in telemetry.tracerProvider when none is registered', async () => {
    trace.disable()
    const own = new InMemorySpanExporter()
    const ownProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(own)] })
    try {
      const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup], telemetry: { tracerProvider: ownProvider } })
      await (await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })).done
      expect(own.getFinishedSpans().map((s) => s.name).sort()).toEqual(['chat default', 'chat default', 'execute_tool lookup', 'invoke_agent research', 'turn 1', 'turn 2'])
      expect(spans()).toEqual([])
    } finally {
      trace.setGlobalTracerProvider(provider)
      await ownProvider.shutdown()
    }
  })

  it('should make no span under a run the sampler dropped, and keep its unsampled traceparent', async () => {
    const own = new InMemorySpanExporter()
    const sampledOut = new BasicTracerProvider({ sampler: new AlwaysOffSampler(), spanProcessors: [new SimpleSpanProcessor(own)] })
    try {
      const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup], telemetry: { tracerProvider: sampledOut } })
      const thread = await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })
      expect((await thread.done).status).toBe('completed')
      expect(own.getFinishedSpans()).toEqual([])
      expect(spawnEntry(rt, thread.id).traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/)
    } finally {
      await sampledOut.shutdown()
    }
  })

  it('should make no span with telemetry: false, even with a provider registered', async () => {
    const rt = await runtime({ model: scriptedModel(researchScript), tools: [lookup], telemetry: false })
    await (await rt.spawn({ directive: { name: 'research', prompt: 'What is a spindle?' } })).done
    expect(spans()).toEqual([])
  })
})

describe('a host without @opentelemetry/api installed', () => {
  it('should run threads as before, keep no traceparent, and refuse a tracerProvider it cannot use', () => {
    const dir = tempDir('spindle-no-otel')
    const run = spawnSync(process.execPath, ['--import', compiled('test/helpers/hideOpenTelemetry.js'), compiled('test/runtime/noOpenTelemetryWorker.js'), dir], {
      encoding: 'utf8',
      timeout: 120_000,
    })
    expect(run.status, run.stderr).toBe(0)
    expect(JSON.parse(run.stdout.trim())).toEqual({
      apiLoads: false,
      status: 'completed',
      result: 'no tracing here',
      traceparent: null,
      withProvider: 'INVALID_OPTIONS',
    })
  })
})
