/**
 * The thread statechart. Pure: no I/O, no clock, no randomness. Every input from the outside world
 * (model replies, tool results, timers, cancels, approvals) arrives as an event carrying its own
 * time `at`, so replaying recorded events through this machine reproduces the snapshot exactly.
 *
 * The machine invokes no actors. A state that needs the outside world (a model call, a tool call,
 * a wait, a limit decision, cancelling children) says so in its description, and `effectOf` names
 * the effect a snapshot asks for; the runtime runs it and sends its result back as an event. An
 * invoked actor would cost an XState actor per model and tool call (about a quarter of a turn's
 * allocation, and most of what outlives it) and would have to be persisted with the snapshot.
 * Restoring a snapshot with plain XState, or replaying a transcript, runs nothing.
 */
import { and, setup } from 'xstate'
import { assign } from './assign.js'

/** A limit that is null is unlimited (JSON has no Infinity). */
export interface Limits {
  turns: number | null
  tokens: number | null
  /** US dollars */
  spend: number | null
  /** Active running time, in ms (time spent suspended does not count). */
  durationMs: number | null
  /** Child threads this thread may start (checked when it spawns one). */
  spawns: number | null
  /** Levels of children below this thread (checked when it spawns one). */
  depth: number | null
}

/** The limits checked before every model call; spawns and depth are checked when a child is spawned. */
export type LimitName = 'turns' | 'tokens' | 'spend' | 'durationMs'

/**
 * How model failures are retried (config `retry`): attempts after the first, exponential backoff
 * from `baseMs` up to `capMs` with `jitter`, and the waits for a 429 without Retry-After and for
 * an exhausted quota. The configuration schema produces values of this type.
 */
export interface RetryPolicy {
  maxRetries: number
  baseMs: number
  capMs: number
  /** 0 to 1: the share of a delay drawn at random. */
  jitter: number
  rateLimitDefaultMs: number
  quotaWaitMs: number
}

/** How a limit's proposed new value is computed when a thread hits it. */
export interface EscalationRule {
  policy: 'double' | 'add' | 'ceiling' | 'deny_only'
  /** For `add`: how much to add. */
  amount?: number | undefined
  /** For `ceiling`: the value to propose; for `double` and `add`: a value never proposed past. */
  ceiling?: number | undefined
}

/** What is proposed when a thread hits each limit (config `escalation`), and how long a request stays open. */
export interface EscalationPolicy {
  turns: EscalationRule
  tokens: EscalationRule
  spend: EscalationRule
  durationMs: EscalationRule
  requestTimeoutSeconds: number
}

/**
 * The policies a thread was spawned with, resolved from every configuration layer and kept with
 * the thread: a thread resumed next week runs under the policy it started with.
 */
export interface ThreadPolicy {
  retry: RetryPolicy
  escalation: EscalationPolicy
  /** Hooks from the thread's directive and spawn call, as data (runtime-wide hooks are not copied here). */
  hooks: Array<Record<string, unknown>>
  /** The tools this thread may use (its directive's `tools`); absent: every tool of its runtime. */
  tools?: string[]
  /**
   * Capability → granted (`*` for the rest), already capped by the parent's: what the thread's
   * tools may do. Absent: everything.
   */
  permissions?: Record<string, boolean>
  /** How the supervisor restarts this thread after a crash, and the strategy for its own children. */
  supervision?: {
    restart: 'permanent' | 'transient' | 'temporary'
    childStrategy: 'one_for_one' | 'one_for_all' | 'rest_for_one'
  }
}

export interface LimitHit {
  limit: LimitName
  used: number
  max: number
  /** The new limit proposed to whoever approves; null when policy is deny_only. */
  proposed: number | null
  /** The approval request written for this hit. */
  requestId: string | null
}

/** What a hook decided about a failed model call (absent: no hook matched, the default applies). */
export interface HookVerdict {
  action: 'retry' | 'fail' | 'abort'
  hookId: string
  message?: string
}

export interface ToolCall {
  id: string
  name: string
  input: unknown
}

export interface ModelUsage {
  inputTokens: number
  outputTokens: number
  /** US dollars, when the adapter knows it. */
  cost?: number
}

