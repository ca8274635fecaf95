/**
 * The shape of spindle's configuration. This schema is the single source of truth: the type is
 * inferred from it and every YAML layer is validated against it.
 */
import { z } from 'zod'
import { HookSpecSchema } from './hookSchema.js'

const limit = z.number().nonnegative().nullable()

export const LimitsSchema = z.strictObject({
  turns: limit,
  tokens: limit,
  /** US dollars */
  spend: limit,
  durationMs: limit,
  /** Child threads this thread may start. */
  spawns: limit,
  /** Levels of child threads below this one; a spawn that would go below 0 is refused. */
  depth: limit,
})

export const RetrySchema = z.strictObject({
  maxRetries: z.number().int().nonnegative(),
  baseMs: z.number().positive(),
  capMs: z.number().positive(),
  jitter: z.number().min(0).max(1),
  rateLimitDefaultMs: z.number().nonnegative(),
  quotaWaitMs: z.number().nonnegative(),
})

export const TimeoutsSchema = z.strictObject({
  modelMs: z.number().positive(),
  toolMs: z.number().positive(),
})

export const ERROR_CATEGORIES = [
  'transient',
  'rate_limited',
  'quota',
  'context_length',
  'limit_hit',
  'budget',
  'permanent',
  'cancelled',
] as const

function compiles(source: string): boolean {
  try {
    new RegExp(source)
    return true
  } catch {
    return false
  }
}

export const ErrorPatternSchema = z.strictObject({
  /** A JavaScript regular expression, matched case-insensitively against the failure's message. */
  match: z.string().min(1).refine(compiles, { message: 'is not a valid regular expression' }),
  category: z.enum(ERROR_CATEGORIES),
})

/** How a limit's proposed new value is computed when a thread hits it. */
export const EscalationRuleSchema = z.strictObject({
  policy: z.enum(['double', 'add', 'ceiling', 'deny_only']),
  /** For `add`: how much to add. */
  amount: z.number().positive().optional(),
  /** For `ceiling`: the value to propose; for `double` and `add`: a value never proposed past. */
  ceiling: z.number().positive().optional(),
})

export const EscalationSchema = z.strictObject({
  turns: EscalationRuleSchema,
  tokens: EscalationRuleSchema,
  spend: EscalationRuleSchema,
  durationMs: EscalationRuleSchema,
  /** Seconds an approval request stays open, stated in the request for whoever answers it. */
  requestTimeoutSeconds: z.number().int().positive(),
})

export const OrphansSchema = z.strictObject({
  /** A thread whose owner has not been heard from for this long is an orphan. */
  thresholdMs: z.number().int().positive(),
  /** Take over orphans found on this data directory without being asked (else report them). */
  autoTakeover: z.boolean(),
  /** How often leases are renewed and orphans looked for; null: a third of thresholdMs. */
  heartbeatMs: z.number().int().positive().nullable(),
})

export const RequestsSchema = z.strictObject({
  /** How often cancel and approval-response files of this runtime's threads are looked for. */
  pollMs: z.number().int().positive(),
  /** Every this many polls, every thread directory is swept (stray and forged requests are refused). */
  sweepEvery: z.number().int().positive(),
  /**
   * Thread directories a poll looks in besides those the request bell names; a file written by
   * hand is seen within ceil(threads / scanPerPoll) polls.
   */
  scanPerPoll: z.number().int().positive(),
})

export const ContextSchema = z.strictObject({
  /** Share of the model's context window that prompt tokens may reach before `context_window_pressure` fires. */
  pressureRatio: z.number().gt(0).max(1),
  /** What to do when no hook handles the pressure: hand off to a continuation thread, or carry on. */
  onPressure: z.enum(['continue_thread', 'ignore']),
  /** Most tokens (estimated) of history a continuation starts with; null: `resumeCeilingRatio` of the window. */
  resumeCeilingTokens: z.number().int().positive().nullable(),
  /** Share of the model's context window a continuation's rebuilt history may take when no ceiling is set. */
  resumeCeilingRatio: z.number().gt(0).max(1),
  /** The context window assumed for a model adapter that does not declare one (for the ceiling only). */
  defaultContextWindow: z.number().int().positive(),
})

export const SupervisionSchema = z.strictObject({
  /** How a parent's children are restarted after one crashes (the root group too). */
  strategy: z.enum(['one_for_one', 'one_for_all', 'rest_for_one']),
  /** A thread's restart type when its spawn does not say. */
  restart: z.enum(['permanent', 'transient', 'temporary']),
  /** At most this many restarts of one thread (one_for_one) or of one group (the other strategies) … */
  maxRestarts: z.number().int().nonnegative(),
  /** … within this window; past it what a restart would sweep ends in `error` with a crash report. */
  withinMs: z.number().int().positive(),
})

