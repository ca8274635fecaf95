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
import type { CallModelInput, DecideLimitInput, RunToolInput, SettleChildrenInput, WaitUntilInput } from '../machines/effectOf.js'
import type { FailureInfo, HookVerdict, ThreadEvent, ToolCall } from '../machines/threadEvents.js'
import type { CallDecision } from '../machines/threadContext.js'
import type { Message, ModelAdapter, ModelRequest, ModelResponse, ToolDefinition } from './model.js'
import { atDeadline } from '../src/base/clock.js'
import type { Clock } from '../src/base/clock.js'
import { InvalidModelResponseError, ModelResponseSchema } from './model.js'
import { abandonable, modelTimeout } from './modelDeadline.js'
import type { Tool, ToolOutcome } from './tools.js'
import { executeToolCall } from './tools.js'
import type { Permissions } from '../src/base/permissions.js'
import { deniedCapability, describePermissions } from '../src/base/permissions.js'
import { SpindleError } from '../src/base/errors.js'
import { checkFinalAnswer } from './outputSchema.js'
import type { OutputValidator } from './outputSchema.js'
import type { ThreadDirective } from '../machines/threadContext.js'
import type { ReplySink } from './replyDelta.js'
import type { EffectTracing, ModelCallTrace, ToolCallTrace } from './effectTracing.js'

/**
 * How a tool call's run ended without a result: its process died (`crash`), or the runtime shut
 * down and aborted it once `timeouts.shutdownGraceMs` had passed (`shutdown`).
 */
export type ToolCut = 'crash' | 'shutdown'