export type ErrorCategory =
  | 'transient'
  | 'rate_limited'
  | 'quota'
  | 'context_length'
  | 'limit_hit'
  | 'budget'
  | 'permanent'
  | 'cancelled'

export interface FailureInfo {
  category: ErrorCategory
  message: string
  status?: number
  code?: string
}

export interface Usage {
  turns: number
  inputTokens: number
  outputTokens: number
  spend: number
}

/**
 * limit: its own usage hit a limit; budget: its tree's spend or tokens ran out in the ledger;
 * crash_loop: recovery kept finding it at the same point, where the process running it died.
 */
export type SuspendReason = 'limit' | 'error' | 'context_length' | 'budget' | 'crash_loop'

/** Why a thread stopped for its budget: what the ledger said. */
export interface BudgetHit {
  /** spend, tokens: the ledger; wallTimeMs, retries (and tokens): budget governance. */
  amount: 'spend' | 'tokens' | 'wallTimeMs' | 'retries'
  /** Usage of the thread and its descendants. */
  used: number
  max: number
}

export interface ThreadContext {
  threadId: string
  directive: { name: string; prompt: string }
  limits: Limits
  /** Model failures are retried while `attempt <= policy.retry.maxRetries`. */
  policy: ThreadPolicy
  /** Level in the thread tree: 0 for a thread spawned by host code, its parent's + 1 for a child. */
  depth: number
  /** Prompt (input) tokens of the latest model reply: how full the context window is. */
  promptTokens: number
  usage: Usage
  /** Time of the first START, ms since epoch. */
  startedAt: number | null
  /** Time of the last event applied while running; active time accrues from it. */
  lastAt: number | null
  activeMs: number
  /** Attempt number of the current model call within this turn, from 1. */
  attempt: number
  /** Tool calls the model asked for in the current turn. Bounded by one turn, not by the conversation. */
  toolCalls: ToolCall[]
  /** Ids of the current turn's tool calls whose results have been recorded. */
  toolsDone: string[]
  retry: { dueAt: number; failure: FailureInfo } | null
  suspendReason: SuspendReason | null
  limitHit: LimitHit | null
  budgetHit: BudgetHit | null
  lastFailure: FailureInfo | null
  result: string | null
  error: { code: string; message: string } | null
  cancelReason: string | null
  nextThreadId: string | null
  /** The thread this one continues (absent in snapshots from before continuation). */
  previousThreadId?: string | null
  /** Model calls retried after a failure, over the thread's life (budget governance counts them). */
  retries?: number
  /** The task this thread is an attempt at, when recovery escalation started it. */
  task?: TaskInfo | null
}

/** A thread started by recovery escalation to try a failed task again. */
export interface TaskInfo {
  /** The first thread of the task. */
  key: string
  /** The task's own directive (the first handler of its chain). */
  directive: string
  /** The task's original prompt. */
  prompt: string
  handler: string
  attempt: number
  /** The thread whose failure this attempt follows. */
  retryOf: string
}

