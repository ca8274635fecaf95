/**
 * The thread statechart, driven through its paths with xstate/graph. At every step the snapshot is
 * persisted, JSON round-tripped and restored into a fresh actor, which must then continue exactly
 * as the original does.
 */
import { describe, expect, it } from 'vitest'
import { createActor } from 'xstate'
import { getShortestPaths, getSimplePaths } from 'xstate/graph'
import { effectOf } from '../../machines/effectOf.js'
import { outcomeOf } from '../../machines/threadOutcome.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { ThreadInput } from '../../machines/threadContext.js'
import { input, traversal } from '../helpers/threadMachineWalk.js'
import type { Snap } from '../helpers/threadMachineWalk.js'

function withRetries(maxRetries: number): ThreadInput {
  return { ...input, policy: { ...input.policy, retry: { ...input.policy.retry, maxRetries } } }
}

function roundTrip(actor: { getPersistedSnapshot(): unknown }): unknown {
  return JSON.parse(JSON.stringify(actor.getPersistedSnapshot()))
}

/** The effect a state's description names ("Effect callModel: …"), or null. */
function describedEffect(snapshot: Snap): string | null {
  for (const node of snapshot._nodes) {
    const named = /^Effect (\w+):/.exec(node.description ?? '')
    if (named) return named[1]!
  }
  return null
}

/**
 * The runtime starts a state's effect once per effect key and stops it when the key changes, so
 * a step that leaves the state and enters it again must change the key, and the effect must be
 * the one the state's description names (what the visualizer shows).
 */
function checkEffects(before: Snap, event: ThreadEvent, after: Snap): void {
  expect(effectOf(after)?.src ?? null).toBe(describedEffect(after))
  const was = effectOf(before)
  const now = effectOf(after)
  if (was === null || now === null || was.key !== now.key) return
  const transitions = threadMachine.getTransitionData(before, event)
  expect(transitions.every((t) => !t.target || t.target.length === 0), `${event.type} re-entered ${JSON.stringify(after.value)} under key ${now.key}`).toBe(true)
}

/** Replays a path, restoring from JSON before every step; returns the states visited. */
function replayWithRestores(steps: ReadonlyArray<{ event: ThreadEvent }>): string[] {
  const original = createActor(threadMachine, { input }).start()
  const visited: string[] = [JSON.stringify(original.getSnapshot().value)]
  for (const { event } of steps) {
    if (event.type === 'xstate.init' as string) continue
    const restored = createActor(threadMachine, { snapshot: roundTrip(original) } as never).start()
    expect(restored.getSnapshot().value).toEqual(original.getSnapshot().value)
    expect(restored.getSnapshot().context).toEqual(original.getSnapshot().context)
    const before = original.getSnapshot()
    original.send(event)
    checkEffects(before, event, original.getSnapshot())
    restored.send(event)
    expect(roundTrip(restored)).toEqual(roundTrip(original))
    visited.push(JSON.stringify(original.getSnapshot().value))
    restored.stop()
  }
  original.stop()
  return visited
}

describe('thread machine paths', () => {
  const shortest = getShortestPaths(threadMachine, traversal as never)

  it('should reach every state of the statechart', () => {
    const reached = new Set(shortest.map((p) => JSON.stringify(p.state.value)))
    for (const state of [
      '"created"',
      '{"running":"callingModel"}',
      '{"running":"runningTools"}',
      '{"running":"waitingToRetry"}',
      '{"running":"limitReached"}',
      '"suspended"',
      '"completed"',
      '"error"',
      '"cancelled"',
      '"continued"',
    ]) {
      expect(reached, `state ${state} not reachable`).toContain(state)
    }
  })

  it('should continue identically after a JSON restore at every step of every shortest path', () => {
    expect(shortest.length).toBeGreaterThan(10)
    for (const path of shortest) {
      const visited = replayWithRestores(path.steps as never)
      expect(visited.at(-1)).toBe(JSON.stringify(path.state.value))
    }
  })

  it('should continue identically after a JSON restore along simple paths to completion', () => {
    const simple = getSimplePaths(threadMachine, {
      ...(traversal as object),
      toState: (s: Snap) => s.value === 'completed',
    } as never)
    expect(simple.length).toBeGreaterThan(5)
    for (const path of simple.slice(0, 200)) {
      const visited = replayWithRestores(path.steps as never)
      expect(visited.at(-1)).toBe('"completed"')
    }
  })
})

