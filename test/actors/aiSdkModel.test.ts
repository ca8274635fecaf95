/**
 * The AI SDK adapter against a real loopback HTTP server speaking the OpenAI chat-completions
 * protocol, through the real @ai-sdk/openai provider: what is sent, what comes back, how provider
 * failures classify, and one spindle runtime running threads on it.
 */
import { createOpenAI } from '@ai-sdk/openai'
import { APICallError } from 'ai'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { aiSdkModel } from '../../src/aiSdk.js'
import type { AiSdkModelOptions } from '../../src/aiSdk.js'
import { toModelMessages } from '../../actors/aiSdkModel.js'
import type { Message, ModelRequest, ModelStreamPart, ToolDefinition } from '../../actors/model.js'
import { ModelResponseSchema } from '../../actors/model.js'
import { defineTool } from '../../actors/tools.js'
import { classifyError } from '../../src/policies/classifyError.js'
import { createTestRuntime, readThreadFiles } from '../../src/testing.js'
import type { TestRuntime } from '../../src/testing.js'
import type { OpenAIServer } from '../helpers/openaiServer.js'
import { startOpenAIServer } from '../helpers/openaiServer.js'
import { inState, until } from '../helpers/threads.js'

let server: OpenAIServer

beforeAll(async () => {
  server = await startOpenAIServer()
})
afterAll(async () => {
  await server.close()
})
afterEach(() => {
  expect(server.pending(), 'every scripted reply was used').toBe(0)
  server.requests.length = 0
})

function adapter(options: Partial<AiSdkModelOptions> = {}) {
  const provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'test-key' })
  return aiSdkModel({ model: provider.chat('gpt-4o-mini'), ...options })
}

const lookupDefinition: ToolDefinition = {
  name: 'lookup',
  description: 'Look a term up',
  inputSchema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'], additionalProperties: false },
}

function request(messages: Message[], over: Partial<ModelRequest> = {}): ModelRequest {
  return {
    threadId: 'research-1',
    directiveName: 'research',
    turn: 1,
    attempt: 1,
    messages,
    tools: [lookupDefinition],
    signal: new AbortController().signal,
    ...over,
  }
}

const NOW = Date.UTC(2026, 0, 1)

async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  throw new Error('expected the call to fail')
}