export type ThreadEvent =
  | { type: 'START'; at: number }
  | {
      type: 'MODEL_REPLIED'
      at: number
      turn: number
      attempt: number
      text: string
      toolCalls: ToolCall[]
      usage: ModelUsage
    }
  | {
      type: 'MODEL_FAILED'
      at: number
      turn: number
      attempt: number
      error: FailureInfo
      retryInMs: number
      decision?: HookVerdict
    }
  | { type: 'TOOL_DONE'; at: number; turn: number; callId: string; ok: boolean; output: unknown }
  | { type: 'RETRY_DUE'; at: number }
  | {
      type: 'CANCEL'
      at: number
      reason: string
      by?: string
      /** The thread has children still running: it waits in `cancelling` until they have settled. */
      awaitChildren?: boolean
    }
  | { type: 'CHILDREN_SETTLED'; at: number; children: string[] }
  | { type: 'BUDGET_EXHAUSTED'; at: number; amount: BudgetHit['amount']; used: number; max: number }
  | {
      type: 'RESUME'
      at: number
      limits?: Partial<Limits>
      /** 'approved' answers a limit escalation; 'resumed' carries on after another suspension. */
      decision?: 'approved' | 'resumed'
      /** Who decided: 'api', 'file:<path>', a user name … (recorded, not interpreted). */
      by?: string
      requestId?: string
    }
  | {
      type: 'LIMIT_DECIDED'
      at: number
      /**
       * escalate: suspend and ask a person; raise: carry on under `limits`; fail / abort: end the
       * thread; budget: the limit is the thread's share of a tree's budget, suspend for `budget`.
       */
      action: 'escalate' | 'raise' | 'fail' | 'abort' | 'budget'
      limits?: Partial<Limits>
      proposed?: number | null
      requestId?: string
      hookId?: string
      message?: string
    }
  | { type: 'FAIL'; at: number; error: { code: string; message: string } }
  | { type: 'HAND_OFF'; at: number; nextThreadId: string }
  /** A new process took the running thread over: the time it was down is not active time. */
  | { type: 'RECOVERED'; at: number }
  /**
   * Recovery found the thread where it was at the last `recoveries - 1` recoveries, each followed
   * by the death of the process running it (seq: the last entry that moved it on). It is
   * suspended instead of run into the same death again.
   */
  | { type: 'QUARANTINED'; at: number; recoveries: number; seq: number; message: string }

export type ThreadEventType = ThreadEvent['type']

/** The event types the machine accepts; transcript entries of these types are machine inputs. */
export const THREAD_EVENT_TYPES: readonly ThreadEventType[] = [
  'START',
  'MODEL_REPLIED',
  'MODEL_FAILED',
  'TOOL_DONE',
  'RETRY_DUE',
  'CANCEL',
  'RESUME',
  'LIMIT_DECIDED',
  'FAIL',
  'HAND_OFF',
  'CHILDREN_SETTLED',
  'BUDGET_EXHAUSTED',
  'RECOVERED',
  'QUARANTINED',
]

export interface ThreadInput {
  threadId: string
  directive: { name: string; prompt: string }
  limits: Limits
  policy: ThreadPolicy
  depth: number
  /** A continuation starts with its predecessor's usage: a chain's cost is one running total. */
  carried?: { usage: Usage; activeMs: number; previousThreadId: string }
  task?: TaskInfo
}

export type TerminalStatus = 'completed' | 'error' | 'cancelled' | 'continued'

export interface ThreadOutcome {
  status: TerminalStatus | 'suspended'
  result?: string
  error?: { code: string; message: string }
  cost: Usage
  suspendReason?: SuspendReason
  nextThreadId?: string
}

export interface CallModelInput {
  threadId: string
  turn: number
  attempt: number
}

export interface RunToolInput {
  threadId: string
  turn: number
  call: ToolCall
}

export interface DecideLimitInput {
  threadId: string
  hit: { limit: LimitName; used: number; max: number }
}

export interface SettleChildrenInput {
  threadId: string
  reason: string
}

export interface WaitUntilInput {
  threadId: string
  dueAt: number
}

/** Whether call `id` of the turn is still without a result. No allocation: guards run on every event. */
function isPending(context: ThreadContext, id: string): boolean {
  if (context.toolsDone.includes(id)) return false
  for (const call of context.toolCalls) if (call.id === id) return true
  return false
}

/**
 * The first call of the turn without a result. Calls run one at a time, in order, so it is the one
 * after those done; the scan is for a snapshot whose results came in another order.
 */
function firstPendingTool(context: ThreadContext): ToolCall | undefined {
  if (!Array.isArray(context.toolCalls) || !Array.isArray(context.toolsDone)) return undefined
  const next = context.toolCalls[context.toolsDone.length]
  if (next !== undefined && !context.toolsDone.includes(next.id)) return next
  const done = new Set(context.toolsDone)
  return context.toolCalls.find((call) => !done.has(call.id))
}

/**
 * Active time accrued up to `at`, counted only while running; `lastAt` becomes `at`. Written out in
 * each update rather than spread in (`{ ...accrue(), usage, … }`): V8 builds an object literal that
 * starts with a spread and goes on with more properties some 100 times slower than a plain one.
 */