describe('thread machine decisions', () => {
  function started(limits: Partial<ThreadInput['limits']> = {}) {
    const actor = createActor(threadMachine, { input: { ...input, limits: { ...input.limits, ...limits } } }).start()
    actor.send({ type: 'START', at: 0 })
    return actor
  }

  it('should suspend for a limit before calling the model past it', () => {
    const actor = started({ turns: 1 })
    actor.send({ type: 'MODEL_REPLIED', at: 1, turn: 1, attempt: 1, text: '', toolCalls: [{ id: 'a', name: 't', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
    actor.send({ type: 'TOOL_DONE', at: 2, turn: 1, callId: 'a', ok: true, output: null })
    expect(actor.getSnapshot().value).toEqual({ running: 'limitReached' })
    actor.send({ type: 'LIMIT_DECIDED', at: 3, action: 'escalate', proposed: 2, requestId: 'turns-1' })
    expect(actor.getSnapshot().value).toBe('suspended')
    expect(actor.getSnapshot().context.limitHit).toEqual({ limit: 'turns', used: 1, max: 1, proposed: 2, requestId: 'turns-1' })
  })

  it('should treat a raise that does not clear the limit as an escalation, never a loop', () => {
    const actor = started({ turns: 1 })
    actor.send({ type: 'MODEL_REPLIED', at: 1, turn: 1, attempt: 1, text: '', toolCalls: [{ id: 'a', name: 't', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
    actor.send({ type: 'TOOL_DONE', at: 2, turn: 1, callId: 'a', ok: true, output: null })
    actor.send({ type: 'LIMIT_DECIDED', at: 3, action: 'raise', limits: { turns: 1 }, hookId: 'h' })
    expect(actor.getSnapshot().value).toBe('suspended')
  })

  it('should carry on under raised limits when a hook raises them enough', () => {
    const actor = started({ turns: 1 })
    actor.send({ type: 'MODEL_REPLIED', at: 1, turn: 1, attempt: 1, text: '', toolCalls: [{ id: 'a', name: 't', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
    actor.send({ type: 'TOOL_DONE', at: 2, turn: 1, callId: 'a', ok: true, output: null })
    actor.send({ type: 'LIMIT_DECIDED', at: 3, action: 'raise', limits: { turns: 5 }, hookId: 'h' })
    expect(actor.getSnapshot().value).toEqual({ running: 'callingModel' })
    expect(actor.getSnapshot().context.limits.turns).toBe(5)
  })

  it('should let an error hook fail, abort or retry past the default policy', () => {
    const failing = started()
    failing.send({ type: 'MODEL_FAILED', at: 1, turn: 1, attempt: 1, error: { category: 'transient', message: '503' }, retryInMs: 10, decision: { action: 'fail', hookId: 'no-503s' } })
    expect(failing.getSnapshot().value).toBe('error')
    expect(failing.getSnapshot().context.error).toMatchObject({ code: 'HOOK_FAILED', message: expect.stringContaining('no-503s') })
    const aborting = started()
    aborting.send({ type: 'MODEL_FAILED', at: 1, turn: 1, attempt: 1, error: { category: 'transient', message: '503' }, retryInMs: 10, decision: { action: 'abort', hookId: 'stop' } })
    expect(aborting.getSnapshot().value).toBe('cancelled')
    const retrying = started()
    retrying.send({ type: 'MODEL_FAILED', at: 1, turn: 1, attempt: 1, error: { category: 'permanent', message: '400' }, retryInMs: 10, decision: { action: 'retry', hookId: 'again' } })
    expect(retrying.getSnapshot().value).toEqual({ running: 'waitingToRetry' })
  })

  it('should ignore a reply for a stale attempt', () => {
    const actor = started()
    const stale: ThreadEvent = { type: 'MODEL_REPLIED', at: 1, turn: 1, attempt: 2, text: 'x', toolCalls: [], usage: { inputTokens: 1, outputTokens: 1 } }
    expect(actor.getSnapshot().can(stale)).toBe(false)
  })

  it('should schedule a retry at the failure time plus the recorded wait', () => {
    const actor = started()
    actor.send({ type: 'MODEL_FAILED', at: 500, turn: 1, attempt: 1, error: { category: 'rate_limited', message: '429' }, retryInMs: 2_000 })
    expect(actor.getSnapshot().value).toEqual({ running: 'waitingToRetry' })
    expect(actor.getSnapshot().context.retry?.dueAt).toBe(2_500)
  })

  it('should suspend with reason error when retries run out', () => {
    const actor = started()
    actor.send({ type: 'MODEL_FAILED', at: 1, turn: 1, attempt: 1, error: { category: 'transient', message: '503' }, retryInMs: 10 })
    actor.send({ type: 'RETRY_DUE', at: 11 })
    actor.send({ type: 'MODEL_FAILED', at: 12, turn: 1, attempt: 2, error: { category: 'transient', message: '503' }, retryInMs: 10 })
    expect(actor.getSnapshot().value).toBe('suspended')
    expect(actor.getSnapshot().context.suspendReason).toBe('error')
  })

  it('should wait once on quota exhaustion, then suspend', () => {
    const actor = createActor(threadMachine, { input: withRetries(3) }).start()
    actor.send({ type: 'START', at: 0 })
    actor.send({ type: 'MODEL_FAILED', at: 1, turn: 1, attempt: 1, error: { category: 'quota', message: 'insufficient_quota' }, retryInMs: 60_000 })
    expect(actor.getSnapshot().value).toEqual({ running: 'waitingToRetry' })
    actor.send({ type: 'RETRY_DUE', at: 60_001 })
    actor.send({ type: 'MODEL_FAILED', at: 60_002, turn: 1, attempt: 2, error: { category: 'quota', message: 'insufficient_quota' }, retryInMs: 60_000 })
    expect(actor.getSnapshot().value).toBe('suspended')
  })

  it('should not wait on quota exhaustion when retries are off (maxRetries 0)', () => {
    const actor = createActor(threadMachine, { input: withRetries(0) }).start()
    actor.send({ type: 'START', at: 0 })
    actor.send({ type: 'MODEL_FAILED', at: 1, turn: 1, attempt: 1, error: { category: 'quota', message: 'insufficient_quota' }, retryInMs: 60_000 })
    expect(actor.getSnapshot().value).toBe('suspended')
    expect(actor.getSnapshot().context.suspendReason).toBe('error')
    expect(actor.getSnapshot().context.retry).toBeFalsy()
  })

  it('should end in error, and say error in its outcome, when it fails while cancelling its children', () => {
    const actor = started()
    actor.send({ type: 'CANCEL', at: 5, reason: 'operator', by: 'test', awaitChildren: true })
    expect(actor.getSnapshot().value).toBe('cancelling')
    actor.send({ type: 'FAIL', at: 6, error: { code: 'SUPERVISION_GAVE_UP', message: 'crashed while cancelling' } })
    expect(actor.getSnapshot().value).toBe('error')
    expect(actor.getSnapshot().output).toMatchObject({ status: 'error', error: { code: 'SUPERVISION_GAVE_UP' } })
  })

  it('should suspend a quarantined thread for its crash loop, and carry it on with a model call when resumed', () => {
    const actor = started()
    actor.send({ type: 'MODEL_REPLIED', at: 1, turn: 1, attempt: 1, text: '', toolCalls: [{ id: 'a', name: 'explode', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
    expect(actor.getSnapshot().value).toEqual({ running: 'runningTools' })
    // Found there by four recoveries in a row: the time no process ran it is not active time.
    actor.send({ type: 'QUARANTINED', at: 10_000, recoveries: 4, seq: 3, message: 'Recovery found thread … 4 times in a row' })
    expect(actor.getSnapshot().value).toBe('suspended')
    expect(actor.getSnapshot().context).toMatchObject({ suspendReason: 'crash_loop', activeMs: 1, lastAt: 10_000 })
    expect(actor.getSnapshot().output ?? null).toBeNull()
    actor.send({ type: 'RESUME', at: 20_000, decision: 'resumed', by: 'test' })
    expect(actor.getSnapshot().value).toEqual({ running: 'callingModel' })
    expect(actor.getSnapshot().context.suspendReason).toBeNull()
  })

  it('should say CRASH_LOOP in the outcome of a quarantined thread', () => {
    const actor = started()
    actor.send({ type: 'QUARANTINED', at: 5, recoveries: 4, seq: 2, message: 'stuck at seq 2' })
    expect(outcomeOf('suspended', actor.getSnapshot().context)).toMatchObject({ status: 'suspended', suspendReason: 'crash_loop', error: { code: 'CRASH_LOOP', message: 'stuck at seq 2' } })
  })

  it('should count only active time against the duration limit', () => {
    const actor = started({ durationMs: 100 })
    actor.send({ type: 'MODEL_FAILED', at: 50, turn: 1, attempt: 1, error: { category: 'context_length', message: 'too long' }, retryInMs: 0 })
    expect(actor.getSnapshot().value).toBe('suspended')
    actor.send({ type: 'RESUME', at: 10_000 })
    expect(actor.getSnapshot().value).toEqual({ running: 'callingModel' })
    expect(actor.getSnapshot().context.activeMs).toBe(50)
  })

  it('should count the time the last tool took against the duration limit before the next model call', () => {
    // Under the limit when the model replied (at 40), over it once the tool result arrives (at 150).
    const actor = started({ durationMs: 100 })
    actor.send({ type: 'MODEL_REPLIED', at: 40, turn: 1, attempt: 1, text: '', toolCalls: [{ id: 'a', name: 't', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
    expect(actor.getSnapshot().value).toEqual({ running: 'runningTools' })
    actor.send({ type: 'TOOL_DONE', at: 150, turn: 1, callId: 'a', ok: true, output: null })
    expect(actor.getSnapshot().value).toEqual({ running: 'limitReached' })
    expect(actor.getSnapshot().context).toMatchObject({ activeMs: 150, toolCalls: [], toolsDone: [] })
    // One tool result short of the end of the turn, the limit waits for the turn to end.
    const twoTools = started({ durationMs: 100 })
    twoTools.send({ type: 'MODEL_REPLIED', at: 40, turn: 1, attempt: 1, text: '', toolCalls: [{ id: 'a', name: 't', input: {} }, { id: 'b', name: 't', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
    twoTools.send({ type: 'TOOL_DONE', at: 150, turn: 1, callId: 'a', ok: true, output: null })
    expect(twoTools.getSnapshot().value).toEqual({ running: 'runningTools' })
  })

  it('should run the calls of one reply one at a time, in order, and take a result that comes out of order', () => {
    const actor = started()
    const calls = Array.from({ length: 500 }, (_, i) => ({ id: `c${i}`, name: 't', input: { i } }))
    actor.send({ type: 'MODEL_REPLIED', at: 1, turn: 1, attempt: 1, text: '', toolCalls: calls, usage: { inputTokens: 1, outputTokens: 1 } })
    const done = (id: string): void => actor.send({ type: 'TOOL_DONE', at: 2, turn: 1, callId: id, ok: true, output: null })
    expect(effectOf(actor.getSnapshot())).toMatchObject({ src: 'runTool', input: { call: { id: 'c0' } } })
    // A result for c2 before c1 (a snapshot from another order): taken, and c1 is still next.
    done('c0')
    done('c2')
    expect(effectOf(actor.getSnapshot())).toMatchObject({ src: 'runTool', key: 't1.c1', input: { call: { id: 'c1' } } })
    done('c2')
    expect(actor.getSnapshot().context.toolsDone).toEqual(['c0', 'c2'])
    done('c1')
    expect(effectOf(actor.getSnapshot())?.input).toMatchObject({ call: { id: 'c3' } })
    for (let i = 3; i < 500; i++) done(`c${i}`)
    expect(actor.getSnapshot().value).toEqual({ running: 'callingModel' })
    expect(effectOf(actor.getSnapshot())).toMatchObject({ src: 'callModel', key: 'm2.1' })
  })

  it('should hold only the current turn in context, whatever the conversation length', () => {
    const actor = started()
    const sizes: number[] = []
    for (let turn = 1; turn <= 30; turn++) {
      actor.send({ type: 'MODEL_REPLIED', at: turn, turn, attempt: 1, text: 'x'.repeat(500), toolCalls: [{ id: `c${turn}`, name: 't', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } })
      actor.send({ type: 'TOOL_DONE', at: turn, turn, callId: `c${turn}`, ok: true, output: 'y'.repeat(5_000) })
      sizes.push(JSON.stringify(actor.getPersistedSnapshot()).length)
    }
    // 30 turns of 5 kB tool results: only counters and ids may grow, by a few bytes.
    expect(sizes.at(-1)! - sizes[0]!).toBeLessThan(100)
  })
})

describe('thread machine: fields of snapshots recorded by older versions', () => {
  const failed: ThreadEvent = { type: 'MODEL_FAILED', at: 2, turn: 1, attempt: 1, error: { category: 'transient', message: 'overloaded' }, retryInMs: 10 }
  const replied: ThreadEvent = { type: 'MODEL_REPLIED', at: 3, turn: 1, attempt: 2, text: '', toolCalls: [{ id: 'c', name: 'echo', input: {} }], usage: { inputTokens: 1, outputTokens: 1 } }
  const drive = (start: ThreadInput) => {
    const actor = createActor(threadMachine, { input: start }).start()
    for (const event of [{ type: 'START', at: 1 } as const, failed, { type: 'RETRY_DUE', at: 12 } as const, replied, { type: 'TOOL_DONE', at: 13, turn: 1, callId: 'c', ok: true, output: 1 } as const]) actor.send(event)
    return actor.getSnapshot().context
  }

  it('should keep the last model error only for a thread started with keepsLastError, so older transcripts replay to their state.json', () => {
    expect(drive({ ...input, keepsLastError: true }).lastError).toEqual({ category: 'transient', message: 'overloaded' })
    const older = drive(input)
    expect('lastError' in older).toBe(false)
    // Nor a field for decisions on paused calls, in a thread that never paused.
    expect('callDecisions' in older).toBe(false)
  })
})
