/**
 * Trees of threads: child waves that fail fast, cancel cascades, supervision after crashes,
 * continuation when the context window fills, and repair of tool calls left without results.
 * Each scenario: its setup, the fault, what must hold after. Time is simulated; files and SQLite
 * are real.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { LifecycleEvent, Message, ModelRequest, ScriptedTurn } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { TestRuntime } from '../../src/testing.js'
import { createTestRuntime } from '../../src/testing.js'
import { tempDir } from '../helpers/dirs.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { SPAWN_ENTRY } from '../../src/thread/replay.js'
import { eventually, inState, until } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

function entries(rt: TestRuntime, id: string, type?: string): Array<{ type: string; data: any }> {
  const all = fs
    .readFileSync(path.join(rt.dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line))
  return type ? all.filter((e) => e.type === type) : all
}

/** The ids the parent's spawn_thread calls returned, read from its conversation. */
function spawnedIds(messages: readonly Message[]): string[] {
  return messages
    .filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === 'spawn_thread')
    .map((m) => JSON.parse(m.content).threadId as string)
}

function lastToolResult(messages: readonly Message[], name: string): any {
  const found = [...messages].reverse().find((m) => m.role === 'tool' && m.toolName === name) as Extract<Message, { role: 'tool' }> | undefined
  return found ? JSON.parse(found.content) : undefined
}

describe('a wave of child threads', () => {
  /** lead: spawns w0..w4, waits for them fail-fast, reports. w2 fails at once; the others hang. */
  const waveScript = (request: ModelRequest): ScriptedTurn => {
    if (request.directiveName === 'lead') {
      if (request.turn === 1) {
        return { toolCalls: [0, 1, 2, 3, 4].map((i) => ({ name: 'spawn_thread', input: { name: `w${i}`, prompt: `part ${i}` } })) }
      }
      if (request.turn === 2) {
        return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(request.messages), failFast: true, cancelSiblingsOnFailure: true } }] }
      }
      const report = lastToolResult(request.messages, 'wait_threads')
      return { text: `wave failed at ${report.failed?.threadId ?? 'none'}` }
    }
    if (request.directiveName === 'w2') return { faults: [{ fault: 'http', status: 400, message: 'bad request: part 2 is malformed' }], reply: {} }
    return { faults: [{ fault: 'hang' }], reply: {} }
  }

  it('should cancel the other 4 when one fails with fail_fast and cancel_siblings_on_failure, naming the one that failed', async () => {
    const rt = await runtime({ model: scriptedModel(waveScript) })
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'split the work' } })
    const outcome = await lead.done

    const children = rt.list().filter((r) => r.parentId === lead.id)
    expect(children).toHaveLength(5)
    const failed = children.find((c) => c.directiveName === 'w2')!
    expect(outcome).toMatchObject({ status: 'completed', result: `wave failed at ${failed.id}` })
    expect(failed.status).toBe('error')
    for (const child of children.filter((c) => c.id !== failed.id)) {
      expect(child.status).toBe('cancelled')
      const cancelled = await rt.get(child.id).done
      expect(cancelled.error?.message).toContain(`sibling ${failed.id} failed`)
    }
    // The wait's report went to the model; the failure is in the parent's transcript.
    const waited = entries(rt, lead.id, 'TOOL_DONE').at(-1)!.data.output
    expect(waited.failed).toMatchObject({ threadId: failed.id, status: 'error' })
    expect(waited.cancelled).toHaveLength(4)
    expect(entries(rt, lead.id, 'child_thread_failed')).toEqual([
      expect.objectContaining({ data: expect.objectContaining({ childId: failed.id, error: expect.objectContaining({ message: expect.stringContaining('malformed') }) }) }),
    ])
    for (const id of [lead.id, ...children.map((c) => c.id)]) expect(rt.checkReplay(id).matches).toBe(true)
  })

  it('should cascade a cancel to every descendant and report the parent cancelled only after they settled', async () => {
    const rt = await runtime({
      model: scriptedModel((r) => {
        if (r.directiveName === 'root' && r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'mid', prompt: 'm' } }] }
        if (r.directiveName === 'mid' && r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'leaf', prompt: 'l' } }] }
        if (r.directiveName === 'root' || r.directiveName === 'mid') {
          return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages) } }] }
        }
        return { faults: [{ fault: 'hang' }], reply: {} }
      }),
    })
    const root = await rt.spawn({ directive: { name: 'root', prompt: 'p' } })
    const seen: string[] = []
    root.subscribe((view) => seen.push(`${view.status}:${JSON.stringify(view.state)}`))
    // Wait until the leaf exists and hangs in its model call.
    let leafId: string | undefined
    await eventually(rt, () => !!(leafId = rt.list().find((r) => r.directiveName === 'leaf' && r.status === 'running')?.id))
    expect(leafId).toBeDefined()
    const midId = rt.list().find((r) => r.directiveName === 'mid')!.id

    const result = await rt.cancel(root.id, 'operator stop')
    expect(result.status).toBe('cancelled')
    // By the time the root reports cancelled, every descendant has settled.
    expect(rt.get(midId).status).toBe('cancelled')
    expect(rt.get(leafId!).status).toBe('cancelled')
    expect((await rt.get(leafId!).done).error?.message).toContain(`parent ${midId} was cancelled`)
    expect(seen.some((s) => s.includes('"cancelling"'))).toBe(true)
    expect(entries(rt, root.id, 'CHILDREN_SETTLED')[0]!.data.children).toEqual([midId])
    for (const id of [root.id, midId, leafId!]) expect(rt.checkReplay(id).matches).toBe(true)
  })

  it('should cancel a child whose spawn_thread call was under way when its parent was cancelled', async () => {
    // root asks for 30 children in one reply; the cancel comes once the first exists, while the
    // next spawn_thread call is registering its child. That child used to run on, under a parent
    // already cancelled (which had not waited for it).
    const rt = await runtime({
      model: scriptedModel((r) => {
        if (r.directiveName === 'root' && r.turn === 1) {
          return { toolCalls: Array.from({ length: 30 }, (_, i) => ({ name: 'spawn_thread', input: { name: `c${i}`, prompt: 'x' } })) }
        }
        if (r.directiveName === 'root') return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages) } }] }
        return { faults: [{ fault: 'hang' }], reply: {} }
      }),
    })
    const root = await rt.spawn({ directive: { name: 'root', prompt: 'p' } })
    expect(await eventually(rt, () => rt.list().some((r) => r.parentId === root.id))).toBe(true)
    const result = await rt.cancel(root.id, 'operator stop')
    expect(result).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled' } })
    // Every child that exists is settled by the time the parent reports cancelled, and stays so.
    const open = () => rt.list().filter((r) => r.parentId === root.id && (r.status === 'running' || r.status === 'created'))
    expect(open()).toEqual([])
    await rt.settle()
    expect(rt.active().map((t) => t.id).filter((id) => id !== root.id)).toEqual([])
    expect(open()).toEqual([])
    for (const child of rt.list().filter((r) => r.parentId === root.id)) expect(child.status).toBe('cancelled')
  })
})

