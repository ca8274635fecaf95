/**
 * Issue 23, item 5: waiting for the outside world. Setup: a runtime with the built-in `ask_human`
 * tool, and a tool that starts something outside and hands its call to `waitForAnswer`. What must
 * hold: the thread suspends (`waiting`) with no live actor, at a request that says what is asked;
 * an answer — through the API, or a response file from another process — becomes the call's
 * result and the thread goes on; a deadline gives a WAIT_TIMED_OUT result; a tool that waits ran
 * once; a thread waiting is not resumed, approved or answered by mistake; the transcript replays
 * to the same snapshot.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { ThreadHandle } from '../../src/index.js'
import { askHuman, defineTool, pendingApprovals, respondToApproval, scriptedModel, waitForAnswer } from '../../src/index.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { eventually, until } from '../helpers/threads.js'
import { recording, resultOf } from '../helpers/recordingModel.js'

const runtime = testRuntimes()

const waiting = (thread: ThreadHandle) => until(thread, (view) => view.suspendReason === 'waiting' && view.pendingCall !== null)

const ASK = { id: 'q1', name: 'ask_human', input: { question: 'Which region?', choices: ['eu', 'us'] } }

describe('waiting for an answer', () => {
  it('should suspend at ask_human with the question, and give the model the answer as the call result', async () => {
    const { model, requests } = recording([{ toolCalls: [ASK] }, { text: 'going with eu' }])
    const rt = await runtime({ model, tools: [askHuman()] })
    const thread = await rt.spawn({ directive: { name: 'setup', prompt: 'Set up' } })
    const view = await waiting(thread)
    expect(view.status).toBe('suspended')
    expect(view.pendingCall).toMatchObject({ kind: 'wait', tool: 'ask_human', callId: 'q1', request: { question: 'Which region?', choices: ['eu', 'us'] }, deadlineAt: null })
    // No live actor while it waits: any process may answer.
    await eventually(rt, () => rt.active().every((t) => t.id !== thread.id))
    const requestFile = path.join(rt.dir, 'threads', thread.id, 'approvals', `${view.pendingCall!.requestId}.request.json`)
    await eventually(rt, () => fs.existsSync(requestFile))
    expect(JSON.parse(fs.readFileSync(requestFile, 'utf8'))).toMatchObject({ kind: 'question', tool: 'ask_human', request: { question: 'Which region?' } })

    const resumed = await rt.answer(thread.id, 'eu', { by: 'ada' })
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'going with eu' })
    expect(resultOf(requests, 'q1')).toBe('eu')
    expect(JSON.parse(fs.readFileSync(requestFile.replace('.request.json', '.decision.json'), 'utf8'))).toMatchObject({ decision: 'answered', by: 'ada', answer: 'eu' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should take an answer written as a response file by another process', async () => {
    const { model, requests } = recording([{ toolCalls: [ASK] }, { text: 'ok' }])
    const rt = await runtime({ model, tools: [askHuman()] })
    const thread = await rt.spawn({ directive: { name: 'setup', prompt: 'Set up' } })
    await waiting(thread)
    await eventually(rt, () => {
      try {
        respondToApproval(rt.dir, thread.id, { answer: { region: 'us', note: 'cheaper' }, by: 'ops' })
        return true
      } catch {
        return false
      }
    })
    await rt.checkRequests()
    expect(await eventually(rt, () => rt.get(thread.id)?.getSnapshot().status === 'completed')).toBe(true)
    expect(resultOf(requests, 'q1')).toEqual({ region: 'us', note: 'cheaper' })
  })

  it('should end the wait with WAIT_TIMED_OUT at its deadline, and the thread goes on', async () => {
    const { model, requests } = recording([{ toolCalls: [ASK] }, { text: 'no answer, assuming eu' }])
    const rt = await runtime({ model, tools: [askHuman({ deadlineMs: 3_600_000 })] })
    const thread = await rt.spawn({ directive: { name: 'setup', prompt: 'Set up' } })
    const view = await waiting(thread)
    expect(view.pendingCall!.deadlineAt).toBe(rt.clock.now() + 3_600_000)
    rt.clock.increment(3_600_001)
    expect(await eventually(rt, () => rt.get(thread.id)?.getSnapshot().status === 'completed')).toBe(true)
    expect(resultOf(requests, 'q1')).toMatchObject({ error: 'WAIT_TIMED_OUT' })
    await expect(rt.answer(thread.id, 'late')).rejects.toMatchObject({ code: 'THREAD_NOT_SUSPENDED' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should run a waiting tool once, and make the event it waits for its result', async () => {
    const started: string[] = []
    const ci = defineTool({
      name: 'run_ci',
      description: 'Start a CI run and wait for it to finish',
      input: z.object({ ref: z.string() }),
      execute: ({ ref }, { idempotencyKey }) => (started.push(`${ref}@${idempotencyKey}`), waitForAnswer({ awaiting: 'ci', ref })),
    })
    const { model, requests } = recording([{ toolCalls: [{ id: 'c', name: 'run_ci', input: { ref: 'main' } }] }, { text: 'CI passed' }])
    const rt = await runtime({ model, tools: [ci] })
    const thread = await rt.spawn({ directive: { name: 'release', prompt: 'Release' } })
    expect((await waiting(thread)).pendingCall!.request).toEqual({ awaiting: 'ci', ref: 'main' })
    // The webhook handler of the host, on CI's callback:
    await rt.answer(thread.id, { status: 'passed', url: 'https://ci.example/1' }, { by: 'webhook ci' })
    expect(await rt.get(thread.id)!.done).toMatchObject({ status: 'completed' })
    expect(started).toHaveLength(1)
    expect(resultOf(requests, 'c')).toEqual({ status: 'passed', url: 'https://ci.example/1' })
  })

  it('should refuse what does not fit a thread that waits for an answer, deciding nothing', async () => {
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [ASK] }, { text: 'ok' }]), tools: [askHuman()] })
    const thread = await rt.spawn({ directive: { name: 'setup', prompt: 'Set up' } })
    const view = await waiting(thread)
    await expect(rt.approve(thread.id)).rejects.toMatchObject({ code: 'NO_PENDING_APPROVAL' })
    await expect(rt.resume(thread.id)).rejects.toMatchObject({ code: 'NO_PENDING_APPROVAL' })
    await expect(rt.answer(thread.id, undefined)).rejects.toMatchObject({ code: 'INVALID_OPTIONS' })
    await expect(rt.answer(thread.id, 'eu', { requestId: 'wait-0-x' })).rejects.toMatchObject({ code: 'NO_PENDING_APPROVAL' })
    await eventually(rt, () => fs.existsSync(path.join(rt.dir, 'threads', thread.id, 'approvals', `${view.pendingCall!.requestId}.request.json`)))
    expect(() => respondToApproval(rt.dir, thread.id, { approved: true })).toThrow(/waits for an answer/)
    const resumed = await rt.answer(thread.id, 'eu', { requestId: view.pendingCall!.requestId })
    expect(await resumed.done).toMatchObject({ status: 'completed' })
  })

  it('should let a cancel end a thread that waits, and close its request', async () => {
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [ASK] }, { text: 'ok' }]), tools: [askHuman()] })
    const thread = await rt.spawn({ directive: { name: 'setup', prompt: 'Set up' } })
    const view = await waiting(thread)
    const cancelled = await rt.cancel(thread.id, 'no longer needed')
    expect(cancelled).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled' } })
    const decision = path.join(rt.dir, 'threads', thread.id, 'approvals', `${view.pendingCall!.requestId}.decision.json`)
    // Its request closes: decided next to it, or (cancelled before it was written) never written.
    const request = decision.replace('.decision.json', '.request.json')
    await rt.settle()
    if (fs.existsSync(request)) expect(JSON.parse(fs.readFileSync(decision, 'utf8'))).toMatchObject({ decision: 'cancelled' })
    else expect(fs.existsSync(decision)).toBe(false)
    expect(pendingApprovals(rt.dir, thread.id)).toEqual([])
  })
})