/** What the runtime lends to effects. Effects never touch persistence or the machine directly. */
export interface EffectHost {
  readonly clock: Clock
  /**
   * The model a thread runs on: its name among the runtime's models and its adapter. Throws
   * MODEL_NOT_FOUND when the runtime has no model of the thread's name.
   */
  model(threadId: string): { name: string; adapter: ModelAdapter }
  readonly tools: ReadonlyMap<string, Tool>
  readonly toolDefinitions: readonly ToolDefinition[]
  /** The tools a thread may use (its directive's `tools`), or null for every tool of the runtime. */
  allowedTools(threadId: string): ReadonlySet<string> | null
  /** The thread's permissions (capability → granted, `*` for the rest), or undefined for everything. */
  permissions(threadId: string): Permissions | undefined
  readonly modelTimeoutMs: number
  readonly toolTimeoutMs: number
  /** Resolves once the thread's latest checkpoint (and transcript) is durable. */
  checkpointed(threadId: string): Promise<void>
  /** Records the event in the transcript, then sends it to the thread. False when dropped as stale. */
  deliver(threadId: string, event: ThreadEvent): boolean
  messages(threadId: string): readonly Message[]
  /** The thread's directive: its name, instructions and output schema. */
  directive(threadId: string): ThreadDirective
  /**
   * What checks a final answer of a thread whose directive has an output schema: the host's zod
   * schema when this process spawned the thread with one, else its kept JSON Schema.
   */
  outputValidator(threadId: string): OutputValidator
  /**
   * Classifies a model failure, decides the wait before the next attempt and asks the thread's
   * `error` hooks; records the classification in the transcript.
   */
  judgeModelFailure(
    threadId: string,
    error: unknown,
    at: { turn: number; attempt: number },
  ): Promise<{ failure: FailureInfo; retryInMs: number; decision?: HookVerdict }>
  /** What to do about a limit the thread hit: asks its `limit` hooks, else proposes an escalation. */
  decideLimit(threadId: string, hit: DecideLimitInput['hit']): Promise<Omit<Extract<ThreadEvent, { type: 'LIMIT_DECIDED' }>, 'type' | 'at'>>
  /**
   * Whether a tool call's intent was recorded before, by a run that did not record its result, and
   * how that run ended: cut by a crash, or aborted by a runtime that shut down; null when none was.
   */
  toolIntent(threadId: string, idempotencyKey: string): ToolCut | null
  /**
   * Records the intent to run a tool call and waits until that record is durable. Null, with
   * nothing recorded, once the runtime is closing (the call is left to the next process) or when
   * the step was stopped (`signal` aborted) while it waited for its turn: the tool will not run.
   * From its intent on, the call is under way until the returned function is called (once its
   * result is delivered, or it was stopped): a closing runtime lets it finish within
   * `timeouts.shutdownGraceMs` and records its result.
   */
  recordToolIntent(threadId: string, idempotencyKey: string, call: { id: string; name: string }, signal: AbortSignal): Promise<(() => void) | null>
  /**
   * Whether call `call` may run now: `run` (it needs no approval, or a `tool_approval` hook approved
   * it — noted in the transcript), `deny` (a hook denied it: the denial is its result), or `ask`
   * (the thread pauses at it for a person, under request `requestId`, until `deadlineAt`).
   */
  toolApproval(threadId: string, turn: number, call: ToolCall): ApprovalVerdict | Promise<ApprovalVerdict>
  /** The request id and deadline (ms since epoch, or null) of a call that waits for an answer. */
  waitRequest(threadId: string, turn: number, deadlineMs: number | undefined): { requestId: string; deadlineAt: number | null }
  /** The runtime is closing: no effect starts any more (the next process takes the step). */
  closing(): boolean
  /** An unexpected exception inside an effect: the supervisor restarts the thread or ends it in `error`. */
  crash(threadId: string, error: unknown): void
  /**
   * Runs just before a model call, once its checkpoint is durable: repairs tool calls left without
   * results, checks the tree's budget and the context window. 'stop' when it delivered an event
   * instead (the thread suspends or hands off) and the call must not be made.
   */
  beforeModelCall(threadId: string, at: { turn: number; attempt: number }): Promise<'proceed' | 'stop'>
  /**
   * A context_length failure that was handed off to a continuation: true when the thread was given
   * HAND_OFF and the failure must not be delivered.
   */
  handOffOnContextLength(threadId: string, failure: FailureInfo): Promise<boolean>
  /** Cancels every open child of a cancelled thread and resolves once all have settled. */
  settleChildren(threadId: string, reason: string, signal: AbortSignal): Promise<string[]>
  /** Where a model call's reply streams to, or null when nobody listens (the call streams nothing). */
  replySink(threadId: string, at: { turn: number; attempt: number }): ReplySink | null
  /** Spans of model and tool calls (OpenTelemetry), or null when the runtime traces nothing. */
  readonly tracing?: EffectTracing | null
}

/** What `EffectHost.toolApproval` decided about a call. */
export type ApprovalVerdict =
  | { verdict: 'run' }
  | { verdict: 'deny'; by: string; reason: string | null }
  | { verdict: 'ask'; requestId: string; deadlineAt: number | null }

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

/**
 * A snapshot in a state it cannot be in (a state.json edited by hand): the thread fails with this,
 * thrown as the effect starts, instead of running a step with nothing to run.
 */
function stepWithout(threadId: string, state: string, what: string): SpindleError {
  return new SpindleError(
    'STATE_CORRUPT',
    `Thread ${threadId} is in ${state} with no ${what}: its state.json does not fit the thread machine (edited by hand?). ` +
      `Its transcript still holds its history: \`spindle rebuild ${threadId} --apply\` rebuilds state.json from it, then resume the thread.`,
    { details: { threadId, state } },
  )
}

/** The `emit` of a call nobody listens to. */
function ignorePart(): void {}

/** Runs `body` detached; an exception that escapes it crashes only this thread. */
function detach(host: EffectHost, threadId: string, body: () => Promise<void>): void {
  body().catch((error: unknown) => host.crash(threadId, error))
}

