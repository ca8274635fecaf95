/**
 * Policy hooks: at an event (a model error, a limit hit, a finished step …) the first hook whose
 * `when` holds decides what happens; when none does, the default behaviour applies.
 *
 * Conditions are CEL (Common Expression Language), evaluated by @marcbachmann/cel-js: no I/O, no
 * loops, no user code. The only code that runs is a handler passed in code on purpose. Every
 * expression is parsed and type-checked against the declared variables when the hooks are
 * compiled, so a typo fails at start-up, not at 3 a.m. on the first rate limit. Also refused
 * then, because one such condition would stall the whole process at every event (checkSyntax):
 * more than MAX_WHEN_LENGTH characters or MAX_WHEN_DEPTH levels of nesting, a loop macro inside
 * another, and `matches` with a pattern that is not a string literal or can backtrack
 * exponentially. A condition that fails to evaluate (a null compared, a division by zero) does
 * not match and is reported through onError with the hook's id and source.
 *
 * Numbers. CEL keeps `int` and `double` apart, JavaScript does not. Every field below has a
 * declared CEL type, and values are converted to it before evaluation: counts (turns, tokens,
 * status …) are ints, money and ratios are doubles. Comparisons (`<`, `>=` …) between an int and
 * a double are CEL's own; `==` and `!=` between them are registered here, so `thread.cost.spend
 * == 2` and `error.status == 429.0` work too. Arithmetic keeps CEL's rule that both sides have
 * the same type: write `thread.cost.spend * 2.0`, not `* 2` (caught when the hooks compile).
 * A limit that is unlimited is null: `thread.limits.spend == null`.
 */
import { createRequire } from 'node:module'
import type { Environment, ObjectSchema } from '@marcbachmann/cel-js'
import { z } from 'zod'
import { HOOK_ACTIONS, HOOK_EVENTS, HookActionSchema, HookLimitsSchema, HookSpecSchema } from '../../config/hookSchema.js'
import { regexCompileError, regexHazard } from '../../config/schema.js'
import type { HookAction, HookEvent, HookSpec } from '../../config/hookSchema.js'
import type { Limits } from '../../machines/threadPolicy.js'
import type { SpindleErrorCode } from '../base/errors.js'
import { SpindleError, describeError } from '../base/errors.js'

export type { HookAction, HookEvent, HookSpec }
export { HOOK_ACTIONS, HOOK_EVENTS }

/** Precedence: the layer of lowest rank is asked first. */
export const HOOK_LAYERS = { user: 0, directive: 1, builtin: 2, project: 3, infra: 4 } as const
export type HookLayer = keyof typeof HOOK_LAYERS

/**
 * The variables a `when` sees, as plain JSON data. Only `thread` and the variable of the event
 * being decided are filled in; the others are empty, so a condition about another event fails to
 * evaluate (reported) and does not match.
 */
export interface HookInput {
  thread: {
    id: string
    /** The directive's name. */
    directive: string
    /** Turns completed so far. */
    turn: number
    /** Attempt number of the current model call within this turn, from 1. */
    attempt: number
    /** Level in the thread tree (0 for a root). */
    depth: number
    state: string
    cost: { turns: number; inputTokens: number; outputTokens: number; tokens: number; spend: number }
    /** null is unlimited. */
    limits: Limits
  }
  /** For `error`. `status` and `code` are null when the failure has none. */
  error?: { category: string; message: string; status?: number | null; code?: string | null; attempt: number; retryInMs: number }
  /** For `limit`. `proposed` is null when the escalation policy proposes nothing. */
  limit?: { name: string; used: number; max: number; proposed: number | null }
  /** For `context_window_pressure`. */
  pressure?: { ratio: number; promptTokens: number; contextWindow: number }
  /** For `after_step`. */
  step?: { turn: number; toolCalls: number }
  /** For `after_complete`. */
  outcome?: { status: string; result: string | null }
}

/** What a handler returns: an action, or an action with a message and (for a limit) new limits. */
export type HookResult = HookAction | { action: HookAction; message?: string; limits?: Partial<Limits> }

/** A hook given in code: its `when`, if any, is checked first, then its handler decides. */
export interface CodeHook {
  id: string
  event: HookEvent
  when?: string
  handler: (input: HookInput) => HookResult | Promise<HookResult>
}