describe('aiSdkModel', () => {
  it('should map a tool-call reply to tool calls with parsed input, and declare the tools', async () => {
    server.push({ kind: 'toolCalls', calls: [{ id: 'call_abc', name: 'lookup', arguments: { q: 'X' } }] })
    const model = adapter()
    const response = await model.generate(request([{ role: 'user', content: 'Find X' }]))

    expect(ModelResponseSchema.safeParse(response).success).toBe(true)
    expect(response).toEqual({ text: '', toolCalls: [{ id: 'call_abc', name: 'lookup', input: { q: 'X' } }], usage: { inputTokens: 10, outputTokens: 5 } })
    expect(server.requests).toHaveLength(1)
    const sent = server.requests[0]!
    expect(sent.path).toBe('/v1/chat/completions')
    expect(sent.headers.authorization).toBe('Bearer test-key')
    expect(sent.body).toMatchObject({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Find X' }],
      tools: [{ type: 'function', function: { name: 'lookup', description: 'Look a term up', parameters: lookupDefinition.inputSchema } }],
    })
    expect(sent.body.stream).toBeFalsy()
  })

  it('should send the tool results of the history in OpenAI format', async () => {
    server.push({ kind: 'text', text: 'X is 42' })
    const history: Message[] = [
      { role: 'user', content: 'Find X' },
      {
        role: 'assistant',
        content: 'Looking both up.',
        toolCalls: [
          { id: 'call_1', name: 'lookup', input: { q: 'X' } },
          { id: 'call_2', name: 'lookup', input: { q: 'Y' } },
        ],
      },
      { role: 'tool', toolCallId: 'call_1', toolName: 'lookup', content: '{"q":"X","answer":42}' },
      { role: 'tool', toolCallId: 'call_2', toolName: 'lookup', content: '{"error":"TOOL_FAILED","message":"no Y"}', isError: true },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_3', name: 'lookup', input: { q: 'Z' } }] },
      { role: 'tool', toolCallId: 'call_3', toolName: 'lookup', content: 'Z is a plain string' },
    ]
    const response = await adapter().generate(request(history, { turn: 3 }))

    expect(response.text).toBe('X is 42')
    expect(response.toolCalls).toEqual([])
    expect(server.requests[0]!.body.messages).toEqual([
      { role: 'user', content: 'Find X' },
      {
        role: 'assistant',
        content: 'Looking both up.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"X"}' } },
          { id: 'call_2', type: 'function', function: { name: 'lookup', arguments: '{"q":"Y"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"q":"X","answer":42}' },
      { role: 'tool', tool_call_id: 'call_2', content: '{"error":"TOOL_FAILED","message":"no Y"}' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'lookup', arguments: '{"q":"Z"}' } }] },
      { role: 'tool', tool_call_id: 'call_3', content: 'Z is a plain string' },
    ])
  })

  it('should mark error results and keep JSON results as JSON in the AI SDK messages', () => {
    const messages = toModelMessages([
      { role: 'tool', toolCallId: 'a', toolName: 't', content: '{"n":1}' },
      { role: 'tool', toolCallId: 'b', toolName: 't', content: '{"error":"E","message":"m"}', isError: true },
      { role: 'tool', toolCallId: 'c', toolName: 't', content: 'plain', isError: true },
      { role: 'tool', toolCallId: 'd', toolName: 't', content: 'plain' },
    ])
    expect(messages).toHaveLength(1)
    expect(messages[0]).toEqual({
      role: 'tool',
      content: [
        { type: 'tool-result', toolCallId: 'a', toolName: 't', output: { type: 'json', value: { n: 1 } } },
        { type: 'tool-result', toolCallId: 'b', toolName: 't', output: { type: 'error-json', value: { error: 'E', message: 'm' } } },
        { type: 'tool-result', toolCallId: 'c', toolName: 't', output: { type: 'error-text', value: 'plain' } },
        { type: 'tool-result', toolCallId: 'd', toolName: 't', output: { type: 'text', value: 'plain' } },
      ],
    })
  })

  it('should map usage and price it, with missing counts as 0', async () => {
    server.push(
      { kind: 'text', text: 'priced', usage: { promptTokens: 1000, completionTokens: 500 } },
      { kind: 'text', text: 'unpriced', usage: null },
    )
    const model = adapter({ pricing: { inputPerMillion: 2, outputPerMillion: 8 } })
    const priced = await model.generate(request([{ role: 'user', content: 'hi' }]))
    expect(priced.usage).toMatchObject({ inputTokens: 1000, outputTokens: 500 })
    expect(priced.usage.cost).toBeCloseTo(0.006, 12)

    const missing = await model.generate(request([{ role: 'user', content: 'hi' }]))
    expect(missing).toMatchObject({ text: 'unpriced', usage: { inputTokens: 0, outputTokens: 0, cost: 0 } })
    expect(ModelResponseSchema.safeParse(missing).success).toBe(true)
  })

  it('should leave cost out without pricing, and pass name, contextWindow and call settings', async () => {
    server.push({ kind: 'text', text: 'ok' })
    expect(adapter().name).toBe('openai.chat:gpt-4o-mini')
    const model = adapter({ name: 'mini', contextWindow: 128_000, maxOutputTokens: 256, temperature: 0.25 })
    expect(model).toMatchObject({ name: 'mini', contextWindow: 128_000 })
    const response = await model.generate(request([{ role: 'user', content: 'hi' }], { tools: [] }))
    expect(response.usage).toEqual({ inputTokens: 10, outputTokens: 5 })
    expect(server.requests[0]!.body).toMatchObject({ max_tokens: 256, temperature: 0.25 })
    expect(server.requests[0]!.body.tools).toBeUndefined()
  })

  it('should throw a 429 with retry-after 2 as it is, once, classified rate_limited with a 2000 ms wait', async () => {
    server.push({ kind: 'rateLimited', retryAfter: 2 })
    const error = await failure(adapter().generate(request([{ role: 'user', content: 'hi' }])))
    expect(APICallError.isInstance(error)).toBe(true)
    expect(server.requests).toHaveLength(1) // the SDK's own retries are off
    expect(classifyError(error, NOW)).toMatchObject({
      failure: { category: 'rate_limited', status: 429, code: 'rate_limit_exceeded' },
      retryAfterMs: 2000,
    })
  })

  it('should classify a 503 transient', async () => {
    server.push({ kind: 'unavailable' })
    const error = await failure(adapter().generate(request([{ role: 'user', content: 'hi' }])))
    expect(server.requests).toHaveLength(1)
    expect(classifyError(error, NOW).failure).toMatchObject({ category: 'transient', status: 503 })
  })

  it('should classify a 429 insufficient_quota as quota, not a rate limit', async () => {
    server.push({ kind: 'insufficientQuota' })
    const error = await failure(adapter().generate(request([{ role: 'user', content: 'hi' }])))
    expect(classifyError(error, NOW).failure).toMatchObject({ category: 'quota', status: 429, code: 'insufficient_quota' })
    expect(classifyError(error, NOW).failure.message).toContain('exceeded your current quota')
  })

  it('should classify a refused connection transient', async () => {
    const closed = await startOpenAIServer()
    const url = closed.url
    await closed.close()
    const provider = createOpenAI({ baseURL: `${url}/v1`, apiKey: 'test-key' })
    const error = await failure(aiSdkModel({ model: provider.chat('gpt-4o-mini') }).generate(request([{ role: 'user', content: 'hi' }])))
    expect(classifyError(error, NOW).failure).toMatchObject({ category: 'transient', code: 'ECONNREFUSED' })
  })

  it('should stop a call in flight when its signal is aborted', async () => {
    server.push({ kind: 'text', text: 'too late', delayMs: 30_000 })
    const controller = new AbortController()
    const started = Date.now()
    const call = adapter().generate(request([{ role: 'user', content: 'hi' }], { signal: controller.signal }))
    setTimeout(() => controller.abort(new Error('model call stopped')), 50)
    const error = await failure(call)
    expect(Date.now() - started).toBeLessThan(15_000) // half the 30 s reply delay, with room for a loaded machine
    expect(error).toMatchObject({ message: 'model call stopped' })
    expect(server.requests).toHaveLength(1)
  })

  it('should not call the provider at all with an already aborted signal', async () => {
    const controller = new AbortController()
    controller.abort()
    const error = await failure(adapter().generate(request([{ role: 'user', content: 'hi' }], { signal: controller.signal })))
    expect((error as Error).name).toBe('AbortError')
    expect(server.requests).toHaveLength(0)
  })
})

