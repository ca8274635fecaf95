/**
 * Issue 22, item 2: `timeouts.modelMs` abandons a model call whatever its adapter does with the
 * abort signal. Setup: a real adapter that ignores its signal — it never answers, or answers
 * after the deadline; fault: the deadline passes (simulated time); what must hold: the attempt
 * fails as a transient MODEL_TIMEOUT, the thread retries or ends as its retry policy says, no late
 * reply reaches the transcript or the machine, and the transcript replays to state.json.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import type { ModelAdapter, ModelRequest, ModelResponse } from '../../src/index.js'
import { scriptedModel } from '../../src/index.js'
import type { TestRuntime } from '../../src/testing.js'
import { eventually } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

const MODEL_MS = 300
const RETRY_MS = 1_000

function reply(text: string): ModelResponse {
  return { text, toolCalls: [], usage: { inputTokens: 10, outputTokens: 5 } }
}

/**
 * An adapter that never looks at `request.signal`. The first attempt of each turn is left to
 * `first` (never answering, or answering when the test says); later attempts answer at once.
 */
function deafModel(first: (request: ModelRequest) => Promise<ModelResponse>): ModelAdapter & { calls: ModelRequest[] } {
  const calls: ModelRequest[] = []
  return {
    name: 'deaf',
    calls,
    generate: (request) => {
      calls.push(request)
      return request.attempt === 1 ? first(request) : Promise.resolve(reply(`answered on attempt ${request.attempt}`))
    },
  }
}

function transcript(rt: TestRuntime, id: string): Array<{ type: string; data: Record<string, any> }> {
  return fs
    .readFileSync(path.join(rt.dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line))
}

async function callStarted(rt: TestRuntime, model: { calls: ModelRequest[] }, count: number): Promise<void> {
  expect(await eventually(rt, () => model.calls.length >= count)).toBe(true)
}

describe('timeouts.modelMs', () => {
  it('should abandon a call whose adapter ignores its signal and never answers, and retry it', async () => {
    const model = deafModel(() => new Promise(() => {}))
    const rt = await runtime({ model, timeouts: { modelMs: MODEL_MS }, retry: { baseMs: RETRY_MS, jitter: 0 } })
    const thread = await rt.spawn({ directive: { name: 'deaf', prompt: 'p' } })
    await callStarted(rt, model, 1)

    await rt.advance(MODEL_MS)

    expect(thread.getSnapshot().state).toEqual({ running: 'waitingToRetry' })
    expect(thread.getSnapshot().retry).toMatchObject({ failure: { category: 'transient', code: 'MODEL_TIMEOUT' } })
    await rt.advance(RETRY_MS)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'answered on attempt 2' })
    const failed = transcript(rt, thread.id).filter((e) => e.type === 'MODEL_FAILED')
    expect(failed).toEqual([expect.objectContaining({ data: expect.objectContaining({ attempt: 1, error: expect.objectContaining({ category: 'transient', code: 'MODEL_TIMEOUT' }) }) })])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should never record a reply that comes after the deadline, and go on with the retry', async () => {
    let answerLate!: (response: ModelResponse) => void
    const model = deafModel(() => new Promise((resolve) => (answerLate = resolve)))
    const rt = await runtime({ model, timeouts: { modelMs: MODEL_MS }, retry: { baseMs: RETRY_MS, jitter: 0 } })
    const thread = await rt.spawn({ directive: { name: 'late', prompt: 'p' } })
    await callStarted(rt, model, 1)

    await rt.advance(MODEL_MS)
    expect(thread.getSnapshot().state).toEqual({ running: 'waitingToRetry' })
    // The fault: the abandoned call answers now, while the thread waits to retry.
    answerLate({ text: 'the late reply', toolCalls: [], usage: { inputTokens: 999, outputTokens: 999 } })
    await rt.settle()

    expect(thread.getSnapshot().state).toEqual({ running: 'waitingToRetry' })
    await rt.advance(RETRY_MS)
    const outcome = await thread.done
    expect(outcome).toMatchObject({ status: 'completed', result: 'answered on attempt 2' })
    // Its usage was never counted either: only the retry's reply is.
    expect(outcome.cost).toMatchObject({ turns: 1, inputTokens: 10, outputTokens: 5 })
    const entries = transcript(rt, thread.id)
    expect(JSON.stringify(entries)).not.toContain('the late reply')
    expect(entries.filter((e) => e.type === 'MODEL_REPLIED').map((e) => e.data.attempt)).toEqual([2])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should suspend the thread with MODEL_TIMEOUT when the retry policy allows no retry', async () => {
    const model = deafModel(() => new Promise(() => {}))
    const rt = await runtime({ model, timeouts: { modelMs: MODEL_MS }, retry: { maxRetries: 0 } })
    const thread = await rt.spawn({ directive: { name: 'once', prompt: 'p' } })
    await callStarted(rt, model, 1)

    await rt.advance(MODEL_MS)

    expect(thread.getSnapshot().status).toBe('suspended')
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'error', error: { code: 'MODEL_TIMEOUT' } })
    expect(model.calls).toHaveLength(1)
    expect(transcript(rt, thread.id).some((e) => e.type === 'MODEL_REPLIED')).toBe(false)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should abandon a call whose adapter heeds its signal the same way', async () => {
    const model = scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: 'answered after the hang' } }])
    const rt = await runtime({ model, timeouts: { modelMs: MODEL_MS }, retry: { baseMs: RETRY_MS, jitter: 0 } })
    const thread = await rt.spawn({ directive: { name: 'hang', prompt: 'p' } })
    await rt.settle()

    await rt.advance(MODEL_MS)

    expect(thread.getSnapshot().retry).toMatchObject({ failure: { category: 'transient', code: 'MODEL_TIMEOUT' } })
    await rt.advance(RETRY_MS)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'answered after the hang' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})
