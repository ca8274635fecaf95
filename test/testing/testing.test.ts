/**
 * The `spindle/testing` entry point, used the way a user's test would use it.
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { TestRuntime } from '../../src/testing.js'
import { checkTranscriptReplays, createTestRuntime, readThreadFiles, scriptedModel, threadMachine } from '../../src/testing.js'

let rt: TestRuntime | null = null
afterEach(async () => {
  await rt?.cleanup()
  rt = null
})

describe('createTestRuntime', () => {
  it('should pass a rate-limit wait in simulated time and replay to the stored state', async () => {
    rt = await createTestRuntime({
      model: scriptedModel([{ faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '30' } }], reply: { text: 'after the wait' } }]),
    })
    const thread = await rt.spawn({ directive: { name: 'patient', prompt: 'p' } })
    await rt.settle()
    expect(thread.getSnapshot().retry?.dueAt).toBe(rt.clock.now() + 30_000)
    await rt.advance(29_999)
    expect(JSON.stringify(thread.getSnapshot().state)).toContain('waitingToRetry')
    await rt.advance(1)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'after the wait' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('checkTranscriptReplays', () => {
  it('should report where a recorded transcript stops replaying on a changed machine', async () => {
    rt = await createTestRuntime({
      model: scriptedModel([{ toolCalls: [{ name: 'missing', input: {} }] }, { text: 'done' }]),
    })
    const thread = await rt.spawn({ directive: { name: 'recorded', prompt: 'p' } })
    await thread.done
    const { entries } = readThreadFiles(rt.dir, thread.id)

    expect(checkTranscriptReplays(entries)).toMatchObject({ replays: true, result: { status: 'completed' } })

    // A changed machine that never runs tools: the recorded tool result no longer fits.
    const changed = threadMachine.provide({ guards: { replyHasToolCalls: () => false } })
    const outcome = checkTranscriptReplays(entries, changed)
    const toolDone = entries.find((e) => e.type === 'TOOL_DONE')!
    expect(outcome).toMatchObject({ replays: false, divergence: { seq: toolDone.seq, type: 'TOOL_DONE', state: 'completed' } })
    expect(outcome.replays === false && outcome.message).toContain(`seq ${toolDone.seq}`)
  })
})
