/**
 * The thread machine's walk for xstate/graph: an input, the events the outside world could send in
 * each state, and the traversal options that keep the graph finite. The machine's own test and the
 * visualizations' test (which drives the Stately source the same way) share it.
 */
import type { SnapshotFrom } from 'xstate'
import { systemDefaults } from '../../config/load.js'
import type { threadMachine } from '../../machines/thread.machine.js'
import type { ThreadInput } from '../../machines/threadContext.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'

export const input: ThreadInput = {
  threadId: 'graph-aaaaaaaaaaaa',
  directive: { name: 'graph', prompt: 'walk every path' },
  limits: { turns: 2, tokens: null, spend: null, durationMs: null, spawns: null, depth: null },
  policy: { retry: { ...systemDefaults().retry, maxRetries: 1 }, escalation: systemDefaults().escalation, hooks: [] },
  depth: 0,
}

export type Snap = SnapshotFrom<typeof threadMachine>

/** The inputs the outside world could send in a given state, stamped with a fixed time. */
export function eventsFor(snapshot: Snap): ThreadEvent[] {
  const c = snapshot.context
  const turn = c.usage.turns + 1
  const at = 1_000
  const pending = c.toolCalls.filter((t) => !c.toolsDone.includes(t.id))
  return [
    { type: 'START', at },
    { type: 'MODEL_REPLIED', at, turn, attempt: c.attempt, text: '', toolCalls: [{ id: `c${turn}a`, name: 'lookup', input: {} }, { id: `c${turn}b`, name: 'lookup', input: {} }], usage: { inputTokens: 10, outputTokens: 2 } },
    { type: 'MODEL_REPLIED', at, turn, attempt: c.attempt, text: 'final answer', toolCalls: [], usage: { inputTokens: 10, outputTokens: 2, cost: 0.001 } },
    { type: 'MODEL_FAILED', at, turn, attempt: c.attempt, error: { category: 'transient', message: '503' }, retryInMs: 2_000 },
    { type: 'MODEL_FAILED', at, turn, attempt: c.attempt, error: { category: 'permanent', message: '401' }, retryInMs: 0 },
    { type: 'MODEL_FAILED', at, turn, attempt: c.attempt, error: { category: 'context_length', message: 'too long' }, retryInMs: 0 },
    // A hook that retries is bounded by its own `when`; here, by the attempt.
    ...(c.attempt < 2
      ? [{ type: 'MODEL_FAILED', at, turn, attempt: c.attempt, error: { category: 'permanent', message: '400' }, retryInMs: 5, decision: { action: 'retry', hookId: 'h' } } as ThreadEvent]
      : []),
    { type: 'MODEL_FAILED', at, turn, attempt: c.attempt, error: { category: 'transient', message: '503' }, retryInMs: 5, decision: { action: 'fail', hookId: 'h' } },
    { type: 'MODEL_FAILED', at, turn, attempt: c.attempt, error: { category: 'transient', message: '503' }, retryInMs: 5, decision: { action: 'abort', hookId: 'h' } },
    { type: 'LIMIT_DECIDED', at, action: 'escalate', proposed: 4, requestId: 'turns-2' },
    { type: 'LIMIT_DECIDED', at, action: 'raise', limits: { turns: 3 }, hookId: 'h' },
    { type: 'LIMIT_DECIDED', at, action: 'fail', hookId: 'h' },
    { type: 'LIMIT_DECIDED', at, action: 'abort', hookId: 'h' },
    ...pending.slice(0, 1).map((t): ThreadEvent => ({ type: 'TOOL_DONE', at, turn: c.usage.turns, callId: t.id, ok: true, output: 'r' })),
    { type: 'RETRY_DUE', at },
    { type: 'CANCEL', at, reason: 'operator' },
    { type: 'RESUME', at, limits: { turns: 3 } },
    { type: 'FAIL', at, error: { code: 'THREAD_CRASHED', message: 'boom' } },
    { type: 'HAND_OFF', at, nextThreadId: 'graph-bbbbbbbbbbbb' },
    // Recovery can quarantine a thread anywhere in running; offered at one point (a tool of the first
    // turn) to keep the number of simple paths the traversal walks within reach.
    ...(c.usage.turns === 1 && c.toolsDone.length === 0 ? [{ type: 'QUARANTINED', at, recoveries: 4, seq: 3, message: 'crash loop' } as ThreadEvent] : []),
  ]
}

export const traversal = {
  input,
  events: eventsFor,
  filterEvents: (snapshot: Snap, event: ThreadEvent) => snapshot.can(event),
  // Context that matters for behaviour, not timestamps: keeps the graph finite.
  serializeState: (snapshot: Snap) =>
    JSON.stringify([
      snapshot.value,
      snapshot.context.usage.turns,
      snapshot.context.attempt,
      snapshot.context.toolsDone.length,
      snapshot.context.limits.turns,
      snapshot.context.suspendReason,
    ]),
}
