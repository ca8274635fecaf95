/**
 * The shape of spindle's configuration. This schema is the single source of truth: the type is
 * inferred from it and every YAML layer is validated against it.
 */
import { createRequire } from 'node:module'
import { RegExpParser, visitRegExpAST } from '@eslint-community/regexpp'
import type { analyse as Analyse } from 'scslre'
import { z } from 'zod'
import type { ApprovalPolicy, EscalationPolicy, EscalationRule, Limits, RetryPolicy } from '../machines/threadPolicy.js'
import { HookSpecSchema } from './hookSchema.js'

const limit = z.number().nonnegative().nullable()

/** Limits a thread gets when its directive and its spawn call set none; the machine's `Limits`. */
export const LimitsSchema = z.strictObject({
  turns: limit.describe('Most model turns (replies) the thread may take. `null`: unlimited.'),
  tokens: limit.describe('Most input plus output tokens the thread may use over all its model calls. `null`: unlimited.'),
  spend: limit.describe('Most the thread may spend on model calls, in US dollars (as the model adapter reports cost). `null`: unlimited.'),
  durationMs: limit.describe('Most active running time of the thread, in ms; time spent suspended does not count. `null`: unlimited.'),
  spawns: limit.describe('Most child threads the thread may start; a spawn past it is refused (SPAWN_REFUSED). `null`: unlimited.'),
  depth: limit.describe('Levels of child threads allowed below this one: 0 means it may start no children, and each child gets one level fewer than its parent. `null`: unlimited.'),
})

export const RetrySchema = z.strictObject({
  maxRetries: z.number().int().nonnegative().describe('Retries of a failed model call after its first attempt, for transient, rate-limited and quota failures. 0 turns retrying off, the quota wait included.'),
  baseMs: z.number().positive().describe('Backoff before the first retry of a transient failure, in ms; each further retry waits twice as long as the one before, up to `capMs`.'),
  capMs: z.number().positive().describe('Longest backoff between two retries, in ms (a Retry-After sent by the provider can make a wait longer).'),
  jitter: z.number().min(0).max(1).describe('Share of each backoff drawn at random, so that threads that failed together do not retry together: 0.2 means ±20 %.'),
  rateLimitDefaultMs: z.number().nonnegative().describe('Wait before retrying a rate-limited call (HTTP 429) whose response has no Retry-After, in ms.'),
  quotaWaitMs: z.number().nonnegative().describe("Wait before the single retry of a call refused for exhausted quota, in ms (longer if the provider's Retry-After says so); a second quota failure suspends the thread."),
})

export const TimeoutsSchema = z.strictObject({
  modelMs: z.number().positive().describe('A model call still running after this many ms is abandoned and counts as a transient failure, retried under `retry`.'),
  toolMs: z.number().positive().describe('Time a tool call may take, in ms, for tools that set no timeout of their own; a call that takes longer is stopped and the model gets a TOOL_TIMEOUT error result.'),
  shutdownGraceMs: z
    .number()
    .nonnegative()
    .describe(
      'When the runtime closes (`rt.close()`, or a signal of `shutdownSignals`), how long tool calls already running may take to finish, in ms: their results are recorded as usual. Nothing new starts meanwhile; what is still running after it is aborted, and the model is told on the next run that the process shut down. Keep it below the time your process manager waits before it kills (10 s for `docker stop`); 0 aborts at once.',
    ),
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
  // Refused: patterns that can backtrack catastrophically (see regexHazard).
  match: z
    .string()
    .min(1)
    .refine(compiles, { message: 'is not a valid regular expression' })
    .superRefine((source, ctx) => {
      const hazard = compiles(source) ? regexHazard(source) : null
      if (hazard) ctx.addIssue({ code: 'custom', message: `${hazard}` })
    })
    .describe("A JavaScript regular expression, matched case-insensitively against the failure's message and the messages in the provider's error body. One that can backtrack catastrophically, like `(a+)+` or `a.*b.*c`, is refused: bound gaps, as in `.{0,200}`."),
  category: z
    .enum(ERROR_CATEGORIES)
    .describe('What a matching failure is: `transient`, `rate_limited` and `quota` are retried under `retry`; `context_length` hands the task to a continuation thread; any other category ends the thread in `error`.'),
})

/** How a limit's proposed new value is computed when a thread hits it. */
export const EscalationRuleSchema = z.strictObject({
  policy: z.enum(['double', 'add', 'ceiling', 'deny_only']).describe(
    'How the proposed limit is computed: `double` the limit, `add` `amount` to it, jump to `ceiling`, or `deny_only` (propose nothing: whoever approves names the new limit).',
  ),
  amount: z.number().positive().optional().describe('For `add`: how much to add to the limit. Not set: the limit itself (so it doubles).'),
  ceiling: z.number().positive().optional().describe('For `ceiling`: the limit to propose. For `double` and `add`: a value never proposed past; once the limit is there, nothing is proposed.'),
})

