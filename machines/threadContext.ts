/**
 * The thread machine's context (`ThreadContext`), the input that builds it (`ThreadInput`), and
 * `exceeded`, the limit check the machine's guards, its effects and the runtime's decisions share.
 * Apart from the statechart because most of the runtime reads a thread's context and never runs
 * the machine. Pure.
 */
import type { Limits, LimitName, ThreadPolicy } from './threadPolicy.js'
import type { BudgetHit, ErrorCategory, FailureInfo, ToolCall } from './threadEvents.js'

export interface LimitHit {
  limit: LimitName
  used: number
  max: number
  /** The new limit proposed to whoever approves; null when policy is deny_only. */
  proposed: number | null
  /** The approval request written for this hit. */
  requestId: string | null
}

/** What a thread's model calls used: replies (turns), tokens and US dollars. */
export interface UsageTotals {
  turns: number
  inputTokens: number
  outputTokens: number
  spend: number
}

export interface Usage extends UsageTotals {
  /**
   * The same, per model name (`default`, `fast` …) of the replies that named one. Absent until
   * such a reply; a continuation carries it on with the rest.
   */
  byModel?: Record<string, UsageTotals>
}

/**
 * limit: its own usage hit a limit; budget: its tree's spend or tokens ran out in the ledger;
 * crash_loop: recovery kept finding it at the same point, where the process running it died.
 */
export type SuspendReason = 'limit' | 'error' | 'context_length' | 'budget' | 'crash_loop' | 'tool_approval' | 'waiting'

/**
 * A tool call the thread waits at: for a person's approval before it runs (`approval`), or for an
 * answer from outside — a person's reply to `ask_human`, a webhook, a CI run — that becomes its
 * result (`wait`). The request a person or a process answers is `requestId`.
 */
export interface PendingCall {
  kind: 'approval' | 'wait'
  callId: string
  tool: string
  input: unknown
  requestId: string
  /** When the wait ends by itself (ms since epoch), or null: it waits until answered. */
  deadlineAt: number | null
  /** What a `wait` asks (a question, a description of the event awaited); null for an approval. */
  request: unknown
}

/** How a paused call was decided; its result follows from it when the thread runs the call again. */
export type CallDecision =
  | { decision: 'approved'; by: string; input?: unknown }
  | { decision: 'denied'; by: string; reason: string | null }
  | { decision: 'answered'; by: string; answer: unknown }
  | { decision: 'timed_out'; by: string }

/** What a thread was told: its directive's name, its task (the first user message) and its instructions. */
export interface ThreadDirective {
  name: string
  prompt: string
  /**
   * The system prompt, given to the model on every call (absent: none). Kept with the thread, so
   * a thread carried on later runs with the instructions it started with.
   */
  instructions?: string
  /**
   * The name of the runtime's model that runs the thread (`createRuntime({ models })`); absent:
   * `default`.
   */
  model?: string
  /**
   * The JSON Schema its final answer must match (the directive's `output`, a zod schema turned
   * into JSON Schema); absent: the answer is text. Kept with the thread, so a process that carries
   * it on validates the same way.
   */
  output?: Record<string, unknown>
}

export interface ThreadContext {
  threadId: string
  directive: ThreadDirective
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
  /** The call the thread is suspended at (`tool_approval`, `waiting`); absent or null otherwise. */
  pendingCall?: PendingCall | null
  /** Decisions on this turn's paused calls, by call id (absent in snapshots from before approvals). */
  callDecisions?: Record<string, CallDecision>
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
  /**
   * The latest model error of the thread's life, kept after the call that followed succeeded
   * (unlike `lastFailure`): what its retries were for. null until a model call fails; absent in
   * threads started before it was kept.
   */
  lastError?: { category: ErrorCategory; message: string } | null
  /** The task this thread is an attempt at, when recovery escalation started it. */
  task?: TaskInfo | null
  /** Final answers that failed the directive's output schema so far (absent until one does). */
  outputTries?: number
  /** The final answer's JSON, once it passed the directive's output schema (absent otherwise). */
  output?: unknown
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

export interface ThreadInput {
  threadId: string
  directive: ThreadDirective
  limits: Limits
  policy: ThreadPolicy
  depth: number
  /** A continuation starts with its predecessor's usage: a chain's cost is one running total. */
  carried?: { usage: Usage; activeMs: number; previousThreadId: string }
  task?: TaskInfo
  /**
   * Keep `lastError` in the context. Set for every thread started since the field exists; absent
   * in the spawn entries of older threads, so replaying their transcripts gives the snapshots their
   * state.json holds.
   */
  keepsLastError?: true
}

/**
 * The first limit that `context`'s usage has reached, or null; `activeMs` as of an event not yet
 * applied (a guard). Checked in this order: turns, tokens, spend, duration.
 */
export function exceeded(context: Pick<ThreadContext, 'limits' | 'usage' | 'activeMs'>, activeMs = context.activeMs): { limit: LimitName; used: number; max: number } | null {
  const { limits, usage } = context
  if (limits.turns !== null && usage.turns >= limits.turns) return { limit: 'turns', used: usage.turns, max: limits.turns }
  const tokens = usage.inputTokens + usage.outputTokens
  if (limits.tokens !== null && tokens >= limits.tokens) return { limit: 'tokens', used: tokens, max: limits.tokens }
  if (limits.spend !== null && usage.spend >= limits.spend) return { limit: 'spend', used: usage.spend, max: limits.spend }
  if (limits.durationMs !== null && activeMs >= limits.durationMs) return { limit: 'durationMs', used: activeMs, max: limits.durationMs }
  return null
}