function accruedMs(context: ThreadContext, at: number): number {
  const since = context.lastAt ?? at
  return context.activeMs + Math.max(0, at - since)
}

/**
 * The first limit that `context`'s usage has reached, or null; `activeMs` as of an event not yet
 * applied (a guard). Checked in this order: turns, tokens, spend, duration.
 */
export function exceeded(context: Pick<ThreadContext, 'limits' | 'usage' | 'activeMs'>, activeMs = context.activeMs): DecideLimitInput['hit'] | null {
  const { limits, usage } = context
  if (limits.turns !== null && usage.turns >= limits.turns) return { limit: 'turns', used: usage.turns, max: limits.turns }
  const tokens = usage.inputTokens + usage.outputTokens
  if (limits.tokens !== null && tokens >= limits.tokens) return { limit: 'tokens', used: tokens, max: limits.tokens }
  if (limits.spend !== null && usage.spend >= limits.spend) return { limit: 'spend', used: usage.spend, max: limits.spend }
  if (limits.durationMs !== null && activeMs >= limits.durationMs) return { limit: 'durationMs', used: activeMs, max: limits.durationMs }
  return null
}

function isCurrentFailure(
  context: ThreadContext,
  event: ThreadEvent,
): event is Extract<ThreadEvent, { type: 'MODEL_FAILED' }> {
  return event.type === 'MODEL_FAILED' && event.turn === context.usage.turns + 1 && event.attempt === context.attempt
}

function isRetryable(category: ErrorCategory): boolean {
  return category === 'transient' || category === 'rate_limited' || category === 'quota'
}