const escalationRule = (limit: string) => EscalationRuleSchema.describe(`What a thread that reaches its \`${limit}\` limit proposes.`)

export const EscalationSchema = z.strictObject({
  turns: escalationRule('turns'),
  tokens: escalationRule('tokens'),
  spend: escalationRule('spend'),
  durationMs: escalationRule('durationMs'),
  requestTimeoutSeconds: z.number().int().positive().describe('How long an approval request says it stays open, in seconds, for whoever answers it; spindle does not act on its own when that time has passed.'),
})

export const OrphansSchema = z.strictObject({
  thresholdMs: z.number().int().positive().describe('How long a lease lasts, in ms: a thread whose runtime has not renewed its lease for this long is an orphan. Lower it to take over sooner after a crash; keep it well above `heartbeatMs`.'),
  autoTakeover: z.boolean().describe('Whether a runtime takes over, and runs, the orphans it finds on its data directory. `false`: they are carried on only when a runtime opens the directory, or by `spindle orphans recover`.'),
  heartbeatMs: z.number().int().positive().nullable().describe('How often a runtime renews its leases and looks for orphans, in ms. `null`: a third of `thresholdMs`.'),
})

export const RequestsSchema = z.strictObject({
  pollMs: z.number().int().positive().describe('How often a runtime looks for cancel, approval-response and resume files of its threads, in ms: the delay before it acts on `spindle cancel`, `approve`, `deny` or `resume`.'),
  sweepEvery: z.number().int().positive().describe('Every this many polls, every thread directory is swept, and stray or forged request files are set aside and reported.'),
  scanPerPoll: z.number().int().positive().describe("Thread directories a poll looks in, in turn, besides those spindle's own writers announce, to find files written by hand: such a file is seen within ceil(threads / scanPerPoll) polls."),
})

export const EventsSchema = z.strictObject({
  pollMs: z.number().int().positive().describe("How often `rt.events()` and `rt.on('thread.…')` look for events other processes wrote to the data directory, in ms: the most a change made elsewhere (the CLI, another runtime) takes to reach a listener. This process's own changes are told as soon as they are committed."),
  retentionDays: z.number().positive().describe('Events older than this many days are pruned (when a runtime opens, then every ten minutes). A reader resuming from a pruned cursor starts with the oldest event kept.'),
  maxEvents: z.number().int().positive().describe('At most about this many events are kept: the oldest beyond it are pruned, whatever their age.'),
})

export const ContextSchema = z.strictObject({
  pressureRatio: z.number().gt(0).max(1).describe("Share of the model's context window that a call's prompt tokens may reach before `context_window_pressure` fires (0.9: at 90 %). Only for model adapters that declare their window."),
  onPressure: z.enum(['continue_thread', 'ignore']).describe('What to do under pressure when no hook decides: `continue_thread` hands the task to a new thread whose history is rebuilt from the transcript (the old one ends `continued`); `ignore` carries on.'),
  resumeCeilingTokens: z.number().int().positive().nullable().describe("Most tokens (estimated at about 4 characters each) of history a continuation thread starts with. `null`: `resumeCeilingRatio` of the model's context window."),
  resumeCeilingRatio: z.number().gt(0).max(1).describe("Share of the model's context window a continuation's rebuilt history may take when `resumeCeilingTokens` is `null`."),
  defaultContextWindow: z.number().int().positive().describe('The context window, in tokens, assumed for a model adapter that declares none; it only sizes the history of a continuation.'),
})

export const SupervisionSchema = z.strictObject({
  strategy: z.enum(['one_for_one', 'one_for_all', 'rest_for_one']).describe("Which threads of a group (a parent's children; threads spawned by host code form the root group) a crash restarts: `one_for_one` the crashed one, `one_for_all` all of them, `rest_for_one` it and those started after it."),
  restart: z.enum(['permanent', 'transient', 'temporary']).describe("A thread's restart type when its spawn call sets none: `permanent` (restarted after its own crash and with its group), `transient` (after its own crash only), `temporary` (never: a crash ends it in `error`)."),
  maxRestarts: z.number().int().nonnegative().describe('Restart intensity: at most this many restarts within `withinMs`, of the thread under `one_for_one`, of its group otherwise. Past it, what the restart would sweep ends in `error` (SUPERVISION_GAVE_UP).'),
  withinMs: z.number().int().positive().describe('The sliding window, in ms, over which `maxRestarts` is counted.'),
  maxRecoveries: z.number().int().nonnegative().nullable().describe('Recoveries in a row, each after the process running the thread died, that may find it at the same point of its history; the next one suspends it (CRASH_LOOP) instead of running it again. `null`: never.'),
  aloneMs: z.number().int().positive().nullable().describe('How long a thread suspected of crashing its process may run alone, holding every other thread back, without taking a step, in ms; then the others run beside it again. `null`: until it steps or stops.'),
})