export interface HookDecision {
  action: HookAction
  /** Absent when no hook matched: the default behaviour applies. */
  hookId?: string
  layer?: HookLayer
  source?: string
  message?: string
  limits?: Partial<Limits>
}

/** A hook that could not be evaluated or whose handler failed; the hook is skipped or continues. */
export interface HookProblem {
  hookId: string
  source: string
  event: HookEvent
  message: string
}

export interface HookSet {
  layer: HookLayer
  /** A file path or a description such as 'createRuntime options'; named in every error. */
  source: string
  hooks: ReadonlyArray<HookSpec | CodeHook>
}

export interface CompileHooksOptions {
  /** Told about every condition that fails to evaluate and every handler that throws. */
  onError?: (problem: HookProblem) => void
}

/** Hooks compiled once, evaluated at every event they listen to. */
export interface CompiledHooks {
  /** Whether any hook listens to `event` (callers skip building inputs otherwise). */
  has(event: HookEvent): boolean
  /**
   * The decision of the first hook for `event` (by layer rank, then declaration order) whose
   * condition holds; `{ action: 'continue' }` without a hookId when none does. Never rejects.
   */
  decide(event: HookEvent, input: HookInput): Promise<HookDecision>
  /** These hooks plus more sets (a thread's directive hooks over the runtime's); throws as compileHooks does. */
  with(sets: readonly HookSet[]): CompiledHooks
  /** How many hooks there are, over every event. */
  readonly size: number
}

// ── the CEL variables ─────────────────────────────────────────────────────────────────────────

/** A field's type: `?` marks one that may be null; `json` is any JSON value. */
type Kind = 'int' | 'double' | 'string' | 'int?' | 'double?' | 'string?' | 'json'
interface Shape {
  readonly [field: string]: Kind | Shape
}

/** Every variable and field a `when` may use, with its CEL type. Mirrors HookInput. */
export const HOOK_VARIABLES = {
  thread: {
    id: 'string',
    directive: 'string',
    turn: 'int',
    attempt: 'int',
    depth: 'int',
    state: 'string',
    cost: { turns: 'int', inputTokens: 'int', outputTokens: 'int', tokens: 'int', spend: 'double' },
    limits: { turns: 'int?', tokens: 'int?', spend: 'double?', durationMs: 'int?', spawns: 'int?', depth: 'int?' },
  },
  error: { category: 'string', message: 'string', status: 'int?', code: 'string?', attempt: 'int', retryInMs: 'int' },
  limit: { name: 'string', used: 'double', max: 'double', proposed: 'double?' },
  pressure: { ratio: 'double', promptTokens: 'int', contextWindow: 'int' },
  step: { turn: 'int', toolCalls: 'int' },
  outcome: { status: 'string', result: 'json' },
} as const satisfies Record<string, Shape>

type VariableName = keyof typeof HOOK_VARIABLES
const VARIABLE_NAMES = Object.keys(HOOK_VARIABLES) as VariableName[]

/** CEL schema of a shape; a nullable field is `dyn` (it holds a value of its type or null). */
function celSchema(shape: Shape): ObjectSchema {
  const schema: ObjectSchema = {}
  for (const [field, kind] of Object.entries(shape)) {
    schema[field] = typeof kind === 'object' ? celSchema(kind) : kind === 'int' || kind === 'double' || kind === 'string' ? kind : 'dyn'
  }
  return schema
}

/** Integers compare equal to doubles of the same value (CEL's checker refuses `int == double` otherwise). */
function intEqualsDouble(int: bigint, double: number): boolean {
  return Number.isInteger(double) && BigInt(double) === int
}

// Creating an environment is the expensive part: once per process, and only in a process that
// compiles a condition (cel-js and its environment cost ~40 ms and several MB; most runtimes have
// no `when`). Parsing against it is cheap. require: compileHooks is synchronous.
let celEnvironment: Environment | null = null
function environment(): Environment {
  celEnvironment ??= newEnvironment()
  return celEnvironment
}