/**
 * Gives repeated tool call ids of one reply a suffix: each call must get its own result, and a
 * provider that repeats an id would otherwise leave one call without.
 */
function uniqueCallIds(calls: Array<{ id: string }>): void {
  const seen = new Set<string>()
  for (const call of calls) {
    let id = call.id
    for (let n = 2; seen.has(id); n++) id = `${call.id}_${n}`
    call.id = id
    seen.add(id)
  }
}

/**
 * A tool call's input as the transcript will give it back: its JSON form. An input that has none
 * (a BigInt, a cycle, a function) would make recording the reply throw, and the thread crash and
 * restart until its supervisor gives up; it is an invalid response of the adapter instead.
 */
function recordableInput(adapter: string, call: { id: string; name: string; input: unknown }): unknown {
  if (call.input === undefined) return undefined
  let json: string | undefined
  try {
    json = JSON.stringify(call.input)
  } catch (error) {
    let why = 'it throws when written as JSON'
    try {
      why = String((error as Error).message)
    } catch {}
    throw new InvalidModelResponseError(adapter, `toolCalls: the input of call ${call.id} (${call.name}) cannot be recorded as JSON (${why})`)
  }
  if (json === undefined) throw new InvalidModelResponseError(adapter, `toolCalls: the input of call ${call.id} (${call.name}) has no JSON form (${typeof call.input})`)
  return JSON.parse(json) as unknown
}

/** What a model request says of the directive: its name, instructions and output schema when it has them. */
function directiveFields(directive: ThreadDirective): Pick<ModelRequest, 'directiveName' | 'instructions' | 'outputSchema'> {
  return {
    directiveName: directive.name,
    ...(directive.instructions ? { instructions: directive.instructions } : {}),
    ...(directive.output ? { outputSchema: directive.output } : {}),
  }
}

/**
 * A final answer's check against the directive's output schema, as the reply records it: its JSON
 * (`output`) or what is wrong (`outputErrors`). Nothing for a reply with tool calls or a thread
 * without a schema.
 */
function outputFields(host: EffectHost, threadId: string, directive: ThreadDirective, reply: ModelResponse): { output?: unknown; outputErrors?: string[] } {
  if (!directive.output || reply.toolCalls.length > 0) return {}
  const checked = checkFinalAnswer(reply.text, host.outputValidator(threadId))
  return checked.ok ? { output: checked.json } : { outputErrors: checked.errors }
}

/** The tools the model is shown: its directive's, less those needing a capability the thread lacks. */

