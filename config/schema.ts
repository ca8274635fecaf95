/**
 * The shape of spindle's configuration. This schema is the single source of truth: the type is
 * inferred from it and every YAML layer is validated against it.
 */
import { createRequire } from 'node:module'
import { RegExpParser, visitRegExpAST } from '@eslint-community/regexpp'
import type { analyse as Analyse } from 'scslre'
import { z } from 'zod'
import type { EscalationPolicy, EscalationRule, Limits, RetryPolicy } from '../machines/thread.machine.js'
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

/** Longest regular expression a configuration (an error pattern, a hook's `matches`) may hold. */
export const MAX_PATTERN_LENGTH = 1000

/**
 * Why a JavaScript regular expression could take super-linear time on some input (catastrophic
 * backtracking), or null. JavaScript regexes cannot be interrupted: one such pattern, tried on an
 * error message a provider sent, would block the whole process. Refused, on the pattern's syntax
 * tree (parsed by regexpp, ESLint's regex parser): a repetition inside a repetition (`(a+)+`,
 * `(\w*\s?)*`), backreferences (`(a*)\1`), and what scslre (the analysis behind
 * eslint-plugin-regexp's no-super-linear-backtracking) finds: two unbounded repetitions that can
 * trade the same run of characters (`a.*b.*c`, `\d*\w+`, cubic and worse once the engine retries
 * at every start). Allowed: a single unbounded gap tried from every start (`\d+ms`), quadratic at
 * worst and bounded by the length of what is matched. A pattern that does not parse is left to the
 * compile check.
 */
export function regexHazard(source: string): string | null {
  if (source.length > MAX_PATTERN_LENGTH) return `is longer than ${MAX_PATTERN_LENGTH} characters`
  let pattern: ReturnType<RegExpParser['parsePattern']>
  try {
    pattern = new RegExpParser().parsePattern(source)
  } catch {
    return null
  }
  let hazard: string | null = null
  // How many repetitions (a quantifier that can match more than once) enclose the node visited.
  let repeating = 0
  visitRegExpAST(pattern, {
    onQuantifierEnter(node) {
      if (node.max <= 1) return
      if (repeating > 0) {
        hazard ??= `repeats \`${node.raw}\` inside another repetition (like \`(a+)+\`), which can take exponential time; write it without the nesting`
      }
      repeating++
    },
    onQuantifierLeave(node) {
      if (node.max > 1) repeating--
    },
    onBackreferenceEnter(node) {
      hazard ??= `uses a backreference (${node.raw}), which can take exponential time`
    },
  })
  return hazard ?? backtrackingHazard(pattern.raw)
}

let analyse: typeof Analyse | null = null
/** Set while the configuration shipped with spindle is validated (`trustingShippedPatterns`). */
let shipped = false

/**
 * Runs `fn`, which validates the configuration shipped with spindle, without scslre's analysis of
 * its patterns: a test holds them to the full check (test/config/hostileConfig.test.ts). Loading
 * the analysis (scslre and refa) costs a process about 50 ms and 11 MB of memory, which every
 * runtime and CLI command would pay only to re-check spindle's own defaults.
 */
export function trustingShippedPatterns<T>(fn: () => T): T {
  shipped = true
  try {
    return fn()
  } finally {
    shipped = false
  }
}

function backtrackingHazard(source: string): string | null {
  if (shipped) return null
  // Loaded on the first pattern a user configures (CommonJS: require is synchronous, as zod's checks are).
  analyse ??= (createRequire(import.meta.url)('scslre') as { analyse: typeof Analyse }).analyse
  let report: ReturnType<typeof Analyse>['reports'][number] | undefined
  try {
    // The flags the patterns run with (classifyError and matches() match case-insensitively).
    report = analyse({ source, flags: 'i' }, { reportTypes: { Move: false }, maxReports: 1 }).reports[0]
  } catch {
    return null
  }
  if (!report) return null
  const run = `a long run of ${JSON.stringify(report.character.pick)}`
  if (report.type === 'Trade') {
    return `has two repetitions, \`${report.startQuant.raw}\` and \`${report.endQuant.raw}\`, that can both match ${run}, which can take ${report.exponential ? 'exponential' : 'polynomial'} time; bound one of them (for example \`.{0,200}\` instead of \`.*\`)`
  }
  return `repeats \`${report.quant.raw}\` in a way that can match ${run} in many ways, which can take ${report.exponential ? 'exponential' : 'polynomial'} time; write it so each character can be matched one way only`
}