export const threadMachine = setup({
  types: {
    context: {} as ThreadContext,
    events: {} as ThreadEvent,
    input: {} as ThreadInput,
    output: {} as ThreadOutcome,
  },
  guards: {
    cancelAwaitsChildren: ({ event }) => event.type === 'CANCEL' && event.awaitChildren === true,
    limitExceeded: ({ context }) => exceeded(context) !== null,
    /** A limit the turn reaches once its last tool result is applied (the time it took counts). */
    limitExceededAfterTools: ({ context, event }) => event.type === 'TOOL_DONE' && exceeded(context, accruedMs(context, event.at)) !== null,
    /** A raise that would hit a limit again at once is treated as an escalation, never a loop. */
    limitRaisedEnough: ({ context, event }) =>
      event.type === 'LIMIT_DECIDED' &&
      event.action === 'raise' &&
      exceeded({ ...context, limits: { ...context.limits, ...event.limits } }) === null,
    limitHookFails: ({ event }) => event.type === 'LIMIT_DECIDED' && event.action === 'fail',
    limitHookAborts: ({ event }) => event.type === 'LIMIT_DECIDED' && event.action === 'abort',
    limitIsBudget: ({ event }) => event.type === 'LIMIT_DECIDED' && event.action === 'budget',
    errorHookRetries: ({ context, event }) => isCurrentFailure(context, event) && event.decision?.action === 'retry',
    errorHookFails: ({ context, event }) => isCurrentFailure(context, event) && event.decision?.action === 'fail',
    errorHookAborts: ({ context, event }) => isCurrentFailure(context, event) && event.decision?.action === 'abort',
    isCurrentReply: ({ context, event }) =>
      event.type === 'MODEL_REPLIED' && event.turn === context.usage.turns + 1 && event.attempt === context.attempt,
    replyHasToolCalls: ({ event }) => event.type === 'MODEL_REPLIED' && event.toolCalls.length > 0,
    isCurrentFailure: ({ context, event }) => isCurrentFailure(context, event),
    canRetry: ({ context, event }) => {
      if (event.type !== 'MODEL_FAILED' || !isRetryable(event.error.category)) return false
      // Quota exhaustion waits once; retrying it harder only burns the wait. maxRetries 0 means
      // no retry of any kind, quota included.
      if (event.error.category === 'quota') return context.attempt < 2 && context.policy.retry.maxRetries > 0
      return context.attempt <= context.policy.retry.maxRetries
    },
    shouldSuspendOnFailure: ({ event }) =>
      event.type === 'MODEL_FAILED' && (isRetryable(event.error.category) || event.error.category === 'context_length'),
    isPendingTool: ({ context, event }) => event.type === 'TOOL_DONE' && event.turn === context.usage.turns && isPending(context, event.callId),
    // toolsDone holds distinct calls of toolCalls (a result is taken only for a pending call).
    isLastPendingTool: ({ context, event }) =>
      event.type === 'TOOL_DONE' &&
      event.turn === context.usage.turns &&
      context.toolCalls.length - context.toolsDone.length === 1 &&
      isPending(context, event.callId),
  },
  actions: {
    markStarted: assign(({ context, event }) => {
      if (event.type !== 'START') return {}
      return { startedAt: context.startedAt ?? event.at, lastAt: event.at }
    }),
    recordReply: assign(({ context, event }) => {
      if (event.type !== 'MODEL_REPLIED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        usage: {
          turns: context.usage.turns + 1,
          inputTokens: context.usage.inputTokens + event.usage.inputTokens,
          outputTokens: context.usage.outputTokens + event.usage.outputTokens,
          spend: context.usage.spend + (event.usage.cost ?? 0),
        },
        toolCalls: event.toolCalls,
        toolsDone: [],
        attempt: 1,
        lastFailure: null,
        promptTokens: event.usage.inputTokens,
        // The latest thing the model said: the partial result of a thread cancelled or denied later.
        result: event.text !== '' ? event.text : context.result,
      }
    }),
    recordResult: assign(({ event }) => (event.type === 'MODEL_REPLIED' ? { result: event.text } : {})),
    recordToolDone: assign(({ context, event }) => {
      if (event.type !== 'TOOL_DONE') return {}
      return { activeMs: accruedMs(context, event.at), lastAt: event.at, toolsDone: [...context.toolsDone, event.callId] }
    }),
    /** The last tool result of the turn: the turn's calls are done with. */
    finishTools: assign(({ context, event }) => {
      if (event.type !== 'TOOL_DONE') return {}
      return { activeMs: accruedMs(context, event.at), lastAt: event.at, toolCalls: [], toolsDone: [] }
    }),
    scheduleRetry: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        retry: { dueAt: event.at + event.retryInMs, failure: event.error },
        lastFailure: event.error,
        retries: (context.retries ?? 0) + 1,
      }
    }),
    beginRetry: assign(({ context, event }) => {
      if (event.type !== 'RETRY_DUE') return {}
      return { activeMs: accruedMs(context, event.at), lastAt: event.at, attempt: context.attempt + 1, retry: null }
    }),
    suspendForLimit: assign(({ context, event }) => {
      const hit = exceeded(context)
      if (!hit) return {}
      const decided = event.type === 'LIMIT_DECIDED' ? event : undefined
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        suspendReason: 'limit' as const,
        limitHit: { ...hit, proposed: decided?.proposed ?? null, requestId: decided?.requestId ?? null },
      }
    }),
    raiseLimits: assign(({ context, event }) => {
      if (event.type !== 'LIMIT_DECIDED') return {}
      return { activeMs: accruedMs(context, event.at), lastAt: event.at, limits: { ...context.limits, ...event.limits } }
    }),
    failByLimitHook: assign(({ context, event }) => {
      if (event.type !== 'LIMIT_DECIDED') return {}
      const hit = exceeded(context)
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        error: {
          code: 'HOOK_FAILED',
          message: `Hook ${event.hookId ?? '(unnamed)'} failed the thread when it hit its ${hit?.limit ?? ''} limit${event.message ? `: ${event.message}` : ''}.`,
        },
      }
    }),
    abortByLimitHook: assign(({ context, event }) => {
      if (event.type !== 'LIMIT_DECIDED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        cancelReason: `aborted by hook ${event.hookId ?? '(unnamed)'}${event.message ? `: ${event.message}` : ''}`,
      }
    }),
    failByErrorHook: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        lastFailure: event.error,
        error: {
          code: 'HOOK_FAILED',
          message: `Hook ${event.decision?.hookId} failed the thread on a ${event.error.category} model error${event.decision?.message ? `: ${event.decision.message}` : ''} (${event.error.message})`,
        },
      }
    }),
    abortByErrorHook: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        lastFailure: event.error,
        cancelReason: `aborted by hook ${event.decision?.hookId}${event.decision?.message ? `: ${event.decision.message}` : ''}`,
      }
    }),
    suspendForFailure: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        suspendReason: event.error.category === 'context_length' ? ('context_length' as const) : ('error' as const),
        lastFailure: event.error,
        retry: null,
      }
    }),
    failWithModelError: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        lastFailure: event.error,
        error: { code: event.error.code ?? `model_${event.error.category}`, message: event.error.message },
      }
    }),
    failWithError: assign(({ event }) => (event.type === 'FAIL' ? { error: event.error } : {})),
    /** The failure ends it, not the cancel it was carrying out: its outcome says error, like its state. */
    failWhileCancelling: assign(({ event }) => (event.type === 'FAIL' ? { error: event.error, cancelReason: null } : {})),
    resumeWithLimits: assign(({ context, event }) => {
      if (event.type !== 'RESUME') return {}
      return {
        limits: { ...context.limits, ...event.limits },
        suspendReason: null,
        limitHit: null,
        budgetHit: null,
        attempt: 1,
        retry: null,
        lastAt: event.at,
      }
    }),
    recordCancel: assign(({ event }) => (event.type === 'CANCEL' ? { cancelReason: event.reason } : {})),
    suspendForBudgetLimit: assign(({ context, event }) => {
      const hit = exceeded(context)
      if (!hit || (hit.limit !== 'spend' && hit.limit !== 'tokens')) return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        suspendReason: 'budget' as const,
        budgetHit: { amount: hit.limit, used: hit.used, max: hit.max },
      }
    }),
    suspendForBudget: assign(({ context, event }) => {
      if (event.type !== 'BUDGET_EXHAUSTED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        suspendReason: 'budget' as const,
        budgetHit: { amount: event.amount, used: event.used, max: event.max },
      }
    }),
    markRecovered: assign(({ event }) => (event.type === 'RECOVERED' ? { lastAt: event.at } : {})),
    /** Like a recovery, the time no process ran it is not active time. */
    suspendForCrashLoop: assign(({ event }) => {
      if (event.type !== 'QUARANTINED') return {}
      return {
        lastAt: event.at,
        suspendReason: 'crash_loop' as const,
        lastFailure: { category: 'permanent' as const, code: 'CRASH_LOOP', message: event.message },
        retry: null,
      }
    }),
    recordHandOff: assign(({ event }) => (event.type === 'HAND_OFF' ? { nextThreadId: event.nextThreadId } : {})),
  },
}).createMachine({
  id: 'thread',
  context: ({ input }) => ({
    threadId: input.threadId,
    directive: input.directive,
    limits: input.limits,
    policy: input.policy,
    depth: input.depth,
    promptTokens: 0,
    usage: input.carried ? { ...input.carried.usage } : { turns: 0, inputTokens: 0, outputTokens: 0, spend: 0 },
    startedAt: null,
    lastAt: null,
    activeMs: input.carried?.activeMs ?? 0,
    attempt: 1,
    toolCalls: [],
    toolsDone: [],
    retry: null,
    suspendReason: null,
    limitHit: null,
    budgetHit: null,
    lastFailure: null,
    result: null,
    error: null,
    cancelReason: null,
    nextThreadId: null,
    previousThreadId: input.carried?.previousThreadId ?? null,
    retries: 0,
    task: input.task ?? null,
  }),
  initial: 'created',
  states: {
    created: {
      on: {
        START: { target: 'running', actions: 'markStarted' },
        CANCEL: [
          { guard: 'cancelAwaitsChildren', target: '#thread.cancelling', actions: 'recordCancel' },
          { target: '#thread.cancelled', actions: 'recordCancel' },
        ],
        FAIL: { target: 'error', actions: 'failWithError' },
      },
    },
    running: {
      initial: 'checkingLimits',
      on: {
        CANCEL: [
          { guard: 'cancelAwaitsChildren', target: '#thread.cancelling', actions: 'recordCancel' },
          { target: '#thread.cancelled', actions: 'recordCancel' },
        ],
        FAIL: { target: 'error', actions: 'failWithError' },
        HAND_OFF: { target: 'continued', actions: 'recordHandOff' },
        RECOVERED: { actions: 'markRecovered' },
        QUARANTINED: { target: '#thread.suspended', actions: 'suspendForCrashLoop' },
      },
      states: {
        checkingLimits: {
          always: [
            { guard: 'limitExceeded', target: 'limitReached' },
            { target: 'callingModel' },
          ],
        },
        callingModel: {
          description: "Effect callModel: once this state's checkpoint is durable, the runtime calls the model with the conversation and sends MODEL_REPLIED or MODEL_FAILED.",
          on: {
            MODEL_REPLIED: [
              {
                guard: and(['isCurrentReply', 'replyHasToolCalls']),
                target: 'runningTools',
                actions: 'recordReply',
              },
              { guard: 'isCurrentReply', target: '#thread.completed', actions: ['recordReply', 'recordResult'] },
            ],
            BUDGET_EXHAUSTED: { target: '#thread.suspended', actions: 'suspendForBudget' },
            MODEL_FAILED: [
              {
                guard: 'errorHookRetries',
                target: 'waitingToRetry',
                actions: 'scheduleRetry',
              },
              {
                guard: 'errorHookFails',
                target: '#thread.error',
                actions: 'failByErrorHook',
              },
              {
                guard: 'errorHookAborts',
                target: '#thread.cancelled',
                actions: 'abortByErrorHook',
              },
              { guard: and(['isCurrentFailure', 'canRetry']), target: 'waitingToRetry', actions: 'scheduleRetry' },
              {
                guard: and(['isCurrentFailure', 'shouldSuspendOnFailure']),
                target: '#thread.suspended',
                actions: 'suspendForFailure',
              },
              { guard: 'isCurrentFailure', target: '#thread.error', actions: 'failWithModelError' },
            ],
          },
        },
        runningTools: {
          description: 'Effect runTool: the first tool call of the reply without a result; its intent is recorded before it runs, its result sent as TOOL_DONE. Re-entered for each call.',
          on: {
            TOOL_DONE: [
              // Straight to the next step, not through checkingLimits: an eventless step costs XState
              // about a quarter of a turn's interpreter work, and this is the path every turn takes.
              { guard: and(['isLastPendingTool', 'limitExceededAfterTools']), target: 'limitReached', actions: 'finishTools' },
              { guard: 'isLastPendingTool', target: 'callingModel', actions: 'finishTools' },
              { guard: 'isPendingTool', target: 'runningTools', reenter: true, actions: 'recordToolDone' },
            ],
          },
        },
        limitReached: {
          description: "Effect decideLimit: the thread's limit hooks decide, else an escalation is proposed; sent as LIMIT_DECIDED.",
          on: {
            LIMIT_DECIDED: [
              {
                guard: 'limitRaisedEnough',
                target: 'checkingLimits',
                actions: 'raiseLimits',
              },
              {
                guard: 'limitHookFails',
                target: '#thread.error',
                actions: 'failByLimitHook',
              },
              {
                guard: 'limitHookAborts',
                target: '#thread.cancelled',
                actions: 'abortByLimitHook',
              },
              { guard: 'limitIsBudget', target: '#thread.suspended', actions: 'suspendForBudgetLimit' },
              { target: '#thread.suspended', actions: 'suspendForLimit' },
            ],
          },
        },
        waitingToRetry: {
          description: 'Effect waitUntil: RETRY_DUE at retry.dueAt, a deadline kept in the context so that it survives a restart.',
          on: {
            RETRY_DUE: { target: 'callingModel', actions: 'beginRetry' },
          },
        },
      },
    },
    suspended: {
      on: {
        RESUME: { target: 'running', actions: 'resumeWithLimits' },
        CANCEL: [
          { guard: 'cancelAwaitsChildren', target: '#thread.cancelling', actions: 'recordCancel' },
          { target: '#thread.cancelled', actions: 'recordCancel' },
        ],
        FAIL: { target: 'error', actions: 'failWithError' },
      },
    },
    cancelling: {
      description: "Effect settleChildren: the thread's open children are cancelled; CHILDREN_SETTLED once all have stopped.",
      on: {
        CHILDREN_SETTLED: { target: 'cancelled' },
        FAIL: { target: 'error', actions: 'failWhileCancelling' },
      },
    },
    completed: { type: 'final' },
    error: { type: 'final' },
    cancelled: { type: 'final' },
    continued: { type: 'final' },
  },
  // While `output` runs, the snapshot's value is not yet the final state, so the status comes from
  // the field that each final state's incoming transition sets.
  output: ({ context }) => outcomeOf(terminalStatusOf(context), context),
})

