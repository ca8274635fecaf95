/**
 * What a thread is configured with: its limits and the policies it was spawned under (retries,
 * escalation, hooks, tools, permissions, supervision). Plain data the configuration schema
 * produces and the thread's context keeps; apart from the machine, so that config/ and the
 * runtime's policy code can name these types without the statechart. Pure.
 */

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

/** Which tool calls wait for a person's approval, and what a request that waits too long becomes. */
export interface ApprovalPolicy {
  /** Tools whose every call needs approval (besides those declaring `needsApproval`). */
  tools: string[]
  /** null: a request waits until someone decides. */
  timeoutSeconds: number | null
  onTimeout: 'deny' | 'stay'
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
  /** Tool approvals (absent in threads from before them: none required by configuration). */
  approvals?: ApprovalPolicy
  /**
   * How a final answer is checked against the directive's output schema (config `output`); set
   * only for a thread whose directive has one. `maxTries`: answers the model may give in all.
   */
  output?: { maxTries: number }
  /** How the supervisor restarts this thread after a crash, and the strategy for its own children. */
  supervision?: {
    restart: 'permanent' | 'transient' | 'temporary'
    childStrategy: 'one_for_one' | 'one_for_all' | 'rest_for_one'
  }
}
