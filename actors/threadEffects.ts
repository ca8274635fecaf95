/**
 * The effects the thread machine's states ask for (`effectOf`): call the model, run one tool call,
 * wait for a deadline, decide a limit, settle children. Side effects. Not imported by machines/.
 * Each is started with its input and returns what stops it; the runtime starts one per step and
 * stops it when the thread leaves the step.
 *
 * Each effect first waits until the checkpoint of the state that started it is durable
 * (write-ahead), then acts, then hands its result to `host.deliver`, which records it in the
 * transcript before the machine sees it. Results that arrive after the effect was stopped are
 * dropped, never applied.
 */
import type { DecideLimitInput, RunToolInput, SettleChildrenInput, WaitUntilInput } from '../machines/effectOf.js'
import type { ToolCall } from '../machines/threadEvents.js'
import type { CallDecision } from '../machines/threadContext.js'
import { atDeadline } from '../src/base/clock.js'
import type { ToolOutcome } from './tools.js'
import { executeToolCall } from './tools.js'
import { deniedCapability, describePermissions } from '../src/base/permissions.js'
import type { ToolCallTrace } from './effectTracing.js'
import type { EffectHost, ToolCut } from './effectPorts.js'
import { detach, stepWithout } from './effectPorts.js'
import { callModelLogic } from './modelCall.js'

/** The result the model gets for a call decided without running it: denied, answered, timed out. */
export function decidedOutcome(call: ToolCall, decision: CallDecision): ToolOutcome | null {
  switch (decision.decision) {
    case 'approved':
      return null
    case 'answered':
      return { ok: true, output: decision.answer }
    case 'denied':
      return {
        ok: false,
        output: {
          error: 'TOOL_DENIED',
          message: `The call to "${call.name}" was denied by ${decision.by}${decision.reason ? `: ${decision.reason}` : ''}. It did not run. Do the task another way, or say that you cannot.`,
          ...(decision.reason ? { reason: decision.reason } : {}),
        },
      }
    case 'timed_out':
      return {
        ok: false,
        output: { error: 'WAIT_TIMED_OUT', message: `No answer came for the call to "${call.name}" before its deadline. Go on without it, or say what is missing.` },
      }
  }
}

/** Why a call may not run (the tool is not the directive's, or needs a capability it lacks), or null. */
function refusal(host: EffectHost, threadId: string, call: ToolCall): ToolOutcome | null {
  const allowed = host.allowedTools(threadId)
  if (allowed && !allowed.has(call.name)) {
    return { ok: false, output: { error: 'TOOL_NOT_ALLOWED', message: `The tool "${call.name}" is not among this directive's tools (${[...allowed].join(', ') || 'none'}).` } }
  }
  const permissions = host.permissions(threadId)
  const needs = host.tools.get(call.name)?.permissions ?? []
  const denied = deniedCapability(permissions, needs)
  if (denied !== null) {
    return {
      ok: false,
      output: {
        error: 'PERMISSION_DENIED',
        message: `The tool "${call.name}" needs the permission "${denied}", which this thread does not have (its permissions: ${describePermissions(permissions!)}). Do the task without it, or say that you cannot.`,
      },
    }
  }
  return null
}

export function toolIdempotencyKey(threadId: string, turn: number, callId: string): string {
  return `${threadId}:${turn}:${callId}`
}
/** The result a non-idempotent call gets instead of a second run, after a run that recorded no result. */
function interrupted(call: ToolCall, cut: ToolCut): ToolOutcome {
  const why =
    cut === 'shutdown'
      ? 'was still running when the process shut down, and was stopped before its result was recorded'
      : 'was interrupted by a crash before its result was recorded'
  return {
    ok: false,
    output: {
      error: 'TOOL_INTERRUPTED',
      message: `The call to "${call.name}" ${why}. It was not run again because the tool is not idempotent; it may or may not have taken effect.`,
    },
  }
}

/**
 * Failure semantics: a call's intent is durable before it runs and its result is recorded after.
 * After a crash between the two, an idempotent tool runs again with the same idempotency key; any
 * other tool is not run again, and the model receives an error result saying so. A closing runtime
 * starts no call, lets those under way finish within `timeouts.shutdownGraceMs` (their results are
 * recorded), then aborts the rest; the model is then told the process shut down, not that it crashed.
 */