function terminalStatusOf(context: ThreadContext): TerminalStatus {
  if (context.nextThreadId !== null) return 'continued'
  if (context.cancelReason !== null) return 'cancelled'
  if (context.error !== null) return 'error'
  return 'completed'
}

/** The outcome a host sees for a thread that stopped in `status`. */
export function outcomeOf(status: TerminalStatus | 'suspended', context: ThreadContext): ThreadOutcome {
  const outcome: ThreadOutcome = { status, cost: { ...context.usage } }
  if (context.result !== null) outcome.result = context.result
  if (context.error !== null) outcome.error = context.error
  if (status === 'cancelled' && context.cancelReason !== null) {
    outcome.error = { code: 'cancelled', message: context.cancelReason }
  }
  if (context.suspendReason !== null && status === 'suspended') outcome.suspendReason = context.suspendReason
  // Suspended because a model error outlasted its retries, or for a crash loop: the host is told which error.
  if (status === 'suspended' && (context.suspendReason === 'error' || context.suspendReason === 'context_length' || context.suspendReason === 'crash_loop') && context.lastFailure) {
    outcome.error = { code: context.lastFailure.code ?? `model_${context.lastFailure.category}`, message: context.lastFailure.message }
  }
  if (context.nextThreadId !== null) outcome.nextThreadId = context.nextThreadId
  return outcome
}

