/**
 * Issue 24, item 1: streamed replies, end to end. A runtime on the AI SDK adapter against the
 * loopback OpenAI-protocol server sending server-sent events (and on the streaming scripted model).
 * Setup: a host listening with `rt.replies`, `rt.onReply` or `handle.replies`. Faults: a connection
 * cut half way, a cancel mid-stream, a call past its deadline, the runtime closing mid-stream. What
 * must hold: deltas arrive in order before the reply is recorded and add up to it; what streamed of
 * a broken attempt is marked discarded and the retry streams as the next attempt; the transcript
 * holds one reply per turn and replays to the same snapshot; a cancel closes the connection at once.
 */
import { createOpenAI } from '@ai-sdk/openai'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { aiSdkModel } from '../../src/aiSdk.js'
import { defineTool } from '../../src/index.js'
import { REPLY_BUFFER_LIMIT } from '../../src/index.js'
import type { ReplyDelta } from '../../src/index.js'
import { createTestRuntime, readThreadFiles, scriptedModel } from '../../src/testing.js'
import type { TestRuntime } from '../../src/testing.js'
import type { OpenAIServer } from '../helpers/openaiServer.js'
import { startOpenAIServer } from '../helpers/openaiServer.js'
import { eventually, inState, until } from '../helpers/threads.js'

let server: OpenAIServer
let rt: TestRuntime | null = null

beforeAll(async () => {
  server = await startOpenAIServer()
})
afterAll(async () => {
  await server.close()
})
afterEach(async () => {
  await rt?.cleanup()
  rt = null
  expect(server.pending(), 'every scripted reply was used').toBe(0)
  server.requests.length = 0
})

function openai() {
  return aiSdkModel({ model: createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'test-key' }).chat('gpt-4o-mini') })
}

const lookup = defineTool({
  name: 'lookup',
  description: 'Look a term up',
  input: z.object({ q: z.string() }),
  idempotent: true,
  execute: async ({ q }) => ({ q, answer: 42 }),
})

/** Reads `iterator` into an array until `stop` says the last delta read is the last wanted. */
async function collect(iterator: AsyncIterableIterator<ReplyDelta>, stop: (delta: ReplyDelta) => boolean = () => false): Promise<ReplyDelta[]> {
  const seen: ReplyDelta[] = []
  for await (const delta of iterator) {
    seen.push(delta)
    if (stop(delta)) break
  }
  return seen
}

const textOf = (deltas: readonly ReplyDelta[]): string => deltas.map((d) => (d.type === 'text' ? d.text : '')).join('')

/** The recorded replies of a thread's transcript. */
function replies(threadId: string) {
  return readThreadFiles(rt!.dir, threadId).entries.filter((e) => e.type === 'MODEL_REPLIED').map((e) => e.data as { turn: number; attempt: number; text: string })
}

