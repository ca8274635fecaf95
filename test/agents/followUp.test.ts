/**
 * Issue 23, item 7: conversations that go on. Setup: a completed thread spawned by host code, given
 * the next user message with `rt.followUp`. What must hold: its successor carries the whole
 * conversation (the message last), the directive, the limits and the usage on; the lineage shows in
 * `chain`; a thread already followed up, one not completed and a child are refused with
 * FOLLOW_UP_REFUSED; a runtime that did not run the thread follows it up from the directory; the
 * successor's transcript replays to its snapshot.
 */
import { describe, expect, it } from 'vitest'
import { isSpindleError, scriptedModel } from '../../src/index.js'
import type { Script } from '../../actors/scriptedModel.js'
import { tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { recording } from '../helpers/recordingModel.js'

const runtime = testRuntimes()

async function refusal(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  const error = await promise.then(() => null, (e: unknown) => e)
  expect(isSpindleError(error), String(error)).toBe(true)
  return error as { code: string; message: string }
}

const capitals: Script = (request) => {
  const last = request.messages.at(-1)!
  return { text: last.content.includes('Germany') ? 'Berlin' : last.content.includes('Spain') ? 'Madrid' : 'Paris' }
}

describe('rt.followUp', () => {
  it('should carry the whole conversation, the directive and the usage into the follow-up, with the message last', async () => {
    const { model, requests } = recording(capitals)
    const rt = await runtime({ model })
    const first = await rt.spawn({ directive: { name: 'chat', prompt: 'Capital of France?', instructions: 'Answer with one word.' } })
    expect(await first.done).toMatchObject({ status: 'completed', result: 'Paris' })
    const next = await rt.followUp(first.id, 'And Germany?')
    expect(await next.done).toMatchObject({ status: 'completed', result: 'Berlin', cost: { turns: 2 } })
    expect(requests.at(-1)!.messages).toEqual([
      { role: 'user', content: 'Capital of France?' },
      { role: 'assistant', content: 'Paris' },
      { role: 'user', content: 'And Germany?' },
    ])
    expect(requests.at(-1)!.instructions).toBe('Answer with one word.')
    expect(rt.chain(first.id).map((r) => r.id)).toEqual([first.id, next.id])
    expect(rt.chain(next.id).at(-1)).toMatchObject({ id: next.id, previousThreadId: first.id, parentId: null })
    // The first exchange keeps its own outcome.
    expect(rt.get(first.id).getSnapshot()).toMatchObject({ status: 'completed', result: 'Paris' })
    expect(rt.checkReplay(next.id).matches).toBe(true)

    const third = await rt.followUp(next.id, 'And Spain?')
    expect(await third.done).toMatchObject({ result: 'Madrid', cost: { turns: 3 } })
    expect(requests.at(-1)!.messages.map((m) => m.content)).toEqual(['Capital of France?', 'Paris', 'And Germany?', 'Berlin', 'And Spain?'])
  })

  it('should refuse a second follow-up of the same thread, naming the latest thread of the conversation', async () => {
    const rt = await runtime({ model: scriptedModel(capitals) })
    const first = await rt.spawn({ directive: { name: 'chat', prompt: 'Capital of France?' } })
    await first.done
    const next = await rt.followUp(first.id, 'And Germany?')
    await next.done
    const again = await refusal(rt.followUp(first.id, 'And Spain?'))
    expect(again.code).toBe('FOLLOW_UP_REFUSED')
    expect(again.message).toContain(`was already followed up by ${next.id}: send the next message to the conversation's latest thread, ${next.id}`)
    expect(rt.list().map((r) => r.id).sort()).toEqual([first.id, next.id].sort())
  })

  it('should refuse a thread that has not completed, and a child', async () => {
    const rt = await runtime({
      model: scriptedModel((r) => (r.directiveName === 'lead' && r.turn === 1 ? { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'k' } }] } : { text: 'ok' })),
    })
    const capped = await rt.spawn({ directive: { name: 'lead', prompt: 'p' }, limits: { turns: 1 } })
    expect(await capped.done).toMatchObject({ status: 'suspended' })
    const suspended = await refusal(rt.followUp(capped.id, 'more'))
    expect(suspended).toMatchObject({ code: 'FOLLOW_UP_REFUSED' })
    expect(suspended.message).toContain(`Thread ${capped.id} is suspended: a follow-up goes to a completed thread`)
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'p' } })
    await lead.done
    await rt.settle()
    const child = rt.list().find((r) => r.parentId === lead.id)!
    expect(child.status).toBe('completed')
    expect((await refusal(rt.followUp(child.id, 'more'))).message).toContain(`is a child of ${lead.id}`)
    expect((await refusal(rt.followUp(lead.id, '  '))).code).toBe('INVALID_OPTIONS')
  })

  it('should keep counting the limits over the whole conversation: a follow-up past them suspends for approval', async () => {
    const rt = await runtime({ model: scriptedModel(capitals) })
    const first = await rt.spawn({ directive: { name: 'chat', prompt: 'Capital of France?' }, limits: { turns: 1 } })
    await first.done
    const next = await rt.followUp(first.id, 'And Germany?')
    expect(await next.done).toMatchObject({ status: 'suspended' })
    expect(next.getSnapshot().limitHit).toMatchObject({ limit: 'turns', used: 1, max: 1 })
    const raised = await rt.followUp(first.id, 'x').catch((e: unknown) => e)
    expect(isSpindleError(raised) && raised.code).toBe('FOLLOW_UP_REFUSED')
    const approved = await rt.approve(next.id, { limits: { turns: 5 } })
    expect(await approved.done).toMatchObject({ status: 'completed', result: 'Berlin' })
  })

  it('should follow up a thread from a runtime that did not run it', async () => {
    const dir = tempDir('spindle-follow-up')
    const first = await runtime({ dir, model: scriptedModel(capitals) })
    const thread = await first.spawn({ directive: { name: 'chat', prompt: 'Capital of France?' } })
    await thread.done
    await first.close()
    const { model, requests } = recording(capitals)
    const second = await runtime({ dir, model })
    const next = await second.followUp(thread.id, 'And Germany?')
    expect(await next.done).toMatchObject({ status: 'completed', result: 'Berlin' })
    expect(requests.map((r) => r.messages.length)).toEqual([3])
  })
})