describe('budgets across the tree', () => {
  const hang = scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: {} }))

  it('should never let 20 children reserving at once oversubscribe their parent', async () => {
    const rt = await runtime({ model: hang })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spend: 1 } })
    const results = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => rt.spawn({ directive: { name: `c${i}`, prompt: 'p' }, limits: { spend: 0.08 }, parentId: parent.id })),
    )
    const started = results.filter((r) => r.status === 'fulfilled')
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')
    expect(started).toHaveLength(12)
    expect(refused).toHaveLength(8)
    for (const r of refused) expect(r.reason).toMatchObject({ code: 'BUDGET_EXCEEDED', message: expect.stringContaining(parent.id) })
    // A refused child never started: no registry row, no files.
    expect(rt.list().filter((r) => r.parentId === parent.id)).toHaveLength(12)
    expect(fs.readdirSync(path.join(rt.dir, 'threads'))).toHaveLength(13)
    const { openSqliteLedger } = await import('../../persistence/sqliteLedger.js')
    const ledger = openSqliteLedger({ path: path.join(rt.dir, 'ledger.db'), durability: 'process' })
    const account = ledger.get(parent.id)!
    expect(account.reserved.spend + account.spent.spend).toBeLessThanOrEqual(1 + 1e-9)
    expect(ledger.check()).toEqual([])
    ledger.close()
    await rt.cancel(parent.id)
  })

  it('should suspend a child whose share runs out for its budget, tell its parent, and carry it on when more is approved', async () => {
    const events: LifecycleEvent[] = []
    const spender = scriptedModel((r) =>
      r.directiveName === 'parent'
        ? r.turn === 1
          ? { toolCalls: [{ name: 'spawn_thread', input: { name: 'spender', prompt: 's', limits: { spend: 0.3 } } }] }
          : r.turn === 2
            ? { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages) } }] }
            : { text: 'parent done' }
        : r.turn <= 5
          ? { toolCalls: [{ name: 'noop', input: {} }], usage: { inputTokens: 10, outputTokens: 10, cost: 0.1 } }
          : { text: 'spent well', usage: { inputTokens: 10, outputTokens: 10, cost: 0.1 } },
    )
    const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })
    const rt = await runtime({ model: spender, tools: [noop], onLifecycle: (e) => events.push(e) })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spend: 1 } })
    let child: string | undefined
    await eventually(rt, () => !!(child = rt.list({ status: 'suspended' }).find((r) => r.directiveName === 'spender')?.id))
    expect(child).toBeDefined()
    const suspended = await rt.get(child!).done
    expect(suspended).toMatchObject({ status: 'suspended', suspendReason: 'budget' })
    expect(suspended.cost.spend).toBeCloseTo(0.3, 10)
    expect(events.find((e) => e.type === 'budget_exhausted')).toMatchObject({ threadId: child, parentId: parent.id, amount: 'spend', max: 0.3 })
    expect(entries(rt, parent.id, 'child_budget_exhausted')[0]!.data).toMatchObject({ childId: child, amount: 'spend' })

    // More than the parent has left is refused, and nothing changes.
    await expect(rt.approve(child!, { limits: { spend: 5 } })).rejects.toMatchObject({ code: 'BUDGET_EXCEEDED' })
    expect(rt.get(child!).status).toBe('suspended')
    const resumed = await rt.approve(child!, { limits: { spend: 0.7 } })
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'spent well' })
    expect((await resumed.done).cost.spend).toBeCloseTo(0.6, 10)
    expect(await parent.done).toMatchObject({ status: 'completed' })
    expect(rt.checkReplay(child!).matches).toBe(true)
  })

  it('should suspend a parent for its budget when its children have spent it', async () => {
    const rt = await runtime({
      model: scriptedModel((r) =>
        r.directiveName === 'parent'
          ? r.turn === 1
            ? { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'k', limits: { spend: 0.3 } } }], usage: { inputTokens: 1, outputTokens: 1, cost: 0.1 } }
            : r.turn === 2
              ? { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages) } }], usage: { inputTokens: 1, outputTokens: 1, cost: 0.1 } }
              : { text: 'never reached' }
          : { text: 'kid done', usage: { inputTokens: 1, outputTokens: 1, cost: 0.45 } },
      ),
    })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spend: 0.6 } })
    const outcome = await parent.done
    // 0.2 of its own plus 0.45 of its child's (one reply may overshoot a share: limits are checked
    // before calls): the tree spent more than its 0.6 before the parent's third call.
    expect(outcome).toMatchObject({ status: 'suspended', suspendReason: 'budget' })
    expect(outcome.cost.spend).toBeCloseTo(0.2, 10)
  })
})

