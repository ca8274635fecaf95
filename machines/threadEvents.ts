/**
 * The events the thread machine accepts (`ThreadEvent`, `THREAD_EVENT_TYPES`) and the data they
 * carry: tool calls, model usage, failures, hook verdicts, budget hits. Every one is a recorded
 * transcript entry as well as a machine input, so the actors, the transcript replay and the
 * runtime name them without the statechart. Pure.
 */
import type { Limits } from './threadPolicy.js'

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

/** Why a thread stopped for its budget: what the ledger said. */
export interface BudgetHit {
  /** spend, tokens: the ledger; wallTimeMs, retries (and tokens): budget governance. */
  amount: 'spend' | 'tokens' | 'wallTimeMs' | 'retries'
  /** Usage of the thread and its descendants. */
  used: number
  max: number
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
      /** The name of the runtime's model that replied (`default`, `fast` …); absent in transcripts from before several models. */
      model?: string
      /**
       * A final reply of a thread with an output schema: the JSON its text holds, once it passed
       * the schema (the thread completes with it). Recorded, so replay never validates again.
       */
      output?: unknown
      /**
       * A final reply of a thread with an output schema that failed it: what is wrong, one line per
       * problem. The model is asked again with them while tries are left; else the thread ends in
       * error (OUTPUT_INVALID).
       */
      outputErrors?: string[]
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
  | {
      /**
       * The call needs a decision from outside before it has a result: a person's approval before
       * it runs (`approval`), or an answer it waits for (`wait`). The thread suspends at it.
       */
      type: 'TOOL_PAUSED'
      at: number
      turn: number
      callId: string
      kind: 'approval' | 'wait'
      requestId: string
      deadlineAt: number | null
      request?: unknown
    }
  | {
      /** The decision on the call the thread is suspended at: it runs the call on from there. */
      type: 'CALL_DECIDED'
      at: number
      callId: string
      requestId: string
      decision: 'approved' | 'denied' | 'answered' | 'timed_out'
      by: string
      /** For `approved`: the input to run the call with, when the approver edited it. */
      input?: unknown
      /** For `denied`: why, which the model receives as the call's result. */
      reason?: string | null
      /** For `answered`: the call's result. */
      answer?: unknown
      /**
       * For `approved`: the approver's note. Not acted on by the thread: recorded here so that the
       * decision file a killed process did not write says it too, when written from the transcript.
       */
      message?: string
    }
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
  'TOOL_PAUSED',
  'CALL_DECIDED',
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
