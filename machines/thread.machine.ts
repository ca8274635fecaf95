/**
 * The thread statechart. Pure: no I/O, no clock, no randomness. Every input from the outside world
 * (model replies, tool results, timers, cancels, approvals) arrives as an event carrying its own
 * time `at`, so replaying recorded events through this machine reproduces the snapshot exactly.
 *
 * The machine invokes no actors. A state that needs the outside world (a model call, a tool call,
 * a wait, a limit decision, cancelling children) says so in its description, and `effectOf`
 * (effectOf.ts) names the effect a snapshot asks for; the runtime runs it and sends its result back
 * as an event. An invoked actor would cost an XState actor per model and tool call (about a quarter
 * of a turn's allocation, and most of what outlives it) and would have to be persisted with the
 * snapshot. Restoring a snapshot with plain XState, or replaying a transcript, runs nothing.
 *
 * This file holds the statechart alone (the Stately tools and `spindle viz` read it). What it is
 * built from has modules of its own, which its users import directly: threadPolicy.ts (limits and
 * policies), threadEvents.ts (its events), threadContext.ts (its context and input, `exceeded`),
 * threadOutcome.ts (`outcomeOf`).
 */
import { and, not, setup } from 'xstate'
import { assign } from './assign.js'
import type { ErrorCategory, ModelUsage, ThreadEvent } from './threadEvents.js'
import type { ThreadContext, ThreadInput, UsageTotals } from './threadContext.js'
import { exceeded } from './threadContext.js'
import type { TerminalStatus, ThreadOutcome } from './threadOutcome.js'
import { outcomeOf } from './threadOutcome.js'