describe('recovery escalation and budget governance', () => {
  it('should retry a failed task after the cooldown, hand it to the next handler, and record who tried', async () => {
    const events: LifecycleEvent[] = []
    const rt = await runtime({
      // coder always fails; debugger succeeds.
      model: scriptedModel((r) =>
        r.directiveName === 'debugger' ? { text: 'fixed by debugger' } : { faults: [{ fault: 'http', status: 400, message: 'bad request: cannot parse' }], reply: {} },
      ),
      config: { recovery: { enabled: true, maxAttempts: 2, cooldownSeconds: 30, chain: ['debugger', 'human'] } },
      onLifecycle: (e) => events.push(e),
    })
    const first = await rt.spawn({ directive: { name: 'coder', prompt: 'fix the bug' } })
    expect((await first.done).status).toBe('error')
    await rt.settle()
    expect(events.find((e) => e.type === 'recovery_decided')).toMatchObject({ decision: { action: 'retry', handler: 'coder', attempt: 2 } })
    // Nothing starts before the cooldown has passed.
    expect(rt.list()).toHaveLength(1)
    await rt.advance(30_000)
    await eventually(rt, () => rt.list().length >= 2)
    const second = rt.list().find((r) => r.id !== first.id)!
    expect(second.directiveName).toBe('coder')
    expect((await rt.get(second.id).done).status).toBe('error')
    await rt.settle()
    await rt.advance(30_000)
    await eventually(rt, () => rt.list().length >= 3)
    const third = rt.list().find((r) => r.directiveName === 'debugger')!
    expect(await rt.get(third.id).done).toMatchObject({ status: 'completed', result: 'fixed by debugger' })
    const started = events.filter((e) => e.type === 'recovery_started')
    expect(started).toEqual([
      expect.objectContaining({ taskKey: first.id, handler: 'coder', attempt: 2, retryOf: first.id }),
      expect.objectContaining({ taskKey: first.id, handler: 'debugger', attempt: 1, retryOf: second.id }),
    ])
    const spawn = entries(rt, third.id, SPAWN_ENTRY)[0]!.data.input
    expect(spawn.task).toMatchObject({ key: first.id, directive: 'coder', handler: 'debugger', prompt: 'fix the bug' })
    expect(spawn.directive.prompt).toContain(`The previous attempt (thread ${second.id}, directive coder) failed with model_permanent`)
  })

  it('should leave an escalation request for a person at the end of the chain', async () => {
    const rt = await runtime({
      model: scriptedModel(() => ({ faults: [{ fault: 'http', status: 400, message: 'bad request' }], reply: {} })),
      config: { recovery: { enabled: true, maxAttempts: 1, chain: ['human'] } },
    })
    const thread = await rt.spawn({ directive: { name: 'coder', prompt: 'p' } })
    await thread.done
    await rt.settle()
    const request = JSON.parse(fs.readFileSync(path.join(rt.dir, 'threads', thread.id, 'escalation.request.json'), 'utf8'))
    expect(request).toMatchObject({ kind: 'recovery_escalation', taskKey: thread.id, decision: { action: 'human' }, error: { code: 'model_permanent' } })
    expect(rt.list()).toHaveLength(1)
  })

  it('should apply the degrade policy when a governance budget is exceeded: hand to a person, then stop the run', async () => {
    const events: LifecycleEvent[] = []
    const rt = await runtime({
      model: scriptedModel(() => ({ toolCalls: [{ name: 'noop', input: {} }], usage: { inputTokens: 40, outputTokens: 20 } })),
      tools: [defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })],
      config: { governance: { tokens: 100, degradePolicy: ['manual_handoff', 'stop_run'] } },
      onLifecycle: (e) => events.push(e),
    })
    const thread = await rt.spawn({ directive: { name: 'chatty', prompt: 'p' } })
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'budget', cost: { turns: 2 } })
    expect(rt.get(thread.id).getSnapshot().error).toBeNull()
    const resumed = await rt.approve(thread.id)
    expect(await resumed.done).toMatchObject({ status: 'error', error: { code: 'budget_exceeded' } })
    expect(events.filter((e) => e.type === 'governance_applied').map((e) => (e as { action: string }).action)).toEqual(['manual_handoff', 'stop_run'])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should take the next step of the default degrade policy in a reduced_context continuation, not reduced_context again', async () => {
    const events: LifecycleEvent[] = []
    const rt = await runtime({
      model: scriptedModel(() => ({ toolCalls: [{ name: 'noop', input: {} }], usage: { inputTokens: 40, outputTokens: 20 } })),
      tools: [defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })],
      config: { governance: { tokens: 100 } },
      onLifecycle: (e) => events.push(e),
    })
    const thread = await rt.spawn({ directive: { name: 'chatty', prompt: 'p' } })
    expect(await thread.done).toMatchObject({ status: 'continued' })
    // The successor starts with its predecessor's usage, so it is over the budget at once. Before
    // the fix each successor started the policy again: a new continuation every turn, for ever.
    expect(await eventually(rt, () => rt.chain(thread.id).some((r) => r.status === 'suspended'), 10_000)).toBe(true)
    const successor = rt.chain(thread.id).find((r) => r.status === 'suspended')!
    const actions = () => events.filter((e) => e.type === 'governance_applied').map((e) => (e as { action: string }).action)
    expect(actions()).toEqual(['reduced_context', 'manual_handoff'])
    expect(rt.chain(thread.id)).toHaveLength(2)
    const resumed = await rt.approve(successor.id)
    expect(await resumed.done).toMatchObject({ status: 'error', error: { code: 'budget_exceeded' } })
    expect(actions()).toEqual(['reduced_context', 'manual_handoff', 'stop_run'])
  })
})