export const ChildrenSchema = z.strictObject({
  /**
   * A child that names no spend or token limit of its own reserves this share of what its parent
   * has available (so a wave of such children never takes the whole budget with the first one).
   */
  budgetShare: z.number().gt(0).max(1),
})

const RecoveryRuleSchema = z.strictObject({
  /** Attempts per handler before the next one in the chain takes over. */
  maxAttempts: z.number().int().nonnegative(),
  /** Wait before the next attempt; a failure during the cooldown reuses the last decision. */
  cooldownSeconds: z.number().nonnegative(),
  /** Handlers (directive names) after the thread's own, ending at `human`. */
  chain: z
    .array(z.string().min(1))
    .min(1)
    .refine((chain) => chain[chain.length - 1] === 'human', { message: "must end with 'human'" }),
})

/** Design 003 §6: what happens when a thread ends in `error`. */
export const RecoverySchema = z.strictObject({
  enabled: z.boolean(),
  ...RecoveryRuleSchema.shape,
  /** Per error code (`model_permanent`, `SUPERVISION_GAVE_UP`, `budget_exceeded` …): overrides. */
  byReason: z.record(z.string(), RecoveryRuleSchema.partial()),
})

const GovernanceActionSchema = z.enum(['reduced_context', 'manual_handoff', 'stop_run'])

const GovernanceBudgetsSchema = z.strictObject({
  /** Input plus output tokens of the thread (its continuation chain included). */
  tokens: z.number().int().positive().nullable(),
  /** Active running time in ms. */
  wallTimeMs: z.number().int().positive().nullable(),
  /** Model calls retried after a failure. */
  retries: z.number().int().nonnegative().nullable(),
  /** The action on each successive time a budget is exceeded; the last repeats. */
  degradePolicy: z.array(GovernanceActionSchema),
  /** The action when degradePolicy is empty. */
  onExceeded: GovernanceActionSchema,
})

/** Design 003 §7: per-thread budgets with a degrade policy. */
export const GovernanceSchema = z.strictObject({
  ...GovernanceBudgetsSchema.shape,
  byDirective: z.record(z.string(), GovernanceBudgetsSchema.partial()),
})

export const WaitsSchema = z.strictObject({
  /** How long wait_threads waits when the call does not say. */
  defaultTimeoutMs: z.number().int().positive(),
  /** Threads other processes run are looked up this often while waited on (local threads notify). */
  remotePollMs: z.number().int().positive(),
})

export const ConfigSchema = z.strictObject({
  limits: LimitsSchema,
  retry: RetrySchema,
  timeouts: TimeoutsSchema,
  errors: z.strictObject({ patterns: z.array(ErrorPatternSchema) }),
  escalation: EscalationSchema,
  orphans: OrphansSchema,
  requests: RequestsSchema,
  context: ContextSchema,
  supervision: SupervisionSchema,
  children: ChildrenSchema,
  waits: WaitsSchema,
  recovery: RecoverySchema,
  governance: GovernanceSchema,
  /** Hooks as data (design 000, "Hooks as the Policy Layer"); each layer's hooks keep their layer. */
  hooks: z.array(HookSpecSchema),
})

export type Config = z.infer<typeof ConfigSchema>
export type RecoveryPolicy = z.infer<typeof RecoverySchema>
export type GovernancePolicy = z.infer<typeof GovernanceSchema>
export type GovernanceAction = z.infer<typeof GovernanceActionSchema>
export type ErrorPattern = z.infer<typeof ErrorPatternSchema>
export type EscalationRule = z.infer<typeof EscalationRuleSchema>
export type EscalationPolicy = z.infer<typeof EscalationSchema>

/**
 * What one layer (a file, a directive, a spawn) may set: any subset of the full shape. Error
 * patterns of a layer are tried before those of the layers under it.
 */
export const ConfigLayerSchema = z.strictObject({
  limits: LimitsSchema.partial().optional(),
  retry: RetrySchema.partial().optional(),
  timeouts: TimeoutsSchema.partial().optional(),
  errors: z.strictObject({ patterns: z.array(ErrorPatternSchema) }).optional(),
  escalation: z
    .strictObject({
      turns: EscalationRuleSchema.optional(),
      tokens: EscalationRuleSchema.optional(),
      spend: EscalationRuleSchema.optional(),
      durationMs: EscalationRuleSchema.optional(),
      requestTimeoutSeconds: z.number().int().positive().optional(),
    })
    .optional(),
  orphans: OrphansSchema.partial().optional(),
  requests: RequestsSchema.partial().optional(),
  context: ContextSchema.partial().optional(),
  supervision: SupervisionSchema.partial().optional(),
  children: ChildrenSchema.partial().optional(),
  waits: WaitsSchema.partial().optional(),
  recovery: RecoverySchema.partial().optional(),
  governance: GovernanceSchema.partial().optional(),
  hooks: z.array(HookSpecSchema).optional(),
})

export type ConfigLayer = z.infer<typeof ConfigLayerSchema>