describe('streamed replies', () => {
  it('should deliver text deltas in order before the reply is recorded, adding up to the recorded text', async () => {
    rt = await createTestRuntime({ model: openai() })
    server.push({ kind: 'text', text: 'Oslo is the largest city of Norway.', chunkChars: 6 })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'geo', prompt: 'Largest city of Norway?' } })
    const deltas = await collect(stream, (d) => d.type === 'reply_recorded')
    const outcome = await thread.done

    expect(deltas.map((d) => d.type)).toEqual([...Array(6).fill('text'), 'reply_recorded'])
    expect(deltas.every((d) => d.threadId === thread.id && d.turn === 1 && d.attempt === 1)).toBe(true)
    expect(textOf(deltas)).toBe('Oslo is the largest city of Norway.')
    expect(outcome).toMatchObject({ status: 'completed', result: 'Oslo is the largest city of Norway.' })
    expect(replies(thread.id)).toEqual([expect.objectContaining({ turn: 1, attempt: 1, text: 'Oslo is the largest city of Norway.' })])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should deliver a tool call as its start and its input in pieces, then the next turn', async () => {
    rt = await createTestRuntime({ model: openai(), tools: [lookup] })
    server.push({ kind: 'toolCalls', calls: [{ id: 'call_1', name: 'lookup', arguments: { q: 'Oslo' } }], chunkChars: 4 }, { kind: 'text', text: 'It is 42.' })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Look Oslo up' } })
    const deltas = await collect(stream, (d) => d.type === 'reply_recorded' && d.turn === 2)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'It is 42.' })

    const first = deltas.filter((d) => d.turn === 1)
    expect(first[0]).toEqual({ threadId: thread.id, turn: 1, attempt: 1, type: 'tool_call', callId: 'call_1', toolName: 'lookup' })
    const inputs = first.slice(1, -1)
    expect(inputs.every((d) => d.type === 'tool_input' && d.callId === 'call_1')).toBe(true)
    expect(inputs.map((d) => (d as { text: string }).text).join('')).toBe('{"q":"Oslo"}')
    expect(first.at(-1)!.type).toBe('reply_recorded')
    expect(textOf(deltas.filter((d) => d.turn === 2))).toBe('It is 42.')
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should mark a stream cut half way discarded, classify it like a failed call, and stream the retry as the next attempt', async () => {
    rt = await createTestRuntime({ model: openai(), retry: { baseMs: 1000, jitter: 0 } })
    server.push({ kind: 'text', text: 'The answer is forty-two.', chunkChars: 4, cutAfterChunks: 3 }, { kind: 'text', text: 'The answer is 42.', chunkChars: 4 })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'flaky', prompt: 'What is the answer?' } })
    await until(thread, inState('waitingToRetry'))
    await rt.advance(1000)
    const deltas = await collect(stream, (d) => d.type === 'reply_recorded')
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'The answer is 42.' })

    const first = deltas.filter((d) => d.attempt === 1)
    expect(textOf(first)).toBe('The answer is forty-two.'.slice(0, 8))
    expect(first.at(-1)).toEqual({ threadId: thread.id, turn: 1, attempt: 1, type: 'reply_discarded', reason: 'failed', category: 'transient' })
    const second = deltas.filter((d) => d.attempt === 2)
    expect(textOf(second)).toBe('The answer is 42.')
    expect(second.at(-1)!.type).toBe('reply_recorded')

    const { entries } = readThreadFiles(rt.dir, thread.id)
    expect(entries.filter((e) => e.type === 'MODEL_FAILED').map((e) => e.data)).toEqual([expect.objectContaining({ turn: 1, attempt: 1, error: expect.objectContaining({ category: 'transient' }) })])
    expect(replies(thread.id)).toEqual([expect.objectContaining({ turn: 1, attempt: 2, text: 'The answer is 42.' })])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should stop the stream at once on a cancel, closing the connection, and end the thread cancelled', async () => {
    rt = await createTestRuntime({ model: openai() })
    server.push({ kind: 'text', text: 'a long answer that streams slowly, two letters at a time', chunkChars: 2, chunkDelayMs: 100 })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'slow', prompt: 'Take your time' } })
    const deltas: ReplyDelta[] = []
    for await (const delta of stream) {
      deltas.push(delta)
      if (deltas.length === 2) await rt.cancel(thread.id, 'not needed')
      if (delta.type === 'reply_discarded') break
    }

    expect(await thread.done).toMatchObject({ status: 'cancelled' })
    expect(deltas.slice(0, 2).every((d) => d.type === 'text')).toBe(true)
    expect(deltas.at(-1)).toEqual({ threadId: thread.id, turn: 1, attempt: 1, type: 'reply_discarded', reason: 'cancelled' })
    await eventually(rt, () => server.requests[0]!.stream?.closedByClient === true, 10_000)
    expect(server.requests[0]!.stream).toMatchObject({ closedByClient: true, cut: false })
    expect(server.requests[0]!.stream!.chunks).toBeLessThan(10)
    expect(replies(thread.id)).toEqual([])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it("should end a thread's own iterator when the thread completes, after its last reply is recorded", async () => {
    rt = await createTestRuntime({ model: openai(), tools: [lookup] })
    server.push({ kind: 'toolCalls', calls: [{ id: 'call_1', name: 'lookup', arguments: { q: 'X' } }] }, { kind: 'text', text: 'X is 42, as looked up.', chunkChars: 5 })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Find X' } })
    const deltas = await collect(thread.replies())

    expect(thread.status).toBe('completed')
    expect(deltas.at(-1)).toMatchObject({ type: 'reply_recorded', turn: 2 })
    expect(textOf(deltas.filter((d) => d.turn === 2))).toBe('X is 42, as looked up.')
    expect(deltas.every((d) => d.threadId === thread.id)).toBe(true)
  })

  it('should stream nothing, and make a plain call, while nobody listens', async () => {
    rt = await createTestRuntime({ model: openai() })
    server.push({ kind: 'text', text: 'plain' })
    const thread = await rt.spawn({ directive: { name: 'quiet', prompt: 'Hi' } })
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'plain' })
    expect(server.requests[0]!.body.stream).toBeUndefined()
  })
})