describe('supervision', () => {
  /** A tool whose input check throws (a bug in the tool's own code, outside its execute). */
  function flakyTool(failures: number) {
    let calls = 0
    return defineTool({
      name: 'flaky',
      description: 'a tool with a buggy input check',
      input: z.object({}).superRefine(() => {
        calls++
        if (calls <= failures) throw new TypeError(`input check crashed (call ${calls})`)
      }),
      idempotent: true,
      execute: () => ({ ok: true }),
    })
  }
  const callsFlakyOnce = scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'flaky', input: {} }] } : { text: 'finished' }))

  it('should restart a crashed thread from its last checkpoint and carry it on, telling host code', async () => {
    const events: LifecycleEvent[] = []
    const rt = await runtime({ model: callsFlakyOnce, tools: [flakyTool(1)], onLifecycle: (e) => events.push(e) })
    const thread = await rt.spawn({ directive: { name: 'worker', prompt: 'p' } })
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'finished', cost: { turns: 2 } })
    expect(events.map((e) => e.type)).toEqual(['runtime_ready', 'thread_crashed', 'thread_restarted'])
    expect(events[1]).toMatchObject({ threadId: thread.id, error: { message: expect.stringContaining('input check crashed') } })
    expect(entries(rt, thread.id).map((e) => e.type)).toEqual(expect.arrayContaining(['thread_crashed', 'thread_restarted']))
    // The tool's result was recorded once, by the restarted run.
    expect(entries(rt, thread.id, 'TOOL_DONE')).toHaveLength(1)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should end the group in error with a crash report once restart intensity is exceeded', async () => {
    const events: LifecycleEvent[] = []
    const rt = await runtime({ model: callsFlakyOnce, tools: [flakyTool(100)], onLifecycle: (e) => events.push(e) })
    const thread = await rt.spawn({ directive: { name: 'worker', prompt: 'p' } })
    const outcome = await thread.done
    expect(outcome.status).toBe('error')
    expect(outcome.error).toMatchObject({ code: 'SUPERVISION_GAVE_UP', message: expect.stringContaining('more than the restart intensity allows (3 in 5000 ms)') })
    expect(events.filter((e) => e.type === 'thread_restarted')).toHaveLength(3)
    expect(events.filter((e) => e.type === 'thread_crashed')).toHaveLength(4)
    expect(events.at(-1)).toMatchObject({ type: 'supervision_gave_up', threadIds: [thread.id] })
    expect(rt.list({ status: 'error' }).map((r) => r.id)).toEqual([thread.id])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should give up on a thread that keeps crashing without touching its independent siblings', async () => {
    const events: LifecycleEvent[] = []
    const model = scriptedModel((r) =>
      r.directiveName === 'buggy' ? (r.turn === 1 ? { toolCalls: [{ name: 'flaky', input: {} }] } : { text: 'unreachable' }) : r.turn <= 3 ? { toolCalls: [{ name: 'noop', input: {} }] } : { text: 'fine' },
    )
    const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
    const rt = await runtime({ model, tools: [flakyTool(100), noop], onLifecycle: (e) => events.push(e) })
    const healthy = await Promise.all([1, 2, 3].map((i) => rt.spawn({ directive: { name: `healthy${i}`, prompt: 'p' } })))
    const buggy = await rt.spawn({ directive: { name: 'buggy', prompt: 'p' } })
    expect(await buggy.done).toMatchObject({ status: 'error', error: { code: 'SUPERVISION_GAVE_UP', message: expect.stringContaining(`Ending ${buggy.id}.`) } })
    for (const thread of healthy) expect(await thread.done).toMatchObject({ status: 'completed', result: 'fine' })
    expect(events.filter((e) => e.type === 'supervision_gave_up')).toEqual([expect.objectContaining({ threadIds: [buggy.id] })])
  })

  it('should not restart a temporary thread', async () => {
    const rt = await runtime({ model: callsFlakyOnce, tools: [flakyTool(1)] })
    const thread = await rt.spawn({ directive: { name: 'worker', prompt: 'p' }, restart: 'temporary' })
    expect(await thread.done).toMatchObject({ status: 'error', error: { code: 'SUPERVISION_GAVE_UP', message: expect.stringContaining('temporary') } })
  })

  it('should restart a permanent sibling with the crashed thread under one_for_all', async () => {
    const events: LifecycleEvent[] = []
    let crashes = 0
    const crasher = defineTool({
      name: 'crasher',
      description: 'crashes its thread once',
      input: z.object({}).superRefine(() => {
        if (crashes++ === 0) throw new TypeError('crasher bug')
      }),
      idempotent: true,
      execute: () => 'ok',
    })
    const rt = await runtime({
      model: scriptedModel((r) => {
        if (r.directiveName === 'parent') {
          if (r.turn === 1) {
            return {
              toolCalls: [
                { name: 'spawn_thread', input: { name: 'steady', prompt: 's' } },
                { name: 'spawn_thread', input: { name: 'crashy', prompt: 'c' } },
              ],
            }
          }
          return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages), timeoutSeconds: 60 } }] }
        }
        if (r.directiveName === 'crashy') return r.turn === 1 ? { toolCalls: [{ name: 'crasher', input: {} }] } : { text: 'crashy done' }
        return { faults: [{ fault: 'hang' }], reply: {} }
      }),
      tools: [crasher],
      config: { supervision: { strategy: 'one_for_all', restart: 'permanent' } },
      onLifecycle: (e) => events.push(e),
    })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' } })
    let crashyDone = false
    await eventually(rt, () => (crashyDone = rt.list().some((r) => r.directiveName === 'crashy' && r.status === 'completed')))
    expect(crashyDone).toBe(true)
    const steady = rt.list().find((r) => r.directiveName === 'steady')!
    const crashy = rt.list().find((r) => r.directiveName === 'crashy')!
    const restarted = events.filter((e) => e.type === 'thread_restarted').map((e) => (e as { threadId: string }).threadId)
    expect(restarted.sort()).toEqual([crashy.id, steady.id].sort())
    expect(entries(rt, steady.id, 'thread_restarted')[0]!.data).toMatchObject({ crashed: crashy.id })
    await rt.cancel(parent.id, 'end of test')
  })
})

