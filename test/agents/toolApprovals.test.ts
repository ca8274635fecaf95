/**
 * Issue 23, item 4: tool approvals. Setup: a runtime whose `deploy` tool needs approval (by the
 * tool's own `needsApproval`, by configuration, by a directive), a scripted model that calls it.
 * What must hold: the thread suspends at the call (`tool_approval`) before the tool runs, with a
 * request naming the tool, its input and the call; several calls of one reply are approved one by
 * one; an approval runs the tool (with edited input, checked by the tool's schema); a denial is
 * the call's result and the loop goes on; a hook decides in a person's place; a deadline denies;
 * the request file and its decision file say what happened; the transcript replays to the same
 * snapshot.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { ThreadHandle } from '../../src/index.js'
import { defineTool, readThreadFiles, respondToApproval, scriptedModel } from '../../src/index.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { eventually, until } from '../helpers/threads.js'
import { recording, resultOf } from '../helpers/recordingModel.js'

const runtime = testRuntimes()

/** A deploy tool that counts its runs and the inputs it ran with. */
function deployTool(needsApproval: boolean | ((input: { env: string }) => boolean) = true) {
  const runs: Array<{ env: string }> = []
  const tool = defineTool({
    name: 'deploy',
    description: 'Deploy to an environment',
    input: z.object({ env: z.enum(['staging', 'production']) }),
    needsApproval,
    execute: (input) => (runs.push(input), `deployed to ${input.env}`),
  })
  return { tool, runs }
}

const waitsAtCall = (view: { suspendReason: string | null; pendingCall: unknown }) => view.suspendReason === 'tool_approval' && view.pendingCall !== null

async function suspendedAtCall(thread: ThreadHandle) {
  return until(thread, (view) => waitsAtCall(view))
}