describe('streamed replies on the scripted model', () => {
  it("should give rt.replies({ threadId }) that thread's deltas only, and rt.onReply every thread's", async () => {
    rt = await createTestRuntime({ model: scriptedModel((request) => ({ text: `reply of ${request.directiveName}` }), { stream: { chunkChars: 3 } }) })
    const seen: ReplyDelta[] = []
    const stop = rt.onReply((delta) => seen.push(delta))
    const mine = rt.replies({ threadId: 'alpha-1' })
    const [alpha, beta] = await Promise.all([
      rt.spawn({ id: 'alpha-1', directive: { name: 'alpha', prompt: 'A' } }),
      rt.spawn({ id: 'beta-1', directive: { name: 'beta', prompt: 'B' } }),
    ])
    const deltas = await collect(mine, (d) => d.type === 'reply_recorded')
    await Promise.all([alpha.done, beta.done])
    await eventually(rt, () => seen.filter((d) => d.type === 'reply_recorded').length === 2)
    stop()

    expect(deltas.every((d) => d.threadId === 'alpha-1')).toBe(true)
    expect(textOf(deltas)).toBe('reply of alpha')
    expect(textOf(seen.filter((d) => d.threadId === 'beta-1'))).toBe('reply of beta')
  })

  it('should join the text a slow consumer has not taken yet, so it reads fewer pieces of the same text', async () => {
    rt = await createTestRuntime({ model: scriptedModel([{ text: 'x'.repeat(400) }], { stream: { chunkChars: 4 } }) })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'long', prompt: 'Write' } })
    await thread.done
    await rt.settle()
    const deltas = await collect(stream, (d) => d.type === 'reply_recorded')

    expect(deltas.map((d) => d.type)).toEqual(['text', 'reply_recorded'])
    expect(textOf(deltas)).toBe('x'.repeat(400))
  })

  it('should mark an attempt past timeouts.modelMs discarded as timed out', async () => {
    rt = await createTestRuntime({
      model: scriptedModel([{ text: 'slow words arriving' }], { stream: { chunkChars: 5, chunkDelayMs: 60_000 } }),
      timeouts: { modelMs: 5_000 },
      retry: { maxRetries: 0 },
    })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'late', prompt: 'Hurry' } })
    const first = await stream.next()
    expect(first.value).toMatchObject({ type: 'text', text: 'slow ' })
    await rt.advance(5_000)
    const next = await stream.next()

    expect(next.value).toEqual({ threadId: thread.id, turn: 1, attempt: 1, type: 'reply_discarded', reason: 'timed_out', category: 'transient' })
    await thread.done
    expect(replies(thread.id)).toEqual([])
  })

  it('should mark an attempt streaming when the runtime closes discarded as closed, and end the iterators', async () => {
    rt = await createTestRuntime({ model: scriptedModel([{ text: 'never finished here' }], { stream: { chunkChars: 5, chunkDelayMs: 60_000 } }) })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'cut', prompt: 'Go' } })
    const own = thread.replies()
    expect((await stream.next()).value).toMatchObject({ type: 'text' })
    await rt.close()

    expect((await stream.next()).value).toEqual({ threadId: thread.id, turn: 1, attempt: 1, type: 'reply_discarded', reason: 'closed' })
    expect(await stream.next()).toEqual({ value: undefined, done: true })
    expect((await collect(own)).map((d) => d.type)).toEqual(['text', 'reply_discarded'])
  })

  it('should stream a broken attempt and its retry of the scripted break fault, recording one reply', async () => {
    rt = await createTestRuntime({
      model: scriptedModel([{ faults: [{ fault: 'break', afterChars: 6 }], reply: { text: 'whole reply' } }], { stream: { chunkChars: 3 } }),
      retry: { baseMs: 1000, jitter: 0 },
    })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'broken', prompt: 'Go' } })
    await until(thread, inState('waitingToRetry'))
    await rt.advance(1000)
    const deltas = await collect(stream, (d) => d.type === 'reply_recorded')

    // Read after the fact: each attempt's pieces were joined while they waited.
    expect(deltas.map((d) => [d.attempt, d.type])).toEqual([
      [1, 'text'],
      [1, 'reply_discarded'],
      [2, 'text'],
      [2, 'reply_recorded'],
    ])
    expect(deltas[1]).toMatchObject({ reason: 'failed', category: 'transient' })
    expect(textOf(deltas.filter((d) => d.attempt === 1))).toBe('whole ')
    expect(textOf(deltas.filter((d) => d.attempt === 2))).toBe('whole reply')
    expect(replies(thread.id)).toHaveLength(1)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should keep at most REPLY_BUFFER_LIMIT deltas for a consumer that reads none, dropping the oldest', async () => {
    const calls = Array.from({ length: 600 }, () => ({ name: 'echo', input: {} }))
    const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({}), idempotent: true, execute: () => 'ok' })
    rt = await createTestRuntime({ model: scriptedModel([{ toolCalls: calls }, { text: 'done' }], { stream: true }), tools: [echo] })
    const stream = rt.replies()
    const thread = await rt.spawn({ directive: { name: 'many', prompt: 'Call a lot' } })
    await thread.done
    await eventually(rt, () => rt!.active().length === 0)
    await rt.settle()
    const deltas = await collect(stream, (d) => d.type === 'reply_recorded' && d.turn === 2)

    // 600 calls streamed as a start and an input each, then two reply ends and the answer's text.
    expect(deltas).toHaveLength(REPLY_BUFFER_LIMIT)
    expect(deltas[0]).not.toMatchObject({ callId: 'call_1_1' })
    expect(deltas.slice(-2).map((d) => [d.turn, d.type])).toEqual([
      [2, 'text'],
      [2, 'reply_recorded'],
    ])
  })

  it('should end rt.replies() when its signal aborts, and a stored handle\'s replies() at once', async () => {
    rt = await createTestRuntime({ model: scriptedModel([{ text: 'finished' }], { stream: true }) })
    const thread = await rt.spawn({ directive: { name: 'short', prompt: 'Go' } })
    await thread.done
    await eventually(rt, () => rt!.active().length === 0)
    const controller = new AbortController()
    const stream = rt.replies({ signal: controller.signal })
    const pending = stream.next()
    controller.abort()

    expect(await pending).toEqual({ value: undefined, done: true })
    expect(await collect(rt.get(thread.id).replies())).toEqual([])
  })
})