describe('continuation', () => {
  it('should keep the total cost and the lineage across a chain of 3 continuations', async () => {
    // Turns 1-3 each fill the window (950 of 1000 prompt tokens) and ask for a tool, so the next
    // call hands off; turn numbers run on across the chain, and turn 4 (in the fourth thread) ends it.
    const windowModel = scriptedModel((r) =>
      r.turn <= 3
        ? { text: `step ${r.turn}`, toolCalls: [{ name: 'note', input: { n: r.turn } }], usage: { inputTokens: 950, outputTokens: 10, cost: 0.1 } }
        : { text: 'all done', usage: { inputTokens: 100, outputTokens: 10, cost: 0.01 } },
    )
    const note = defineTool({ name: 'note', description: 'notes', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ noted: n }) })
    const events: LifecycleEvent[] = []
    const rt = await runtime({ model: Object.assign(windowModel, { contextWindow: 1000 }), tools: [note], onLifecycle: (e) => events.push(e) })
    const first = await rt.spawn({ directive: { name: 'long', prompt: 'a long task' } })
    expect(await first.done).toMatchObject({ status: 'continued' })

    const report = await rt.waitThreads([first.id], { timeoutMs: 60_000 })
    expect(report.settled).toHaveLength(1)
    const last = report.settled[0]!
    expect(last.status).toBe('completed')
    expect(last.result).toBe('all done')

    const chain = rt.chain(first.id)
    expect(chain.map((r) => r.status)).toEqual(['continued', 'continued', 'continued', 'completed'])
    expect(chain[0]!.id).toBe(first.id)
    expect(chain.at(-1)!.id).toBe(last.finalThreadId)
    for (let i = 1; i < chain.length; i++) expect(chain[i]!.previousThreadId).toBe(chain[i - 1]!.id)
    // Cost is carried: the last thread's cost is the whole chain's (3 × (1 tool turn) + 1 final turn).
    expect(last.cost).toMatchObject({ turns: 4, inputTokens: 3 * 950 + 100, outputTokens: 40 })
    expect(last.cost.spend).toBeCloseTo(0.31, 10)
    expect(events.filter((e) => e.type === 'thread_continued')).toHaveLength(3)
    // Each successor starts at a user message that says where it continues from.
    const spawn = entries(rt, chain[1]!.id, SPAWN_ENTRY)[0]!.data
    expect(spawn.previousThreadId).toBe(first.id)
    expect(spawn.messages[0]).toMatchObject({ role: 'user', content: expect.stringContaining(`Continued from thread ${first.id}`) })
    for (const record of chain) expect(rt.checkReplay(record.id).matches).toBe(true)
  })

  it('should hand off on a context_length error from the provider instead of suspending', async () => {
    const rt = await runtime({
      model: scriptedModel((r) =>
        r.messages[0]!.content.includes('Continued from thread')
          ? { text: 'finished in the successor' }
          : r.turn === 1
            ? { text: 'first', toolCalls: [{ name: 'note', input: {} }] }
            : { faults: [{ fault: 'http', status: 400, code: 'context_length_exceeded', message: "This model's maximum context length is 8192 tokens" }], reply: {} },
      ),
      tools: [defineTool({ name: 'note', description: 'n', input: z.object({}), idempotent: true, execute: () => 'ok' })],
    })
    const thread = await rt.spawn({ directive: { name: 'big', prompt: 'p' } })
    const outcome = await thread.done
    expect(outcome.status).toBe('continued')
    const report = await rt.waitThreads([thread.id])
    expect(report.settled[0]).toMatchObject({ status: 'completed', result: 'finished in the successor' })
    expect(entries(rt, thread.id, 'error_classified')[0]!.data).toMatchObject({ category: 'context_length' })
  })
})