/**
 * The effect a snapshot asks the runtime to run. `key` names the step: it differs whenever the
 * machine leaves the state and enters it again (the next tool call, the next attempt, the next
 * turn), so the runtime starts an effect once per step and stops it when the key changes.
 */
export type ThreadEffect =
  | { src: 'callModel'; key: string; input: CallModelInput }
  | { src: 'runTool'; key: string; input: RunToolInput }
  | { src: 'decideLimit'; key: string; input: DecideLimitInput }
  | { src: 'waitUntil'; key: string; input: WaitUntilInput }
  | { src: 'settleChildren'; key: string; input: SettleChildrenInput }

/** The effect `snapshot`'s state asks for, or null (the thread waits for an event, or has stopped). */
export function effectOf(snapshot: { value: unknown; context: ThreadContext }): ThreadEffect | null {
  const value = snapshot.value
  const context = snapshot.context
  if (value === 'cancelling') return { src: 'settleChildren', key: 'c', input: { threadId: context.threadId, reason: context.cancelReason ?? 'cancelled' } }
  if (typeof value !== 'object' || value === null) return null
  const step = (value as { running?: string }).running
  const turns = context.usage.turns
  switch (step) {
    case 'callingModel':
      return { src: 'callModel', key: `m${turns + 1}.${context.attempt}`, input: { threadId: context.threadId, turn: turns + 1, attempt: context.attempt } }
    // A snapshot that cannot be in this state (no call left, no limit reached: a state.json edited
    // by hand) still names its effect, which then fails the thread with a message; never a throw here.
    case 'runningTools': {
      const call = firstPendingTool(context)
      return { src: 'runTool', key: `t${turns}.${call?.id}`, input: { threadId: context.threadId, turn: turns, call: call! } }
    }
    case 'limitReached': {
      const hit = exceeded(context)
      return { src: 'decideLimit', key: `l${turns}.${hit?.limit}`, input: { threadId: context.threadId, hit: hit! } }
    }
    case 'waitingToRetry': {
      const dueAt = context.retry?.dueAt ?? 0
      return { src: 'waitUntil', key: `w${dueAt}`, input: { threadId: context.threadId, dueAt } }
    }
    default:
      return null
  }
}