function visibleTools(host: EffectHost, threadId: string): readonly ToolDefinition[] {
  const allowed = host.allowedTools(threadId)
  const permissions = host.permissions(threadId)
  if (!allowed && !permissions) return host.toolDefinitions
  return host.toolDefinitions.filter(
    (t) => (!allowed || allowed.has(t.name)) && deniedCapability(permissions, host.tools.get(t.name)?.permissions ?? []) === null,
  )
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

/**
 * Failure semantics: at least once. A model call in flight when the process dies is made again on
 * recovery with the same turn and attempt; a recorded reply is never requested again. A call still
 * unanswered at `timeouts.modelMs` is abandoned (MODEL_TIMEOUT, transient) whether or not the
 * adapter heeds its signal; a reply that comes after that is never recorded.
 */
export function callModelLogic(host: EffectHost) {
  return (input: CallModelInput): (() => void) => {
    // Made when the call starts: a thread waiting for its records to be durable needs none yet.
    let started: AbortController | null = null
    let stopped = false
    let settled = false
    let sink: ReplySink | null = null
    detach(host, input.threadId, async () => {
      await host.checkpointed(input.threadId)
      if (stopped) return
      if ((await host.beforeModelCall(input.threadId, input)) === 'stop' || stopped) return
      const controller = new AbortController()
      started = controller
      const timeout = modelTimeout(host.modelTimeoutMs)
      // On the runtime's clock, so that simulated time reaches it too.
      const timer = host.clock.setTimeout(() => controller.abort(timeout), host.modelTimeoutMs)
      sink = host.replySink(input.threadId, input)
      let event: ThreadEvent
      let span: ModelCallTrace | null = null
      try {
        // Inside the try: a model this runtime lacks fails the attempt like any other failure.
        const model = host.model(input.threadId)
        if (host.tracing) span = host.tracing.modelCall(input.threadId, input, model.name, model.adapter.name)
        const directive = host.directive(input.threadId)
        // Async, so that an adapter throwing before it returns a promise fails like any other.
        const generate = async (): Promise<unknown> =>
          model.adapter.generate({
            threadId: input.threadId,
            ...directiveFields(directive),
            turn: input.turn,
            attempt: input.attempt,
            messages: host.messages(input.threadId),
            tools: visibleTools(host, input.threadId),
            signal: controller.signal,
            streaming: sink !== null,
            emit: sink ? sink.emit : ignorePart,
          })
        const raw = await abandonable(span ? span.within(generate) : generate(), controller.signal)
        const checked = ModelResponseSchema.safeParse(raw)
        if (!checked.success) {
          const issue = checked.error.issues[0]!
          throw new InvalidModelResponseError(model.adapter.name, `${issue.path.join('.') || 'the response'}: ${issue.message}`)
        }
        const reply = checked.data as ModelResponse
        uniqueCallIds(reply.toolCalls)
        for (const call of reply.toolCalls) call.input = recordableInput(model.adapter.name, call)
        const replied: Extract<ThreadEvent, { type: 'MODEL_REPLIED' }> = {
          type: 'MODEL_REPLIED',
          at: host.clock.now(),
          turn: input.turn,
          attempt: input.attempt,
          text: reply.text,
          toolCalls: reply.toolCalls,
          usage: reply.usage,
          model: model.name,
        }
        // Set after, not spread in: a literal that spreads takes V8's slow path, on every reply.
        if (directive.output && reply.toolCalls.length === 0) Object.assign(replied, outputFields(host, input.threadId, directive, reply))
        span?.replied(reply)
        event = replied
      } catch (error) {
        const timedOut = controller.signal.aborted && controller.signal.reason === timeout
        host.clock.clearTimeout(timer)
        if (controller.signal.aborted && !timedOut) return
        // Before the judgement, which may wait for hooks: what streamed is void from now.
        if (timedOut) sink?.discarded('timed_out', 'transient')
        const judged = await host.judgeModelFailure(input.threadId, timedOut ? timeout : error, input)
        sink?.discarded('failed', judged.failure.category)
        if (controller.signal.aborted && !timedOut) return
        span?.failed(judged.failure)
        if (judged.failure.category === 'context_length' && !judged.decision) {
          if (await host.handOffOnContextLength(input.threadId, judged.failure)) return
          if (controller.signal.aborted) return
        }
        event = {
          type: 'MODEL_FAILED',
          at: host.clock.now(),
          turn: input.turn,
          attempt: input.attempt,
          error: judged.failure,
          retryInMs: judged.retryInMs,
          ...(judged.decision ? { decision: judged.decision } : {}),
        }
      } finally {
        host.clock.clearTimeout(timer)
        span?.end()
      }
      if (stopped) return
      settled = true
      const delivered = (!controller.signal.aborted || event.type === 'MODEL_FAILED') && host.deliver(input.threadId, event)
      if (sink && event.type === 'MODEL_REPLIED') {
        if (delivered) sink.recorded()
        else sink.discarded(host.closing() ? 'closed' : 'cancelled')
      }
    })
    // A call that already delivered has nothing to stop (and aborting costs an Error and an event).
    return () => {
      if (settled) return
      stopped = true
      sink?.discarded(host.closing() ? 'closed' : 'cancelled')
      started?.abort(new Error('model call stopped'))
    }
  }
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