describe('tool calls left without results', () => {
  it('should give a dangling tool call a synthetic result before the next model call, and record it', async () => {
    // A thread whose recorded history (a continuation seed written elsewhere) has an assistant tool
    // call without a result: spawned and registered, killed before it started.
    const seen: Message[][] = []
    const model = scriptedModel((r) => {
      seen.push([...r.messages])
      return { text: 'repaired and done' }
    })
    const setup = await runtime({ model, recover: false })
    const thread = await setup.spawn({ directive: { name: 'seeded', prompt: 'p' } })
    await thread.done
    const dir = setup.dir
    // Rewrite its transcript as a thread that never started, whose seed has a dangling call.
    const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'process' })
    const spawnEntry = entries(setup, thread.id, SPAWN_ENTRY)[0]!.data
    await setup.close()
    fs.rmSync(path.join(dir, 'threads', thread.id), { recursive: true })
    store.open(thread.id)
    store.append(thread.id, SPAWN_ENTRY, {
      ...spawnEntry,
      messages: [
        { role: 'user', content: 'p' },
        { role: 'assistant', content: 'looking', toolCalls: [{ id: 'c1', name: 'lookup', input: {} }, { id: 'c2', name: 'lookup', input: {} }] },
        { role: 'tool', toolCallId: 'c1', toolName: 'lookup', content: '"found"' },
      ],
    })
    store.closeAll()
    const { openSqliteRegistry } = await import('../../persistence/sqliteRegistry.js')
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
    registry.updateStatus(thread.id, 'created', Date.now())
    registry.close()

    const rt = await runtime({ model, dir })
    expect(rt.lastRecovery.rebuilt).toEqual([thread.id])
    const outcome = await rt.get(thread.id).done
    expect(outcome).toMatchObject({ status: 'completed', result: 'repaired and done' })
    const request = seen.at(-1)!
    expect(request[3]).toMatchObject({ role: 'tool', toolCallId: 'c2', isError: true, content: expect.stringContaining('TOOL_RESULT_MISSING') })
    const repaired = entries(rt, thread.id, 'tool_calls_repaired')
    expect(repaired).toHaveLength(1)
    expect(repaired[0]!.data.repairs).toEqual([{ callId: 'c2', toolName: 'lookup', kind: 'missing_result' }])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe("a directive's tools", () => {
  it('should show a thread only its directive\'s tools and refuse a call to any other', async () => {
    const seen: string[][] = []
    const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => 'ran' })
    const secret = defineTool({ name: 'secret', description: 's', input: z.object({}), idempotent: true, execute: () => 'leaked' })
    const rt = await runtime({
      model: scriptedModel((r) => {
        seen.push(r.tools.map((t) => t.name))
        return r.turn === 1 ? { toolCalls: [{ name: 'secret', input: {} }, { name: 'noop', input: {} }] } : { text: 'done' }
      }),
      tools: [noop, secret],
    })
    const thread = await rt.spawn({ directive: { name: 'narrow', prompt: 'p', tools: ['noop', 'spawn_thread'] } })
    expect((await thread.done).status).toBe('completed')
    expect(seen[0]).toEqual(['spawn_thread', 'noop'])
    const results = entries(rt, thread.id, 'TOOL_DONE').map((e) => e.data)
    expect(results[0]).toMatchObject({ ok: false, output: { error: 'TOOL_NOT_ALLOWED' } })
    expect(results[1]).toMatchObject({ ok: true, output: 'ran' })
    await expect(rt.spawn({ directive: { name: 'bad', prompt: 'p', tools: ['nope'] } })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('"nope"') })
  })
})