export const ChildrenSchema = z.strictObject({
  budgetShare: z.number().gt(0).max(1).describe("Share of its parent's remaining spend and token budget that a child reserves when it names no spend or token limit of its own (0.5: half), so the first of many children never takes it all."),
})

const RecoveryRuleSchema = z.strictObject({
  maxAttempts: z.number().int().nonnegative().describe("Runs of the task per handler (the thread's own first run counts) before the next handler of `chain` takes over."),
  cooldownSeconds: z.number().nonnegative().describe('Seconds before the next attempt starts; a failure that comes while the cooldown runs reuses the last decision and counts no attempt.'),
  chain: z
    .array(z.string().min(1))
    .min(1)
    .refine((chain) => chain[chain.length - 1] === 'human', { message: "must end with 'human'" })
    .describe("Handlers (directive names) that take the task over in turn after the thread's own directive. It must end with `human`: a person, asked through an escalation.request.json file in the thread's directory."),
})

/** Design 003 §6: what happens when a thread ends in `error`. */
export const RecoverySchema = z.strictObject({
  enabled: z.boolean().describe('Turns recovery on. Off: a thread that ends in `error` stays so until someone acts on it.'),
  ...RecoveryRuleSchema.shape,
  byReason: z
    .record(z.string().meta({ title: 'code' }), RecoveryRuleSchema.partial())
    .describe('Overrides of `maxAttempts`, `cooldownSeconds` and `chain` for the failures with one error code (`model_permanent`, `SUPERVISION_GAVE_UP`, `budget_exceeded` …).'),
})

const GovernanceActionSchema = z.enum(['reduced_context', 'manual_handoff', 'stop_run'])

const GovernanceBudgetsSchema = z.strictObject({
  tokens: z.number().int().positive().nullable().describe('Input plus output tokens the thread may use, its continuation chain included. `null`: no such budget.'),
  wallTimeMs: z.number().int().positive().nullable().describe('Active running time the thread may use, in ms. `null`: no such budget.'),
  retries: z.number().int().nonnegative().nullable().describe('Model calls the thread may retry after a failure. `null`: no such budget.'),
  degradePolicy: z
    .array(GovernanceActionSchema)
    .describe('The action the first, second … time a budget of the task is exceeded, the last repeating: `reduced_context` continues in a new thread with half the usual history, `manual_handoff` suspends it for a person, `stop_run` ends it in `error`.'),
  onExceeded: GovernanceActionSchema.describe('The action when `degradePolicy` is empty.'),
})

/** Design 003 §7: per-thread budgets with a degrade policy. */
export const GovernanceSchema = z.strictObject({
  ...GovernanceBudgetsSchema.shape,
  byDirective: z
    .record(z.string().meta({ title: 'directive' }), GovernanceBudgetsSchema.partial())
    .describe('Budgets and actions for the threads of one directive (by name), over the ones above.'),
})

export const WaitsSchema = z.strictObject({
  defaultTimeoutMs: z.number().int().positive().describe('How long a wait (`wait_threads`, `rt.waitThreads`) that sets no timeout lasts, in ms; then the threads still running are reported as pending.'),
  remotePollMs: z.number().int().positive().describe('How often threads run by another process are looked up while waited on, in ms (threads of this process tell their waiters at once).'),
})

export const ApprovalsSchema = z.strictObject({
  tools: z
    .array(z.string().regex(/^[a-zA-Z][a-zA-Z0-9_-]{0,63}$/, 'a tool name: a letter, then letters, digits, "-" and "_"'))
    .describe("Tools whose every call waits for a person's approval before it runs, besides those that declare `needsApproval`. Layers add to the list: a directive cannot drop a tool the project names."),
  timeoutSeconds: z
    .number()
    .int()
    .positive()
    .nullable()
    .describe('How long a tool approval request waits for a decision, in seconds, before `onTimeout` applies. `null`: it waits until someone decides.'),
  onTimeout: z
    .enum(['deny', 'stay'])
    .describe('What a tool approval request that has waited `timeoutSeconds` becomes: `deny` (the model gets a denial as the call\'s result and the thread goes on) or `stay` (it goes on waiting, and says it is overdue).'),
})

export const OutputSchema = z.strictObject({
  maxTries: z
    .number()
    .int()
    .positive()
    .describe("Answers a thread whose directive has an output schema may give in all: one that does not parse or match the schema is sent back to the model with the errors while tries are left; then the thread ends in `error` (OUTPUT_INVALID). Each answer is a turn."),
})