function newEnvironment(): Environment {
  const { Environment } = createRequire(import.meta.url)('@marcbachmann/cel-js') as typeof import('@marcbachmann/cel-js')
  const env = new Environment()
  for (const name of VARIABLE_NAMES) {
    env.registerVariable({ name, schema: celSchema(HOOK_VARIABLES[name]) })
  }
  // Also registers `double == int` and both `!=`.
  env.registerOperator('int == double', (left: bigint, right: number) => intEqualsDouble(left, right))
  return env
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** A JSON value with integral numbers as CEL ints. */
function celJson(value: unknown, depth = 0): unknown {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt(value) : value
  if (depth > 32 || typeof value !== 'object' || value === null) return value
  if (Array.isArray(value)) return value.map((item) => celJson(item, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [key, item] of Object.entries(value)) {
    // defineProperty: a key "__proto__" (JSON.parse makes it an own key) stays a key, not a prototype.
    if (item !== undefined) Object.defineProperty(out, key, { value: celJson(item, depth + 1), enumerable: true, writable: true, configurable: true })
  }
  return out
}

/**
 * A field converted to its declared CEL type. undefined: leave the field out (it is missing).
 * A value of the wrong type is passed as it is, so that CEL names the mismatch when it is used.
 */
function celField(value: unknown, kind: Kind): unknown {
  if (value === undefined || value === null) return kind.endsWith('?') || kind === 'json' ? null : undefined
  switch (kind) {
    case 'int':
    case 'int?':
      return typeof value === 'number' && Number.isFinite(value) ? BigInt(Math.round(value)) : value
    case 'double':
    case 'double?':
      return typeof value === 'bigint' ? Number(value) : value
    case 'json':
      return celJson(value)
    default:
      return value
  }
}

function celObject(value: unknown, shape: Shape): Record<string, unknown> {
  const source = isRecord(value) ? value : {}
  const out: Record<string, unknown> = {}
  for (const [field, kind] of Object.entries(shape)) {
    const converted = typeof kind === 'object' ? celObject(source[field], kind) : celField(source[field], kind)
    if (converted !== undefined) out[field] = converted
  }
  return out
}

/** The CEL context for an input: every variable present, those the input lacks empty. */
function celContext(input: HookInput): Record<string, unknown> {
  const raw: Record<string, unknown> = isRecord(input) ? input : {}
  const context: Record<string, unknown> = {}
  for (const name of VARIABLE_NAMES) context[name] = isRecord(raw[name]) ? celObject(raw[name], HOOK_VARIABLES[name]) : {}
  return context
}

// ── compiling ─────────────────────────────────────────────────────────────────────────────────

type Condition = (context: Record<string, unknown>) => unknown

interface Compiled {
  id: string
  event: HookEvent
  layer: HookLayer
  source: string
  /** Declaration order over every set, for a stable sort within a layer. */
  order: number
  condition: Condition | null
  expression: string | null
  decide: (input: HookInput) => HookResult | Promise<HookResult>
}

interface CelErrorLike {
  summary?: unknown
  message?: unknown
  code?: unknown
  range?: { start?: unknown; end?: unknown }
}

/** "line 2, column 5" or "column 5", from a 0-based offset into the expression. */
function position(expression: string, offset: number): string {
  const before = expression.slice(0, offset)
  const lineStart = before.lastIndexOf('\n') + 1
  const column = offset - lineStart + 1
  return expression.includes('\n') ? `line ${before.split('\n').length}, column ${column}` : `column ${column}`
}

/** The library's error as one line, with its position, and its source excerpt (a caret under the spot). */
function describeCelError(error: unknown, expression: string): { text: string; excerpt: string; start?: number; end?: number; celCode?: string } {
  const e = (typeof error === 'object' && error !== null ? error : {}) as CelErrorLike
  const message = typeof e.message === 'string' ? e.message : describeError(error).message
  const summary = typeof e.summary === 'string' ? e.summary : (message.split('\n')[0] ?? message)
  const start = typeof e.range?.start === 'number' ? e.range.start : undefined
  const end = typeof e.range?.end === 'number' ? e.range.end : undefined
  const excerpt = message.includes('\n') ? message.slice(message.indexOf('\n')).replace(/^\n+/, '') : ''
  return {
    text: start !== undefined ? `${summary} (at ${position(expression, start)})` : summary,
    excerpt,
    ...(start !== undefined ? { start } : {}),
    ...(end !== undefined ? { end } : {}),
    ...(typeof e.code === 'string' ? { celCode: e.code } : {}),
  }
}

/** For an unknown variable or field: what there is instead. */
function hint(celCode: string | undefined, expression: string, start: number | undefined): string {
  if (celCode === 'unknown_variable') return ` Known variables: ${VARIABLE_NAMES.join(', ')}.`
  if (celCode === 'no_such_key' && start !== undefined) {
    // The dotted path right before the key, e.g. "thread.cost." before "spnd".
    const path = /([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\.\s*$/.exec(expression.slice(0, start))?.[1]
    let shape: Kind | Shape | undefined = HOOK_VARIABLES
    for (const part of path?.split('.') ?? []) shape = typeof shape === 'object' ? shape[part.trim()] : undefined
    if (path && typeof shape === 'object') return ` ${path.replace(/\s+/g, '')} has: ${Object.keys(shape).join(', ')}.`
  }
  return ''
}

class HookCompileError extends Error {
  constructor(
    readonly what: string,
    readonly extra: Record<string, unknown> = {},
    /** Set when what is wrong is the `when` expression. */
    readonly expression?: string,
  ) {
    super(what)
  }
}

/** Longest `when` accepted: a condition is a line or two; a longer one is a mistake or an attack. */
export const MAX_WHEN_LENGTH = 4096
/** Deepest nesting of a `when` (operators inside operators); deeper could overflow the stack. */
export const MAX_WHEN_DEPTH = 64

/** Macros that loop over a list or map. */
const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'map', 'filter'])

/** The expression as the library shows it in errors, shortened. */
function excerptOf(node: { start?: unknown; end?: unknown }, expression: string): string {
  const start = typeof node.start === 'number' ? node.start : 0
  const end = typeof node.end === 'number' ? node.end : start
  const text = expression.slice(start, end)
  return text.length > 60 ? `${text.slice(0, 57)}...` : text
}

/**
 * What a condition may not do although CEL allows it, checked on its syntax tree (iteratively:
 * the tree may be deep). Each would let one hook stall the whole process at every event:
 * - nesting deeper than MAX_WHEN_DEPTH;
 * - a loop macro (all, exists, map …) inside another: 1000 × 1000 × 1000 steps is minutes;
 * - `matches` with a pattern that is not a string literal (it could not be checked here), or
 *   one that can backtrack exponentially (`(a+)+`) on an error message a provider sent.
 */
function checkSyntax(ast: unknown, expression: string): void {
  type Node = { op?: unknown; args?: unknown; start?: unknown; end?: unknown }
  const stack: Array<{ node: unknown; depth: number; loops: number }> = [{ node: ast, depth: 0, loops: 0 }]
  while (stack.length > 0) {
    const { node, depth, loops } = stack.pop()!
    if (Array.isArray(node)) {
      for (const child of node) stack.push({ node: child, depth, loops })
      continue
    }
    if (typeof node !== 'object' || node === null || typeof (node as Node).op !== 'string') continue
    const { op, args } = node as Node
    const at = typeof (node as Node).start === 'number' ? ` (at ${position(expression, (node as Node).start as number)})` : ''
    if (depth > MAX_WHEN_DEPTH) {
      throw new HookCompileError(`is nested more than ${MAX_WHEN_DEPTH} levels deep${at}: write a flatter condition.`, {}, expression)
    }
    let childLoops = loops
    if ((op === 'rcall' || op === 'call') && Array.isArray(args)) {
      const name = args[0]
      const callArgs = (op === 'rcall' ? args[2] : args[1]) as unknown
      if (typeof name === 'string' && COMPREHENSIONS.has(name) && op === 'rcall') {
        if (loops > 0) {
          throw new HookCompileError(
            `has a ${name}() inside another loop macro${at} (\`${excerptOf(node as Node, expression)}\`): nested loops can take minutes at every event; use one.`,
            {},
            expression,
          )
        }
        childLoops = loops + 1
      }
      if (name === 'matches' && Array.isArray(callArgs)) {
        const pattern = (op === 'rcall' ? callArgs[0] : callArgs[1]) as Node | undefined
        if (!pattern || pattern.op !== 'value' || typeof pattern.args !== 'string') {
          throw new HookCompileError(`calls matches()${at} with a pattern that is not a string literal: write the regular expression in quotes, so that it is checked when the hooks load.`, {}, expression)
        }
        const hazard = compilesAsRegex(pattern.args) ?? regexHazard(pattern.args)
        if (hazard) throw new HookCompileError(`calls matches()${at} with the pattern ${JSON.stringify(pattern.args)}, which ${hazard}.`, {}, expression)
      }
    }
    stack.push({ node: args, depth: depth + 1, loops: childLoops })
  }
}

function compilesAsRegex(source: string): string | null {
  const error = regexCompileError(source)
  return error === null ? null : `is not a valid regular expression (${error})`
}

function compileCondition(expression: string): Condition {
  if (expression.length > MAX_WHEN_LENGTH) {
    throw new HookCompileError(`is ${expression.length} characters long; a condition may have at most ${MAX_WHEN_LENGTH}.`, {}, `${expression.slice(0, 60)}...`)
  }
  let parsed: ReturnType<Environment['parse']>
  try {
    parsed = environment().parse(expression)
  } catch (error) {
    if (error instanceof RangeError) throw new HookCompileError(`is nested too deeply to parse: write a flatter condition.`, {}, expression)
    const d = describeCelError(error, expression)
    throw new HookCompileError(`is not valid CEL: ${d.text}.${d.excerpt ? `\n${d.excerpt}` : ''}`, { start: d.start, end: d.end }, expression)
  }
  checkSyntax(parsed.ast, expression)
  const checked = parsed.check()
  if (!checked.valid) {
    const d = describeCelError(checked.error, expression)
    throw new HookCompileError(
      `cannot be evaluated: ${d.text}.${hint(d.celCode, expression, d.start)}${d.excerpt ? `\n${d.excerpt}` : ''}`,
      { start: d.start, end: d.end },
      expression,
    )
  }
  if (checked.type !== 'bool' && checked.type !== 'dyn') {
    throw new HookCompileError(`gives ${checked.type ?? 'an unknown type'}, not a bool: a condition must be true or false.`, {}, expression)
  }
  return (context) => parsed(context)
}

const CODE_HOOK_KEYS = new Set(['id', 'event', 'when', 'handler'])

function isCodeHook(hook: unknown): boolean {
  return isRecord(hook) && 'handler' in hook
}

/** One hook, checked and compiled; throws HookCompileError naming what is wrong. */
function compileOne(hook: unknown, set: HookSet, order: number): Compiled {
  let event: HookEvent
  let when: string | undefined
  let decide: Compiled['decide']
  const id = isRecord(hook) && typeof hook.id === 'string' && hook.id.trim() !== '' ? hook.id : undefined
  if (isCodeHook(hook)) {
    const code = hook as Record<string, unknown>
    if (id === undefined) throw new HookCompileError('id must be a non-empty string')
    if (typeof code.handler !== 'function') throw new HookCompileError(`handler must be a function (got ${typeof code.handler})`)
    if (!HOOK_EVENTS.includes(code.event as HookEvent)) {
      throw new HookCompileError(`event must be one of ${HOOK_EVENTS.join(', ')} (got ${JSON.stringify(code.event) ?? 'nothing'})`)
    }
    if (code.when !== undefined && (typeof code.when !== 'string' || code.when.trim() === '')) {
      throw new HookCompileError('when must be a non-empty CEL expression string')
    }
    const unknown = Object.keys(code).filter((key) => !CODE_HOOK_KEYS.has(key))
    if (unknown.length) {
      throw new HookCompileError(
        `a hook with a handler has only ${[...CODE_HOOK_KEYS].join(', ')} (got ${unknown.join(', ')}); its handler returns the action, message and limits`,
      )
    }
    event = code.event as HookEvent
    when = code.when as string | undefined
    decide = code.handler as CodeHook['handler']
  } else {
    const parsed = HookSpecSchema.safeParse(hook)
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!
      const at = issue.path.length ? `${issue.path.join('.')}: ` : ''
      const message = issue.message.includes('Unrecognized key') ? `${issue.message} (a hook has id, event, when, action, message, limits)` : issue.message
      throw new HookCompileError(`${at}${message}`, { path: issue.path.join('.') })
    }
    const spec = parsed.data
    event = spec.event
    when = spec.when
    const result: HookResult = {
      action: spec.action,
      ...(spec.message !== undefined ? { message: spec.message } : {}),
      ...(spec.limits !== undefined ? { limits: spec.limits } : {}),
    }
    decide = () => result
  }
  return {
    id: id!,
    event,
    layer: set.layer,
    source: set.source,
    order,
    condition: when === undefined ? null : compileCondition(when),
    expression: when ?? null,
    decide,
  }
}

function setError(set: unknown, what: string): SpindleError {
  const source = isRecord(set) && typeof set.source === 'string' ? set.source : '(hooks)'
  return new SpindleError('INVALID_OPTIONS', `${source}: ${what}`, { details: { source } })
}

/** Compiles sets after `start` (the count of hooks already compiled); throws a SpindleError. */
function compileSets(sets: readonly HookSet[], start: number, ids: Map<string, Set<string>>): Compiled[] {
  if (!Array.isArray(sets)) throw new SpindleError('INVALID_OPTIONS', `Hook sets must be an array of { layer, source, hooks } (got ${typeof sets}).`)
  const compiled: Compiled[] = []
  let order = start
  for (const set of sets) {
    const raw: unknown = set
    if (!isRecord(raw) || typeof raw.source !== 'string' || raw.source === '') {
      throw setError(raw, 'a hook set needs a source (a file path or a description such as "createRuntime options").')
    }
    if (typeof set.layer !== 'string' || !Object.hasOwn(HOOK_LAYERS, set.layer)) {
      throw setError(set, `unknown hook layer ${JSON.stringify(set.layer)} (one of ${Object.keys(HOOK_LAYERS).join(', ')}).`)
    }
    if (!Array.isArray(set.hooks)) throw setError(set, `hooks must be a list (got ${typeof set.hooks}).`)
    const seen = ids.get(set.source) ?? new Set<string>()
    ids.set(set.source, seen)
    set.hooks.forEach((hook: unknown, index: number) => {
      const code: SpindleErrorCode = isCodeHook(hook) ? 'INVALID_OPTIONS' : 'CONFIG_INVALID'
      const rawId = isRecord(hook) && typeof hook.id === 'string' && hook.id.trim() !== '' ? hook.id : undefined
      const label = rawId !== undefined ? `hook "${rawId}"` : `hook #${index + 1}`
      let one: Compiled
      try {
        one = compileOne(hook, set, order++)
      } catch (error) {
        if (!(error instanceof HookCompileError)) throw error
        const subject = error.expression !== undefined ? `when \`${error.expression}\` ` : ''
        throw new SpindleError(code, `${set.source}: ${label}: ${subject}${error.what}`, {
          details: {
            source: set.source,
            layer: set.layer,
            hookId: rawId ?? null,
            index,
            ...(error.expression !== undefined ? { expression: error.expression } : {}),
            ...error.extra,
          },
        })
      }
      if (seen.has(one.id)) {
        throw new SpindleError(code, `${set.source}: ${label}: another hook in this source has the same id; ids must be unique within a source.`, {
          details: { source: set.source, layer: set.layer, hookId: one.id, index },
        })
      }
      seen.add(one.id)
      compiled.push(one)
    })
  }
  return compiled
}

// ── deciding ──────────────────────────────────────────────────────────────────────────────────

const ResultSchema = z.union([
  HookActionSchema,
  z.strictObject({ action: HookActionSchema, message: z.string().optional(), limits: HookLimitsSchema.optional() }),
])

function show(value: unknown): string {
  if (typeof value === 'bigint') return `int ${value}`
  if (typeof value === 'number') return `double ${value}`
  if (typeof value === 'string') return `string ${JSON.stringify(value)}`
  if (value === null) return 'null'
  if (value instanceof Map || isRecord(value)) return 'a map'
  if (Array.isArray(value)) return 'a list'
  return typeof value
}

function preview(value: unknown): string {
  try {
    return JSON.stringify(value)?.slice(0, 120) ?? String(value)
  } catch {
    return String(value)
  }
}

class HookTable implements CompiledHooks {
  private readonly byEvent = new Map<HookEvent, Compiled[]>()

  constructor(
    private readonly all: readonly Compiled[],
    private readonly ids: ReadonlyMap<string, ReadonlySet<string>>,
    private readonly onError: (problem: HookProblem) => void,
  ) {
    const sorted = [...all].sort((a, b) => HOOK_LAYERS[a.layer] - HOOK_LAYERS[b.layer] || a.order - b.order)
    for (const hook of sorted) {
      const list = this.byEvent.get(hook.event) ?? []
      list.push(hook)
      this.byEvent.set(hook.event, list)
    }
  }

  get size(): number {
    return this.all.length
  }

  has(event: HookEvent): boolean {
    return (this.byEvent.get(event)?.length ?? 0) > 0
  }

  with(sets: readonly HookSet[]): CompiledHooks {
    const ids = new Map([...this.ids].map(([source, seen]) => [source, new Set(seen)]))
    const added = compileSets(sets, this.all.length, ids)
    return added.length ? new HookTable([...this.all, ...added], ids, this.onError) : this
  }

  async decide(event: HookEvent, input: HookInput): Promise<HookDecision> {
    const hooks = this.byEvent.get(event)
    if (!hooks) return { action: 'continue' }
    let context: Record<string, unknown> | undefined
    for (const hook of hooks) {
      if (hook.condition) {
        context ??= celContext(input)
        if (!this.holds(hook, context)) continue
      }
      return this.run(hook, input)
    }
    return { action: 'continue' }
  }

  private holds(hook: Compiled, context: Record<string, unknown>): boolean {
    let value: unknown
    try {
      value = hook.condition!(context)
    } catch (error) {
      const d = describeCelError(error, hook.expression!)
      this.report(hook, `when \`${hook.expression}\` could not be evaluated: ${d.text}; the hook does not match.`)
      return false
    }
    if (value === true) return true
    if (value !== false) this.report(hook, `when \`${hook.expression}\` gave ${show(value)}, not true or false; the hook does not match.`)
    return false
  }

  private async run(hook: Compiled, input: HookInput): Promise<HookDecision> {
    const by = { hookId: hook.id, layer: hook.layer, source: hook.source }
    let returned: unknown
    try {
      returned = await hook.decide(input)
    } catch (error) {
      this.report(hook, `handler threw: ${describeError(error).message}; the default applies.`)
      return { action: 'continue', ...by }
    }
    const parsed = ResultSchema.safeParse(returned)
    if (!parsed.success) {
      this.report(
        hook,
        `handler returned ${preview(returned)}, not one of ${HOOK_ACTIONS.join(', ')} or { action, message?, limits? }; the default applies.`,
      )
      return { action: 'continue', ...by }
    }
    const result = parsed.data
    if (typeof result === 'string') return { action: result, ...by }
    return {
      action: result.action,
      ...by,
      ...(result.message !== undefined ? { message: result.message } : {}),
      ...(result.limits !== undefined ? { limits: result.limits } : {}),
    }
  }

  private report(hook: Compiled, message: string): void {
    try {
      this.onError({ hookId: hook.id, source: hook.source, event: hook.event, message })
    } catch {
      // A failing reporter must not turn a policy decision into a crash.
    }
  }
}

/**
 * Compiles hook sets: checks every hook, parses and type-checks every `when`. Throws a
 * SpindleError naming the source, the hook and what is wrong: CONFIG_INVALID for a hook given as
 * data, INVALID_OPTIONS for a hook given in code or a malformed set.
 *
 * @example
 * const hooks = compileHooks([{ layer: 'project', source: 'config.yaml', hooks: [
 *   { id: 'late-429', event: 'error', when: "error.category == 'rate_limited' && thread.turn > 3", action: 'fail' },
 * ] }])
 * await hooks.decide('error', input) // { action: 'fail', hookId: 'late-429', … } at turn 4
 */
export function compileHooks(sets: readonly HookSet[], options: CompileHooksOptions = {}): CompiledHooks {
  const ids = new Map<string, Set<string>>()
  const compiled = compileSets(sets, 0, ids)
  return new HookTable(compiled, ids, options.onError ?? (() => {}))
}