describe('aiSdkModel in a spindle runtime', () => {
  let rt: TestRuntime | null = null
  afterEach(async () => {
    await rt?.cleanup()
    rt = null
  })

  it('should run a thread through a tool call to its answer, and wait out a 429 with retry-after', async () => {
    const lookup = defineTool({
      name: 'lookup',
      description: 'Look a term up',
      input: z.object({ q: z.string() }),
      idempotent: true,
      execute: async ({ q }) => ({ q, answer: 42 }),
    })
    rt = await createTestRuntime({ model: adapter({ pricing: { inputPerMillion: 1, outputPerMillion: 4 } }), tools: [lookup] })

    server.push({ kind: 'toolCalls', calls: [{ id: 'call_1', name: 'lookup', arguments: { q: 'X' } }] }, { kind: 'text', text: 'X is 42' })
    const first = await rt.spawn({ directive: { name: 'research', prompt: 'Find X' } })
    const outcome = await first.done
    expect(outcome).toMatchObject({ status: 'completed', result: 'X is 42', cost: { turns: 2, inputTokens: 20, outputTokens: 10 } })
    expect(server.requests).toHaveLength(2)
    const declared = server.requests[0]!.body.tools.map((t: { function: { name: string } }) => t.function)
    expect(declared.map((f: { name: string }) => f.name)).toEqual(['spawn_thread', 'wait_threads', 'lookup'])
    expect(declared.find((f: { name: string }) => f.name === 'lookup')).toMatchObject({ name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } })
    expect(server.requests[1]!.body.messages).toEqual([
      { role: 'user', content: 'Find X' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"X"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"q":"X","answer":42}' },
    ])

    server.requests.length = 0
    server.push({ kind: 'rateLimited', retryAfter: 1 }, { kind: 'text', text: 'after the wait' })
    const second = await rt.spawn({ directive: { name: 'patient', prompt: 'Wait for it' } })
    await until(second, inState('waitingToRetry'))
    await rt.advance(1000)
    expect(await second.done).toMatchObject({ status: 'completed', result: 'after the wait' })
    expect(server.requests).toHaveLength(2)

    const { entries } = readThreadFiles(rt.dir, second.id)
    const failed = entries.filter((e) => e.type === 'MODEL_FAILED')
    expect(failed).toHaveLength(1)
    expect(failed[0]!.data).toMatchObject({ error: { category: 'rate_limited', status: 429, code: 'rate_limit_exceeded' }, retryInMs: 1000 })
    expect(rt.checkReplay(second.id).matches).toBe(true)
  })
})