export const ConfigSchema = z.strictObject({
  limits: LimitsSchema.describe(
    "Limits a thread gets when neither its directive nor its spawn call sets them. Before each model call, a thread that has reached its turns, tokens, spend or durationMs limit suspends and asks for more (see `escalation`); a child's limits are also capped by its parent's.",
  ),
  retry: RetrySchema.describe(
    'How failed model calls are retried: with exponential backoff and jitter, up to a cap. When the retries are used up the thread suspends (`spindle resume` carries it on); a permanent failure is not retried and ends the thread in `error`.',
  ),
  timeouts: TimeoutsSchema.describe('How long a model call and a tool call may take, and how long a closing runtime waits for the tool calls under way.'),
  errors: z
    .strictObject({
      patterns: z
        .array(ErrorPatternSchema)
        .describe("Message patterns, tried in order; the first that matches gives its category. A layer's patterns are tried before those of the layers under it."),
    })
    .describe("How a failed model call is classified when neither its HTTP status nor the provider's error code decides, and what narrows a rate limit or a refused request (4xx) to `quota` or `context_length`, which waiting does not fix. A failure nothing classifies is permanent."),
  approvals: ApprovalsSchema.describe(
    "Tool calls that need a person's approval before they run: the thread suspends (`tool_approval`) at such a call until someone approves it (possibly with edited input) or denies it, through `rt.approve`/`rt.deny`, `spindle approve`/`deny`, a response file or the inspector. A `tool_approval` hook can decide instead.",
  ),
  escalation: EscalationSchema.describe(
    'What a thread that reaches one of its limits proposes to the person asked to approve more (`spindle approve` takes the proposal unless told otherwise).',
  ),
  orphans: OrphansSchema.describe(
    'Threads whose process died. Every runtime holds a lease on each thread it runs and renews it; a thread whose lease has run out is an orphan, which a runtime on the same data directory can take over.',
  ),
  requests: RequestsSchema.describe(
    'How a runtime notices the request files (cancel, approval response, resume) that the CLI and other processes write into the data directory.',
  ),
  events: EventsSchema.describe(
    "The thread event stream (`rt.events()`, `rt.on('thread.…')`, docs/events.md): every lifecycle change of every thread of the data directory, kept in the registry, told by whichever process made it.",
  ),
  context: ContextSchema.describe(
    "What happens as a thread's prompt fills the model's context window, and how much history a continuation thread starts with.",
  ),
  supervision: SupervisionSchema.describe(
    'How crashed threads are restarted, as Erlang/OTP supervisors do. A crash is an unexpected exception in the runtime or an adapter, not a classified model failure; a restarted thread goes on from its last checkpoint.',
  ),
  children: ChildrenSchema.describe("How child threads share their parent's spend and token budget."),
  waits: WaitsSchema.describe('How a thread (the `wait_threads` tool) or host code (`rt.waitThreads`) waits for other threads.'),
  output: OutputSchema.describe("How the final answer of a thread whose directive has an output schema (structured results) is checked."),
  recovery: RecoverySchema.describe(
    'What happens to a task when its thread ends in `error` (off by default): its own directive tries again up to `maxAttempts` times, then each handler of `chain` in turn, and finally a person.',
  ),
  governance: GovernanceSchema.describe(
    'Per-thread budgets besides the limits, each off while `null`. Before each model call, a thread over one of them gets the next action of `degradePolicy`.',
  ),
  hooks: z
    .array(HookSpecSchema)
    .describe(
      "Policy as data: at an event, the first hook whose `when` holds decides what happens; when none does, the default behaviour applies. Hooks add up across layers: the user file's are asked first, then the directive's, the built-in ones, the project's.",
    ),
})

export type Config = z.infer<typeof ConfigSchema>
export type ApprovalsConfig = z.infer<typeof ApprovalsSchema>
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
ApprovalsSchema satisfies z.ZodType<ApprovalPolicy>

/**
 * What one layer (a file, a directive, a spawn) may set: any subset of the full shape. Error
 * patterns of a layer are tried before those of the layers under it.
 */
export const ConfigLayerSchema = z.strictObject({
  limits: LimitsSchema.partial().optional(),
  retry: RetrySchema.partial().optional(),
  timeouts: TimeoutsSchema.partial().optional(),
  errors: z.strictObject({ patterns: z.array(ErrorPatternSchema) }).optional(),
  approvals: ApprovalsSchema.partial().optional(),
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
  events: EventsSchema.partial().optional(),
  context: ContextSchema.partial().optional(),
  supervision: SupervisionSchema.partial().optional(),
  children: ChildrenSchema.partial().optional(),
  waits: WaitsSchema.partial().optional(),
  output: OutputSchema.partial().optional(),
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
