/**
 * What the effects need of the runtime (the host port), and the two helpers every effect uses:
 * running its body detached, and refusing a step a hand-edited state.json left without its input.
 * Side effects. Not imported by machines/.
 */
import type { DecideLimitInput } from '../machines/effectOf.js'
import type { FailureInfo, HookVerdict, ThreadEvent, ToolCall } from '../machines/threadEvents.js'
import type { ThreadDirective } from '../machines/threadContext.js'
import type { Message, ModelAdapter, ToolDefinition } from './model.js'
import type { Clock } from '../src/base/clock.js'
import type { Tool } from './tools.js'
import type { Permissions } from '../src/base/permissions.js'
import { SpindleError } from '../src/base/errors.js'
import type { OutputValidator } from './outputSchema.js'
import type { ReplySink } from './replyDelta.js'
import type { EffectTracing } from './effectTracing.js'

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


/**
 * A snapshot in a state it cannot be in (a state.json edited by hand): the thread fails with this,
 * thrown as the effect starts, instead of running a step with nothing to run.
 */
export function stepWithout(threadId: string, state: string, what: string): SpindleError {
  return new SpindleError(
    'STATE_CORRUPT',
    `Thread ${threadId} is in ${state} with no ${what}: its state.json does not fit the thread machine (edited by hand?). ` +
      `Its transcript still holds its history: \`spindle rebuild ${threadId} --apply\` rebuilds state.json from it, then resume the thread.`,
    { details: { threadId, state } },
  )
}

/** Runs `body` detached; an exception that escapes it crashes only this thread. */
export function detach(host: EffectHost, threadId: string, body: () => Promise<void>): void {
  body().catch((error: unknown) => host.crash(threadId, error))
}