describe('aiSdkModel with instructions', () => {
  let rt: TestRuntime | null = null
  afterEach(async () => {
    await rt?.cleanup()
    rt = null
  })

  it("should send a directive's instructions as the system message of every call, before the conversation", async () => {
    const noop = defineTool({ name: 'noop', description: 'Does nothing', input: z.object({}), idempotent: true, execute: () => 'ok' })
    rt = await createTestRuntime({ model: adapter(), tools: [noop] })
    server.requests.length = 0
    server.push({ kind: 'toolCalls', calls: [{ id: 'call_1', name: 'noop', arguments: {} }] }, { kind: 'text', text: 'done' })
    const thread = await rt.spawn({ directive: { name: 'terse', prompt: 'Find X', instructions: 'You answer in one word.' } })
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'done' })
    expect(server.requests).toHaveLength(2)
    for (const request of server.requests) {
      expect(request.body.messages[0]).toEqual({ role: 'system', content: 'You answer in one word.' })
      expect(request.body.messages[1]).toEqual({ role: 'user', content: 'Find X' })
      expect(request.body.messages.filter((m: { role: string }) => m.role === 'system')).toHaveLength(1)
    }
  })
})

describe('aiSdkModel with an output schema', () => {
  let rt: TestRuntime | null = null
  afterEach(async () => {
    await rt?.cleanup()
    rt = null
  })

  const Answer = z.object({ city: z.string(), population: z.number().int() })

  it("should ask the provider for the schema as its structured-output response format, beside the tools", async () => {
    const schema = z.toJSONSchema(Answer, { io: 'input' }) as Record<string, unknown>
    server.push({ kind: 'text', text: '{"city":"Oslo","population":709000}' })
    const response = await adapter().generate(request([{ role: 'user', content: 'Largest city?' }], { outputSchema: schema }))
    expect(response.text).toBe('{"city":"Oslo","population":709000}')
    const sent = server.requests[0]!.body
    expect(sent.response_format).toMatchObject({ type: 'json_schema', json_schema: { name: 'response', schema: { type: 'object', properties: { city: { type: 'string' } } } } })
    expect(sent.tools.map((t: { function: { name: string } }) => t.function.name)).toEqual(['lookup'])
  })

  it('should hand back, as text, an answer the SDK cannot parse, for spindle to judge, not throw', async () => {
    server.push({ kind: 'text', text: 'Oslo, I think', usage: { promptTokens: 12, completionTokens: 3 } })
    const response = await adapter().generate(request([{ role: 'user', content: 'Largest city?' }], { outputSchema: z.toJSONSchema(Answer) as Record<string, unknown> }))
    expect(response).toEqual({ text: 'Oslo, I think', toolCalls: [], usage: { inputTokens: 12, outputTokens: 3 } })
  })

  it('should run a thread whose first answer fails the schema to its typed output', async () => {
    rt = await createTestRuntime({ model: adapter() })
    server.requests.length = 0
    server.push({ kind: 'text', text: 'Oslo, about 709 thousand' }, { kind: 'text', text: '{"city":"Oslo","population":709000}' })
    const thread = await rt.spawn({ directive: { name: 'geo', prompt: 'Largest city of Norway?', output: Answer } })
    const outcome = await thread.done
    expect(outcome).toMatchObject({ status: 'completed', output: { city: 'Oslo', population: 709000 } })
    expect(server.requests).toHaveLength(2)
    for (const sent of server.requests) expect(sent.body.response_format.type).toBe('json_schema')
    const retry = server.requests[1]!.body.messages
    expect(retry.at(-2)).toEqual({ role: 'assistant', content: 'Oslo, about 709 thousand' })
    expect(retry.at(-1).role).toBe('user')
    expect(retry.at(-1).content).toContain('not JSON')
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should send no response format for a thread without an output schema', async () => {
    server.push({ kind: 'text', text: 'hello' })
    await adapter().generate(request([{ role: 'user', content: 'Hi' }]))
    expect(server.requests[0]!.body.response_format).toBeUndefined()
  })
})