describe('tool approvals', () => {
  it('should suspend at a call that needs approval before the tool runs, and run it once approved', async () => {
    const { tool, runs } = deployTool()
    const { model, requests } = recording([{ toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'staging' } }] }, { text: 'shipped' }])
    const rt = await runtime({ model, tools: [tool] })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })
    const view = await suspendedAtCall(thread)
    expect(view.status).toBe('suspended')
    expect(view.pendingCall).toMatchObject({ kind: 'approval', callId: 'c1', tool: 'deploy', input: { env: 'staging' }, deadlineAt: null })
    expect(runs).toEqual([])
    const requestId = view.pendingCall!.requestId
    await eventually(rt, () => fs.existsSync(path.join(rt.dir, 'threads', thread.id, 'approvals', `${requestId}.request.json`)))
    const request = JSON.parse(fs.readFileSync(path.join(rt.dir, 'threads', thread.id, 'approvals', `${requestId}.request.json`), 'utf8'))
    expect(request).toMatchObject({ kind: 'tool_approval', tool: 'deploy', callId: 'c1', input: { env: 'staging' }, threadId: thread.id })

    const resumed = await rt.approve(thread.id, { by: 'ada' })
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'shipped' })
    expect(runs).toEqual([{ env: 'staging' }])
    expect(resultOf(requests, 'c1')).toBe('deployed to staging')
    const decision = JSON.parse(fs.readFileSync(path.join(rt.dir, 'threads', thread.id, 'approvals', `${requestId}.decision.json`), 'utf8'))
    expect(decision).toMatchObject({ decision: 'approved', by: 'ada' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should run the call with the edited input an approver gives, and refuse input the tool schema rejects', async () => {
    const { tool, runs } = deployTool()
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'production' } }] }, { text: 'ok' }]), tools: [tool] })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })
    await suspendedAtCall(thread)
    await expect(rt.approve(thread.id, { input: { env: 'moon' } })).rejects.toMatchObject({ code: 'TOOL_INPUT_INVALID' })
    expect(rt.get(thread.id)?.getSnapshot().status).toBe('suspended')
    const resumed = await rt.approve(thread.id, { input: { env: 'staging' } })
    expect(await resumed.done).toMatchObject({ status: 'completed' })
    expect(runs).toEqual([{ env: 'staging' }])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should give the model the denial and its reason as the call result, and go on without running the tool', async () => {
    const { tool, runs } = deployTool()
    const { model, requests } = recording([{ toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'production' } }] }, { text: 'I will not deploy' }])
    const rt = await runtime({ model, tools: [tool] })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })
    await suspendedAtCall(thread)
    const outcome = await rt.deny(thread.id, 'not on a Friday', { by: 'ada' })
    expect(outcome).toMatchObject({ status: 'completed', result: 'I will not deploy' })
    expect(runs).toEqual([])
    expect(resultOf(requests, 'c1')).toMatchObject({ error: 'TOOL_DENIED', reason: 'not on a Friday' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should ask for each call of one reply in turn', async () => {
    const { tool, runs } = deployTool()
    const rt = await runtime({
      model: scriptedModel([
        {
          toolCalls: [
            { id: 'a', name: 'deploy', input: { env: 'staging' } },
            { id: 'b', name: 'deploy', input: { env: 'production' } },
          ],
        },
        { text: 'done' },
      ]),
      tools: [tool],
    })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Ship both' } })
    expect((await suspendedAtCall(thread)).pendingCall!.callId).toBe('a')
    const second = await rt.approve(thread.id)
    expect((await until(second, (view) => waitsAtCall(view) && view.pendingCall!.callId === 'b')).pendingCall!.input).toEqual({ env: 'production' })
    expect(runs).toEqual([{ env: 'staging' }])
    await rt.deny(thread.id, 'staging only')
    expect(runs).toEqual([{ env: 'staging' }])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should ask only when the tool says so for the input, and for tools named by configuration or the directive', async () => {
    const { tool, runs } = deployTool((input) => input.env === 'production')
    const other = defineTool({ name: 'notify', description: 'Notify', input: z.object({}), execute: () => 'sent' })
    const rt = await runtime({
      model: scriptedModel([{ toolCalls: [{ name: 'deploy', input: { env: 'staging' } }, { name: 'notify', input: {} }, { name: 'deploy', input: { env: 'production' } }] }, { text: 'done' }]),
      tools: [tool, other],
      config: { approvals: { tools: ['notify'] } },
    })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Go' } })
    const first = await suspendedAtCall(thread)
    expect(first.pendingCall!.tool).toBe('notify')
    expect(runs).toEqual([{ env: 'staging' }])
    const next = await rt.approve(thread.id)
    expect((await suspendedAtCall(next)).pendingCall!.input).toEqual({ env: 'production' })
    await (await rt.approve(next.id)).done
    expect(runs).toEqual([{ env: 'staging' }, { env: 'production' }])
  })

  it('should let a directive add tools to approve, and keep waiting past the deadline with onTimeout stay', async () => {
    const other = defineTool({ name: 'notify', description: 'Notify', input: z.object({}), execute: () => 'sent' })
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [{ id: 'n', name: 'notify', input: {} }] }, { text: 'done' }]), tools: [other] })
    const thread = await rt.spawn({ directive: { name: 'tell', prompt: 'Tell them', approvals: { tools: ['notify'], timeoutSeconds: 60, onTimeout: 'stay' } } })
    const view = await suspendedAtCall(thread)
    expect(view.pendingCall).toMatchObject({ tool: 'notify', deadlineAt: rt.clock.now() + 60_000 })
    rt.clock.increment(120_000)
    await rt.settle()
    expect(rt.get(thread.id)?.getSnapshot()).toMatchObject({ status: 'suspended', suspendReason: 'tool_approval' })
    expect(await (await rt.approve(thread.id)).done).toMatchObject({ status: 'completed' })
  })

  it('should let a tool_approval hook approve or deny in place of a person, recording who decided', async () => {
    const { tool, runs } = deployTool()
    const { model, requests } = recording([{ toolCalls: [{ id: 's', name: 'deploy', input: { env: 'staging' } }, { id: 'p', name: 'deploy', input: { env: 'production' } }] }, { text: 'done' }])
    const rt = await runtime({
      model,
      tools: [tool],
      hooks: [
        { id: 'staging-ok', event: 'tool_approval', when: "tool.name == 'deploy' && tool.input.env == 'staging'", action: 'approve' },
        { id: 'no-prod', event: 'tool_approval', when: "tool.input.env == 'production'", action: 'deny', message: 'production needs a change ticket' },
      ],
    })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Go' } })
    expect(await thread.done).toMatchObject({ status: 'completed' })
    expect(runs).toEqual([{ env: 'staging' }])
    expect(resultOf(requests, 'p')).toMatchObject({ error: 'TOOL_DENIED', reason: 'production needs a change ticket' })
    const notes = readThreadFiles(rt.dir, thread.id).entries.filter((e) => e.type === 'tool_approval_decided').map((e) => e.data)
    expect(notes).toMatchObject([{ callId: 's', decision: 'approved', by: 'hook staging-ok' }, { callId: 'p', decision: 'denied', by: 'hook no-prod' }])
  })

  it('should refuse a hook that approves on another event, naming the hook', async () => {
    const rt = runtime({ model: scriptedModel([{ text: 'x' }]), hooks: [{ id: 'bad', event: 'error', action: 'approve' }] })
    await expect(rt).rejects.toThrow(/approve and deny only apply to event tool_approval/)
  })

  it('should deny a request nobody decided within approvals.timeoutSeconds, and the model hears why', async () => {
    const { tool, runs } = deployTool()
    const { model, requests } = recording([{ toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'staging' } }] }, { text: 'gave up' }])
    const rt = await runtime({ model, tools: [tool], config: { approvals: { timeoutSeconds: 60 } } })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Go' } })
    const view = await suspendedAtCall(thread)
    expect(view.pendingCall!.deadlineAt).toBe(rt.clock.now() + 60_000)
    rt.clock.increment(60_001)
    expect(await eventually(rt, () => rt.get(thread.id)?.getSnapshot().status === 'completed')).toBe(true)
    expect(runs).toEqual([])
    expect(resultOf(requests, 'c1')).toMatchObject({ error: 'TOOL_DENIED' })
    expect(JSON.stringify(resultOf(requests, 'c1'))).toContain('no one decided within 60 s')
  })

  it('should take an approval with edited input written as a response file by another process', async () => {
    const { tool, runs } = deployTool()
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [{ name: 'deploy', input: { env: 'production' } }] }, { text: 'ok' }]), tools: [tool] })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Go' } })
    await suspendedAtCall(thread)
    await eventually(rt, () => fs.existsSync(path.join(rt.dir, 'threads', thread.id, 'approvals')))
    await eventually(rt, () => {
      try {
        respondToApproval(rt.dir, thread.id, { approved: true, input: { env: 'staging' }, by: 'ops' })
        return true
      } catch {
        return false
      }
    })
    const report = await rt.checkRequests()
    expect(report.honoured).toMatchObject([{ threadId: thread.id, kind: 'approval' }])
    expect(await eventually(rt, () => runs.length === 1)).toBe(true)
    expect(runs).toEqual([{ env: 'staging' }])
  })

  it('should refuse a plain resume of a thread at a tool approval, and an answer to it, deciding nothing', async () => {
    const { tool } = deployTool()
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [{ name: 'deploy', input: { env: 'staging' } }] }, { text: 'ok' }]), tools: [tool] })
    const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Go' } })
    await suspendedAtCall(thread)
    await expect(rt.resume(thread.id)).rejects.toMatchObject({ code: 'NO_PENDING_APPROVAL' })
    await expect(rt.answer(thread.id, 'yes')).rejects.toMatchObject({ code: 'NO_PENDING_APPROVAL' })
    await expect(rt.approve(thread.id, { requestId: 'tool-9-zz' })).rejects.toMatchObject({ code: 'NO_PENDING_APPROVAL' })
    expect((await rt.approve(thread.id)).id).toBe(thread.id)
  })
})
