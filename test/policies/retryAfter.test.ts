/**
 * Retry waits chosen from what a provider's HTTP answer says, end to end: a real HTTP server on
 * 127.0.0.1, the real @ai-sdk/openai provider through `aiSdkModel`, a spindle runtime. The wait a
 * thread chose is read from its state (`retry.dueAt`) on a simulated clock, or — for a wait past a
 * Node timer's range — on the real clock.
 */
import fs from 'node:fs'
import { createOpenAI } from '@ai-sdk/openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { aiSdkModel } from '../../src/aiSdk.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import type { ModelAdapter, ModelRequest } from '../../src/index.js'
import { parseRetryAfter } from '../../src/policies/classifyError.js'
import { readThreadFiles } from '../../src/testing.js'
import type { OpenAIServer } from '../helpers/openaiServer.js'
import { startOpenAIServer } from '../helpers/openaiServer.js'
import { tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { inState, until } from '../helpers/threads.js'

const runtime = testRuntimes()
let server: OpenAIServer

beforeAll(async () => {
  server = await startOpenAIServer()
})
afterAll(async () => {
  await server.close()
})

function adapter() {
  return aiSdkModel({ model: createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'test-key' }).chat('gpt-4o-mini') })
}

const rateLimitBody = { error: { message: 'Rate limit reached', type: 'requests', param: null, code: 'rate_limit_exceeded' } }

describe('an invalid Retry-After counts as absent', () => {
  it.each(['-1', '5, 5', '10 20'])('should not read %j as a date in the past (a retry at once)', (value) => {
    expect(parseRetryAfter({ 'retry-after': value }, Date.UTC(2026, 0, 1))).toBeUndefined()
  })

  it('should still read HTTP dates and seconds', () => {
    const now = Date.UTC(2026, 0, 1)
    expect(parseRetryAfter({ 'retry-after': new Date(now + 10_000).toUTCString() }, now)).toBe(10_000)
    expect(parseRetryAfter({ 'retry-after': 'Thursday, 01-Jan-26 00:00:07 GMT' }, now)).toBe(7_000)
    expect(parseRetryAfter({ 'retry-after': '3' }, now)).toBe(3_000)
  })

  it('should wait rateLimitDefaultMs after a 429 whose Retry-After is "-1", not burn every retry at once', async () => {
    const rt = await runtime({ model: adapter(), retry: { rateLimitDefaultMs: 30_000 } })
    server.push({ kind: 'error', status: 429, headers: { 'retry-after': '-1' }, body: rateLimitBody }, { kind: 'text', text: 'after the wait' })
    const thread = await rt.spawn({ directive: { name: 'limited', prompt: 'p' } })
    const waiting = await until(thread, inState('waitingToRetry'))
    expect(waiting.retry!.dueAt - rt.clock.now()).toBe(30_000)
    await rt.advance(30_000)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'after the wait' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('a 503 with Retry-After', () => {
  it('should not be retried before the time the server asked for', async () => {
    const rt = await runtime({ model: adapter(), retry: { baseMs: 2000, jitter: 0 } })
    server.push({ kind: 'error', status: 503, headers: { 'retry-after': '7' } }, { kind: 'text', text: 'back' })
    const thread = await rt.spawn({ directive: { name: 'overloaded', prompt: 'p' } })
    const waiting = await until(thread, inState('waitingToRetry'))
    expect(waiting.retry!.failure).toMatchObject({ category: 'transient', status: 503 })
    expect(waiting.retry!.dueAt - rt.clock.now()).toBe(7_000)
    await rt.advance(7_000)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'back' })
    const classified = readThreadFiles(rt.dir, thread.id).entries.find((e) => e.type === 'error_classified')!.data
    expect(classified).toMatchObject({ retryAfterMs: 7_000, retryInMs: 7_000 })
  })
})

describe('a retry wait longer than a Node timer can take', () => {
  it('should keep waiting (a 30-day Retry-After), not retry after 1 ms', async () => {
    const dir = tempDir('spindle-longwait')
    const script = scriptedModel([
      { faults: [{ fault: 'http', status: 429, headers: { 'retry-after': String(30 * 24 * 3600) } }], reply: { text: 'a month later' } },
    ])
    let calls = 0
    const model: ModelAdapter = { ...script, generate: (request: ModelRequest) => (calls++, script.generate(request)) }
    const warnings: string[] = []
    const onWarning = (warning: Error): void => void warnings.push(warning.name)
    process.on('warning', onWarning)
    const rt = await createRuntime({ dir, model, userConfig: null, durability: 'process' })
    try {
      const thread = await rt.spawn({ directive: { name: 'patient', prompt: 'p' } })
      await until(thread, inState('waitingToRetry'))
      // Real time: a timer that overflowed fires after 1 ms and the thread would be done by now.
      await new Promise((resolve) => setTimeout(resolve, 200))
      expect(thread.getSnapshot().state).toEqual({ running: 'waitingToRetry' })
      expect(calls).toBe(1)
      expect(warnings).not.toContain('TimeoutOverflowWarning')
      expect(await rt.cancel(thread.id, 'no month to wait')).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled' } })
    } finally {
      process.off('warning', onWarning)
      await rt.close()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