/** Why `source` is no JavaScript regular expression (the engine's message), or null when it is one. */
export function regexCompileError(source: string): string | null {
  try {
    new RegExp(source)
    return null
  } catch (error) {
    return (error as Error).message
  }
}

function compiles(source: string): boolean {
  return regexCompileError(source) === null
}

export const ErrorPatternSchema = z.strictObject({
  /**
   * A JavaScript regular expression, matched case-insensitively against the failure's message.
   * Patterns that can backtrack catastrophically are refused (see regexHazard).
   */
  match: z
    .string()
    .min(1)
    .refine(compiles, { message: 'is not a valid regular expression' })
    .superRefine((source, ctx) => {
      const hazard = compiles(source) ? regexHazard(source) : null
      if (hazard) ctx.addIssue({ code: 'custom', message: `${hazard}` })
    }),
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
  /**
   * Recoveries in a row (each after the process running it died) that may find a thread at the
   * same point of its history; the next one quarantines it (suspends it, CRASH_LOOP). null: never.
   */
  maxRecoveries: z.number().int().nonnegative().nullable(),
  /**
   * How long a crash-loop suspect may run alone, holding every other thread back, without taking a
   * step; then everything runs again beside it. null: until it steps or stops.
   */
  aloneMs: z.number().int().positive().nullable(),
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
export type { EscalationPolicy, EscalationRule }

// The thread machine owns the policy types a thread carries; the schema must produce them.
LimitsSchema satisfies z.ZodType<Limits>
RetrySchema satisfies z.ZodType<RetryPolicy>
EscalationRuleSchema satisfies z.ZodType<EscalationRule>
EscalationSchema satisfies z.ZodType<EscalationPolicy>

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

/** Edit distance between two short strings (keys), case-insensitive. */
function distance(a: string, b: string): number {
  const x = a.toLowerCase()
  const y = b.toLowerCase()
  let row = Array.from({ length: y.length + 1 }, (_, j) => j)
  for (let i = 1; i <= x.length; i++) {
    const next = [i]
    for (let j = 1; j <= y.length; j++) next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (x[i - 1] === y[j - 1] ? 0 : 1))
    row = next
  }
  return row[y.length]!
}

/** The known key an unknown one was probably meant to be (a typo, another case), or undefined. */
export function closestKey(key: string, known: readonly string[]): string | undefined {
  if (key.length > 64) return undefined
  let best: string | undefined
  let bestDistance = Infinity
  for (const candidate of known) {
    const d = distance(key, candidate)
    if (d < bestDistance) [best, bestDistance] = [candidate, d]
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined
}

/** The keys an object schema at `at` inside `schema` has (through optional, nullable, arrays and records); [] if none. */
export function knownKeys(schema: z.ZodType, at: ReadonlyArray<PropertyKey>): string[] {
  type Node = { shape?: Record<string, unknown>; element?: unknown; unwrap?: () => unknown; def?: { type?: string; valueType?: unknown; innerType?: unknown } }
  const unwrap = (node: Node | undefined): Node | undefined => {
    for (let i = 0; i < 8 && node && !node.shape && !node.element && node.def?.type !== 'record'; i++) {
      node = (node.def?.innerType ?? (typeof node.unwrap === 'function' ? node.unwrap() : undefined)) as Node | undefined
    }
    return node
  }
  let node = unwrap(schema as unknown as Node)
  for (const key of at) {
    if (!node) return []
    if (node.element !== undefined && typeof key === 'number') node = node.element as Node
    else if (node.shape && typeof key === 'string' && Object.hasOwn(node.shape, key)) node = node.shape[key] as Node
    else if (node.def?.type === 'record') node = node.def.valueType as Node
    else return []
    node = unwrap(node)
  }
  return node?.shape ? Object.keys(node.shape) : []
}