describe('inspection', () => {
  it('should show every thread actor and the orchestrator to an XState inspector, by thread id', async () => {
    const seen: Array<{ type: string; id: string; state?: unknown }> = []
    const rt = await runtime({
      model: scriptedModel([{ text: 'done' }]),
      inspect: (event) => {
        if (event.type === '@xstate.actor' || event.type === '@xstate.snapshot') {
          seen.push({ type: event.type, id: (event.actorRef as unknown as { id: string }).id, ...(event.type === '@xstate.snapshot' ? { state: (event.snapshot as { value?: unknown }).value } : {}) })
        }
      },
    })
    const thread = await rt.spawn({ directive: { name: 'watched', prompt: 'p' } })
    await thread.done
    expect(seen).toContainEqual({ type: '@xstate.actor', id: 'orchestrator' })
    expect(seen).toContainEqual({ type: '@xstate.actor', id: thread.id })
    expect(seen).toContainEqual({ type: '@xstate.snapshot', id: thread.id, state: 'completed' })
  })
})

describe('waiting', () => {
  it('should report threads still running as pending when the wait times out, on the runtime clock', async () => {
    const rt = await runtime({ model: scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: {} })) })
    const slow = await rt.spawn({ directive: { name: 'slow', prompt: 'p' } })
    await until(slow, inState('callingModel'))
    const waiting = rt.waitThreads([slow.id], { timeoutMs: 30_000 })
    await rt.advance(30_000)
    expect(await waiting).toMatchObject({ settled: [], pending: [slow.id], timedOut: true })
    await rt.cancel(slow.id)
  })

  it('should refuse a wait_threads on the thread itself or on its parent instead of waiting out the timeout', async () => {
    // root waits for its child; the child waits for its root (and for itself). Each wait could only
    // end at its timeout (10 minutes by default) — the child now gets an error result at once and
    // carries on, and the root gets its result, with no time passing.
    let rootId = ''
    const rt = await runtime({
      model: scriptedModel((r) => {
        if (r.directiveName === 'root') {
          if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'child', prompt: 'c' } }] }
          if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages) } }] }
          return { text: `root saw ${lastToolResult(r.messages, 'wait_threads').settled[0]?.result}` }
        }
        if (r.turn === 1) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: [rootId] } }, { name: 'wait_threads', input: { threadIds: [r.threadId] } }] }
        const refusals = r.messages.filter((m) => m.role === 'tool' && m.toolName === 'wait_threads').map((m) => JSON.parse((m as { content: string }).content))
        return { text: refusals.map((x) => x.error).join(',') }
      }),
    })
    const root = await rt.spawn({ directive: { name: 'root', prompt: 'p' } })
    rootId = root.id
    expect(await eventually(rt, () => rt.list().find((r) => r.id === root.id)?.status === 'completed')).toBe(true)
    expect(await root.done).toMatchObject({ status: 'completed', result: 'root saw TOOL_FAILED,TOOL_FAILED' })
    const child = rt.list().find((r) => r.parentId === root.id)!
    const results = entries(rt, child.id, 'TOOL_DONE').map((e) => e.data.output.message)
    expect(results[0]).toContain(`cannot wait for ${root.id}`)
    expect(results[1]).toContain('cannot wait for itself')
  })

  it('should not time a wait out at once when its timeout is past what a Node timer holds', async () => {
    // 3e9 ms (35 days) overflows setTimeout, which then fires after 1 ms: the wait reported the
    // thread pending and timed out at once. Real clock: the simulated one has no such limit.
    const dir = tempDir('spindle-wait-huge')
    const rt = await createRuntime({ dir, userConfig: null, durability: 'process', model: scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: {} })) })
    try {
      const slow = await rt.spawn({ directive: { name: 'slow', prompt: 'p' } })
      await until(slow, inState('callingModel'))
      const waiting = rt.waitThreads([slow.id], { timeoutMs: 3e9 })
      // Long enough for an overflowed timer to have fired.
      await new Promise((resolve) => setTimeout(resolve, 50))
      await rt.cancel(slow.id, 'end of test')
      expect(await waiting).toMatchObject({ settled: [{ threadId: slow.id, status: 'cancelled' }], pending: [], timedOut: false })
    } finally {
      await rt.close()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it('should give a wait_threads run again after a restart what remained of its timeout, not all of it', async () => {
    // root waits 100 s for a child that hangs; the process stops 60 s in (close: the checkpoints
    // stay, as after a kill -9) and the next one takes over. The wait now ends 40 s later; it
    // used to start its 100 s over at every restart, so a process restarted often never timed out.
    const dir = tempDir('spindle-wait-restart')
    const start = Date.UTC(2026, 0, 1)
    const model = scriptedModel((r) => {
      if (r.directiveName === 'root') {
        if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'child', prompt: 'c' } }] }
        if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawnedIds(r.messages), timeoutSeconds: 100 } }] }
        return { text: `pending ${lastToolResult(r.messages, 'wait_threads').pending.length}` }
      }
      return { faults: [{ fault: 'hang' }], reply: {} }
    })
    const first = await createTestRuntime({ dir, model, startAt: start })
    try {
      const root = await first.spawn({ directive: { name: 'root', prompt: 'p' } })
      await until(root, (view) => view.state !== null && JSON.stringify(view.state).includes('runningTools') && view.usage.turns === 2)
      await first.advance(60_000)
      await first.close()
      const second = await createTestRuntime({ dir, model, startAt: start + 60_000 })
      try {
        expect(second.lastRecovery.resumed).toContain(root.id)
        await second.settle()
        await second.advance(40_001)
        const done = () => second.list().find((r) => r.id === root.id)?.status === 'completed'
        expect(await eventually(second, done)).toBe(true)
        expect(await second.get(root.id).done).toMatchObject({ status: 'completed', result: 'pending 1' })
        const child = second.list().find((r) => r.parentId === root.id)!
        await second.cancel(child.id, 'end of test')
      } finally {
        await second.close()
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it('should refuse to wait for an unknown thread', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: 'x' }]) })
    await expect(rt.waitThreads(['nobody-aaaaaaaaaaaa'])).rejects.toMatchObject({ code: 'THREAD_NOT_FOUND' })
  })
})