/** Whether call `id` of the turn is still without a result. No allocation: guards run on every event. */
function isPending(context: ThreadContext, id: string): boolean {
  if (context.toolsDone.includes(id)) return false
  for (const call of context.toolCalls) if (call.id === id) return true
  return false
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

function isCurrentFailure(
  context: ThreadContext,
  event: ThreadEvent,
): event is Extract<ThreadEvent, { type: 'MODEL_FAILED' }> {
  return event.type === 'MODEL_FAILED' && event.turn === context.usage.turns + 1 && event.attempt === context.attempt
}

/** Totals with one more reply counted in. */
function addReply(totals: UsageTotals | undefined, usage: ModelUsage): UsageTotals {
  return {
    turns: (totals?.turns ?? 0) + 1,
    inputTokens: (totals?.inputTokens ?? 0) + usage.inputTokens,
    outputTokens: (totals?.outputTokens ?? 0) + usage.outputTokens,
    spend: (totals?.spend ?? 0) + (usage.cost ?? 0),
  }
}

/** The failure as `lastError`, for a thread that keeps it (not for those started before it existed). */
function keptError(context: ThreadContext, error: { category: ErrorCategory; message: string }): { lastError?: { category: ErrorCategory; message: string } } {
  return context.lastError === undefined ? {} : { lastError: { category: error.category, message: error.message } }
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
    /** A final answer that failed the directive's output schema. */
    replyOutputInvalid: ({ event }) => event.type === 'MODEL_REPLIED' && event.outputErrors !== undefined,
    /** Counting the answer in hand, the model may still give another (policy `output.maxTries`). */
    outputTriesLeft: ({ context }) => (context.outputTries ?? 0) + 1 < (context.policy.output?.maxTries ?? 1),
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
    isPendingPause: ({ context, event }) => event.type === 'TOOL_PAUSED' && event.turn === context.usage.turns && isPending(context, event.callId),
    decidesPendingCall: ({ context, event }) =>
      event.type === 'CALL_DECIDED' && context.pendingCall != null && event.callId === context.pendingCall.callId && event.requestId === context.pendingCall.requestId,
    /** A thread at a paused call carries on by a decision on it, never by a plain resume. */
    awaitsCall: ({ context }) => context.pendingCall != null,
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
      const next: Partial<ThreadContext> = {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        usage: {
          ...addReply(context.usage, event.usage),
          ...(event.model !== undefined
            ? { byModel: { ...context.usage.byModel, [event.model]: addReply(context.usage.byModel?.[event.model], event.usage) } }
            : context.usage.byModel
              ? { byModel: context.usage.byModel }
              : {}),
        },
        toolCalls: event.toolCalls,
        toolsDone: [],
        attempt: 1,
        lastFailure: null,
        promptTokens: event.usage.inputTokens,
        // The latest thing the model said: the partial result of a thread cancelled or denied later.
        result: event.text !== '' ? event.text : context.result,
      }
      if (context.callDecisions !== undefined) next.callDecisions = {}
      return next
    }),
    recordResult: assign(({ event }) => (event.type === 'MODEL_REPLIED' ? { result: event.text } : {})),
    /** The valid answer of a thread with an output schema (recorded with the reply). */
    recordOutput: assign(({ event }) => (event.type === 'MODEL_REPLIED' && event.output !== undefined ? { output: event.output } : {})),
    /** One more answer failed the output schema; the conversation tells the model why (messages.ts). */
    countInvalidOutput: assign(({ context }) => ({ outputTries: (context.outputTries ?? 0) + 1 })),
    failWithInvalidOutput: assign(({ context, event }) => {
      if (event.type !== 'MODEL_REPLIED') return {}
      const tries = (context.outputTries ?? 0) + 1
      return {
        outputTries: tries,
        error: {
          code: 'OUTPUT_INVALID',
          message: `The model's answer did not match the directive's output schema after ${tries} ${tries === 1 ? 'try' : 'tries'}: ${(event.outputErrors ?? []).join('; ')}`,
        },
      }
    }),
    recordToolDone: assign(({ context, event }) => {
      if (event.type !== 'TOOL_DONE') return {}
      return { activeMs: accruedMs(context, event.at), lastAt: event.at, toolsDone: [...context.toolsDone, event.callId] }
    }),
    /**
     * The last tool result of the turn: the turn's calls are done with, and so are the decisions on
     * them. A context that never had one keeps no field for them, so the snapshots of threads that
     * never paused are what they were before approvals existed (a transcript recorded then replays
     * to its state.json).
     */
    finishTools: assign(({ context, event }) => {
      if (event.type !== 'TOOL_DONE') return {}
      const next: Partial<ThreadContext> = { activeMs: accruedMs(context, event.at), lastAt: event.at, toolCalls: [], toolsDone: [] }
      if (context.callDecisions !== undefined) next.callDecisions = {}
      return next
    }),
    suspendAtCall: assign(({ context, event }) => {
      if (event.type !== 'TOOL_PAUSED') return {}
      const call = context.toolCalls.find((c) => c.id === event.callId)!
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        suspendReason: event.kind === 'approval' ? ('tool_approval' as const) : ('waiting' as const),
        pendingCall: {
          kind: event.kind,
          callId: event.callId,
          tool: call.name,
          input: call.input,
          requestId: event.requestId,
          deadlineAt: event.deadlineAt,
          request: event.request ?? null,
        },
      }
    }),
    /** Time waited for the decision is not active time, as for any suspension. */
    recordCallDecision: assign(({ context, event }) => {
      if (event.type !== 'CALL_DECIDED') return {}
      const by = event.by
      const decided =
        event.decision === 'approved'
          ? { decision: 'approved' as const, by, ...(event.input !== undefined ? { input: event.input } : {}) }
          : event.decision === 'denied'
            ? { decision: 'denied' as const, by, reason: event.reason ?? null }
            : event.decision === 'answered'
              ? { decision: 'answered' as const, by, answer: event.answer ?? null }
              : { decision: 'timed_out' as const, by }
      return {
        lastAt: event.at,
        suspendReason: null,
        pendingCall: null,
        callDecisions: { ...context.callDecisions, [event.callId]: decided },
      }
    }),
    scheduleRetry: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        retry: { dueAt: event.at + event.retryInMs, failure: event.error },
        lastFailure: event.error,
        ...keptError(context, event.error),
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
        ...keptError(context, event.error),
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
        ...keptError(context, event.error),
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
        ...keptError(context, event.error),
        retry: null,
      }
    }),
    failWithModelError: assign(({ context, event }) => {
      if (event.type !== 'MODEL_FAILED') return {}
      return {
        activeMs: accruedMs(context, event.at),
        lastAt: event.at,
        lastFailure: event.error,
        ...keptError(context, event.error),
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
    ...(input.keepsLastError ? { lastError: null } : {}),
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
              // Back through the limit check: every answer is a turn, and a model that keeps failing
              // the schema spends like any other.
              {
                guard: and(['isCurrentReply', 'replyOutputInvalid', 'outputTriesLeft']),
                target: 'checkingLimits',
                actions: ['recordReply', 'countInvalidOutput'],
              },
              { guard: and(['isCurrentReply', 'replyOutputInvalid']), target: '#thread.error', actions: ['recordReply', 'failWithInvalidOutput'] },
              { guard: 'isCurrentReply', target: '#thread.completed', actions: ['recordReply', 'recordResult', 'recordOutput'] },
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
          description: 'Effect runTool: the first tool call of the reply without a result; its intent is recorded before it runs, its result sent as TOOL_DONE. Re-entered for each call. A call that needs an approval, or waits for an answer, sends TOOL_PAUSED instead, and the thread suspends at it.',
          on: {
            TOOL_DONE: [
              // Straight to the next step, not through checkingLimits: an eventless step costs XState
              // about a quarter of a turn's interpreter work, and this is the path every turn takes.
              { guard: and(['isLastPendingTool', 'limitExceededAfterTools']), target: 'limitReached', actions: 'finishTools' },
              { guard: 'isLastPendingTool', target: 'callingModel', actions: 'finishTools' },
              { guard: 'isPendingTool', target: 'runningTools', reenter: true, actions: 'recordToolDone' },
            ],
            TOOL_PAUSED: { guard: 'isPendingPause', target: '#thread.suspended', actions: 'suspendAtCall' },
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
      description: 'Waits for a decision: RESUME (an approval of more, or a person carrying it on), or CALL_DECIDED when it waits at a tool call (pendingCall) for an approval or an answer.',
      on: {
        RESUME: { guard: not('awaitsCall'), target: 'running', actions: 'resumeWithLimits' },
        CALL_DECIDED: { guard: 'decidesPendingCall', target: '#thread.running.runningTools', actions: 'recordCallDecision' },
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