export function runToolLogic(host: EffectHost) {
  return (input: RunToolInput): (() => void) => {
    // The tool's own controller: aborted when this step stops, and by executeToolCall on timeout
    // (so `stopped`, not the signal, says whether this step was stopped).
    const controller = new AbortController()
    let stopped = false
    let settled = false
    /** Ends the call's being under way (see EffectHost.recordToolIntent); null before its intent. */
    let underWay: (() => void) | null = null
    let span: ToolCallTrace | null = null
    const { threadId, turn, decision } = input
    if (!input.call) throw stepWithout(threadId, 'runningTools', 'a tool call without a result')
    // An approver may have edited the input: the call runs with theirs, under the same id.
    const call: ToolCall = decision?.decision === 'approved' && decision.input !== undefined ? { ...input.call, input: decision.input } : input.call
    const key = toolIdempotencyKey(threadId, turn, call.id)
    const done = (outcome: ToolOutcome): void => {
      settled = true
      // A call decided without running (denied, answered, refused) gets its span here, at once.
      if (host.tracing) (span ?? host.tracing.toolCall(threadId, turn, call))?.end(outcome)
      host.deliver(threadId, { type: 'TOOL_DONE', at: host.clock.now(), turn, callId: call.id, ok: outcome.ok, output: outcome.output })
    }
    detach(host, threadId, async () => {
      // No separate checkpoint wait: the intent is appended after the records that started this
      // step, so the one wait for the intent covers them too.
      await Promise.resolve()
      if (stopped) return
      const tool = host.tools.get(call.name)
      // Decided without running (denied, answered, timed out): the decision is its result.
      let outcome: ToolOutcome | null = decision ? decidedOutcome(call, decision) : null
      // A refused call has no effect to protect: no intent, and the same answer after a crash.
      outcome ??= refusal(host, threadId, call)
      const cut = outcome ? null : host.toolIntent(threadId, key)
      if (cut !== null && !tool?.idempotent) outcome = interrupted(call, cut)
      if (outcome) return done(outcome)
      // An intent means the call was cleared to run before (approved, or needing no approval).
      if (!decision && cut === null && tool) {
        const asked = host.toolApproval(threadId, turn, call)
        const approval = asked instanceof Promise ? await asked : asked
        if (stopped) return
        if (approval.verdict === 'deny') return done(decidedOutcome(call, { decision: 'denied', by: approval.by, reason: approval.reason })!)
        if (approval.verdict === 'ask') {
          settled = true
          host.tracing?.toolCall(threadId, turn, call)?.end(undefined, 'approval')
          host.deliver(threadId, { type: 'TOOL_PAUSED', at: host.clock.now(), turn, callId: call.id, kind: 'approval', requestId: approval.requestId, deadlineAt: approval.deadlineAt })
          return
        }
      }
      underWay = await host.recordToolIntent(threadId, key, call, controller.signal)
      if (!underWay) return
      try {
        if (stopped) return
        if (host.tracing) span = host.tracing.toolCall(threadId, turn, call)
        const execute = () => executeToolCall(host.tools, call, { signal: controller.signal, idempotencyKey: key, threadId }, host.toolTimeoutMs, controller)
        outcome = await (span ? span.within(execute) : execute())
        if (stopped) return
        if (outcome.wait) {
          // Handed to the outside world: the thread suspends at the call until it is answered.
          const { requestId, deadlineAt } = host.waitRequest(threadId, turn, outcome.wait.deadlineMs)
          settled = true
          span?.end(undefined, 'wait')
          host.deliver(threadId, { type: 'TOOL_PAUSED', at: host.clock.now(), turn, callId: call.id, kind: 'wait', requestId, deadlineAt, request: outcome.wait.request })
          return
        }
        done(outcome)
      } finally {
        // After the delivery: a closing runtime waiting for this call finds its result recorded.
        underWay()
        span?.end()
      }
    })
    return () => {
      if (settled) return
      stopped = true
      // Its result would be dropped: a closing runtime has nothing to wait for, even from a tool
      // that ignores the abort.
      underWay?.()
      controller.abort(new Error('tool call stopped'))
    }
  }
}

/** A deadline that survives restarts: the wait is recomputed from `dueAt` each time it starts. */
export function waitUntilLogic(host: EffectHost) {
  return (input: WaitUntilInput): (() => void) =>
    // A wait past a timer's range (a Retry-After of weeks, a quota reset date) is armed in steps.
    atDeadline(host.clock, input.dueAt, () => host.deliver(input.threadId, { type: 'RETRY_DUE', at: host.clock.now() }))
}

/** Decides what a limit hit leads to. Hooks may be code: they run only once the hit is durable. */
export function decideLimitLogic(host: EffectHost) {
  return (input: DecideLimitInput): (() => void) => {
    if (!input.hit) throw stepWithout(input.threadId, 'limitReached', 'a limit reached')
    const controller = new AbortController()
    detach(host, input.threadId, async () => {
      await host.checkpointed(input.threadId)
      if (controller.signal.aborted) return
      const decided = await host.decideLimit(input.threadId, input.hit)
      if (controller.signal.aborted) return
      host.deliver(input.threadId, { type: 'LIMIT_DECIDED', at: host.clock.now(), ...decided })
    })
    return () => controller.abort()
  }
}

/** Cancels the children of a cancelled thread, then tells it they have settled. */
export function settleChildrenLogic(host: EffectHost) {
  return (input: SettleChildrenInput): (() => void) => {
    const controller = new AbortController()
    detach(host, input.threadId, async () => {
      await host.checkpointed(input.threadId)
      if (controller.signal.aborted) return
      const children = await host.settleChildren(input.threadId, input.reason, controller.signal)
      if (controller.signal.aborted) return
      host.deliver(input.threadId, { type: 'CHILDREN_SETTLED', at: host.clock.now(), children })
    })
    return () => controller.abort()
  }
}

/** Nothing to stop: an effect asked for while the runtime closes, which the next process starts. */
const NOTHING_STARTED = (): void => {}

/** Once the runtime is closing, no effect starts: the step stays where its checkpoint says. */
function unlessClosing<I>(host: EffectHost, start: (input: I) => () => void): (input: I) => () => void {
  return (input) => (host.closing() ? NOTHING_STARTED : start(input))
}

export function createThreadEffects(host: EffectHost) {
  return {
    callModel: unlessClosing(host, callModelLogic(host)),
    runTool: unlessClosing(host, runToolLogic(host)),
    waitUntil: unlessClosing(host, waitUntilLogic(host)),
    decideLimit: unlessClosing(host, decideLimitLogic(host)),
    settleChildren: unlessClosing(host, settleChildrenLogic(host)),
  }
}

/** Each effect by name: started with its input, it returns what stops it. */
export type ThreadEffects = ReturnType<typeof createThreadEffects>