describe('aiSdkModel streaming', () => {
  /** A request someone listens to, and the parts it was handed. */
  function streamed(messages: Message[], over: Partial<ModelRequest> = {}) {
    const parts: ModelStreamPart[] = []
    return { parts, request: request(messages, { streaming: true, emit: (part) => parts.push(part), ...over }) }
  }

  it('should stream the text in order and return the reply a plain call gives', async () => {
    server.push({ kind: 'text', text: 'Oslo is the largest city.', chunkChars: 5, usage: { promptTokens: 12, completionTokens: 6 } })
    const { parts, request: req } = streamed([{ role: 'user', content: 'Largest city?' }])
    const response = await adapter().generate(req)

    expect(server.requests[0]!.body.stream).toBe(true)
    expect(parts.map((p) => p.type)).toEqual(['text', 'text', 'text', 'text', 'text'])
    expect(parts.map((p) => (p as { text: string }).text).join('')).toBe('Oslo is the largest city.')
    expect(response).toEqual({ text: 'Oslo is the largest city.', toolCalls: [], usage: { inputTokens: 12, outputTokens: 6 } })
  })

  it('should stream a tool call as its start and its input in pieces, and return it parsed', async () => {
    server.push({ kind: 'toolCalls', calls: [{ id: 'call_abc', name: 'lookup', arguments: { q: 'Oslo' } }], chunkChars: 3 })
    const { parts, request: req } = streamed([{ role: 'user', content: 'Find Oslo' }])
    const response = await adapter().generate(req)

    expect(parts[0]).toEqual({ type: 'tool_call', callId: 'call_abc', toolName: 'lookup' })
    const inputs = parts.slice(1)
    expect(inputs.length).toBeGreaterThan(1)
    expect(inputs.every((p) => p.type === 'tool_input' && p.callId === 'call_abc')).toBe(true)
    expect(inputs.map((p) => (p as { text: string }).text).join('')).toBe('{"q":"Oslo"}')
    expect(response).toEqual({ text: '', toolCalls: [{ id: 'call_abc', name: 'lookup', input: { q: 'Oslo' } }], usage: { inputTokens: 10, outputTokens: 5 } })
  })

  it('should make a plain call, streaming nothing, when nobody listens', async () => {
    server.push({ kind: 'text', text: 'hello' })
    const parts: ModelStreamPart[] = []
    const response = await adapter().generate(request([{ role: 'user', content: 'Hi' }], { streaming: false, emit: (part) => parts.push(part) }))
    expect(server.requests[0]!.body.stream).toBeUndefined()
    expect(parts).toEqual([])
    expect(response.text).toBe('hello')
  })

  it('should throw a connection cut half way, classified transient as a failed call is, after the parts that came', async () => {
    server.push({ kind: 'text', text: 'This reply will never be whole.', chunkChars: 4, cutAfterChunks: 3 })
    const { parts, request: req } = streamed([{ role: 'user', content: 'hi' }])
    const error = await failure(adapter().generate(req))

    expect(server.requests[0]!.stream).toMatchObject({ chunks: 3, cut: true })
    expect(parts.map((p) => (p as { text: string }).text).join('')).toBe('This rep')
    expect(classifyError(error, NOW).failure.category).toBe('transient')
  })

  it('should throw a 429 refused before the stream as it is, with its status and retry-after', async () => {
    server.push({ kind: 'rateLimited', retryAfter: 2 })
    const { parts, request: req } = streamed([{ role: 'user', content: 'hi' }])
    const error = await failure(adapter().generate(req))
    expect(APICallError.isInstance(error)).toBe(true)
    expect(parts).toEqual([])
    expect(classifyError(error, NOW)).toMatchObject({ failure: { category: 'rate_limited', status: 429, code: 'rate_limit_exceeded' }, retryAfterMs: 2000 })
  })

  it('should stop the stream at once when the signal is aborted, closing the connection', async () => {
    server.push({ kind: 'text', text: 'a long reply that streams slowly, piece by piece', chunkChars: 2, chunkDelayMs: 200 })
    const controller = new AbortController()
    const { parts, request: req } = streamed([{ role: 'user', content: 'hi' }], {
      signal: controller.signal,
      emit: (part) => {
        parts.push(part)
        if (parts.length === 2) controller.abort(new Error('model call stopped'))
      },
    })
    const error = await failure(adapter().generate(req))

    expect(error).toMatchObject({ message: 'model call stopped' })
    expect(parts).toHaveLength(2)
    await eventuallyTrue(() => server.requests[0]!.stream?.closedByClient === true)
    expect(server.requests[0]!.stream!.chunks).toBeLessThan(10)
  })

  it('should stream a structured answer as its JSON text, asking for the schema as a plain call does', async () => {
    const schema = z.toJSONSchema(z.object({ city: z.string() }), { io: 'input' }) as Record<string, unknown>
    server.push({ kind: 'text', text: '{"city":"Oslo"}', chunkChars: 4 })
    const { parts, request: req } = streamed([{ role: 'user', content: 'Largest city?' }], { outputSchema: schema })
    const response = await adapter().generate(req)
    expect(server.requests[0]!.body.response_format.type).toBe('json_schema')
    expect(parts.map((p) => (p as { text: string }).text).join('')).toBe('{"city":"Oslo"}')
    expect(response.text).toBe('{"city":"Oslo"}')
  })

  it('should hand back, as text, a streamed answer that is not the schema, for spindle to judge', async () => {
    const schema = z.toJSONSchema(z.object({ city: z.string() }), { io: 'input' }) as Record<string, unknown>
    server.push({ kind: 'text', text: 'Oslo, I think' })
    const { request: req } = streamed([{ role: 'user', content: 'Largest city?' }], { outputSchema: schema })
    expect(await adapter().generate(req)).toMatchObject({ text: 'Oslo, I think', toolCalls: [] })
  })
})

/** Polls `condition` on the event loop (the server's side of a closed connection lands a little later). */
async function eventuallyTrue(condition: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition never held')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}
