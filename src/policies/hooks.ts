/**
 * Policy hooks: at an event (a model error, a limit hit, a finished step …) the first hook whose
 * `when` holds decides what happens; when none does, the default behaviour applies.
 *
 * Conditions are CEL, compiled once when the hooks are (hookConditions.ts: a `when` that cannot
 * be parsed, type-checked or run safely fails at start-up), over the variables hookInput.ts
 * declares. A condition that fails to evaluate (a null compared, a division by zero) does not
 * match and is reported through onError with the hook's id and source.
 */
import { z } from 'zod'
import { HOOK_ACTIONS, HOOK_EVENTS, HookActionSchema, actionFits, HookLimitsSchema, HookSpecSchema } from '../../config/hookSchema.js'
import type { HookAction, HookEvent, HookSpec } from '../../config/hookSchema.js'
import type { Limits } from '../../machines/threadPolicy.js'
import type { SpindleErrorCode } from '../base/errors.js'
import { SpindleError, describeError } from '../base/errors.js'
import type { HookInput } from './hookInput.js'
import { celContext, isRecord } from './hookInput.js'
import type { Condition } from './hookConditions.js'
import { compileCondition, describeCelError, HookCompileError } from './hookConditions.js'

export type { HookAction, HookEvent, HookSpec }
export { HOOK_ACTIONS, HOOK_EVENTS }

/** Precedence: the layer of lowest rank is asked first. */
export const HOOK_LAYERS = { user: 0, directive: 1, builtin: 2, project: 3, infra: 4 } as const
export type HookLayer = keyof typeof HOOK_LAYERS

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

// ── compiling ─────────────────────────────────────────────────────────────────────────────────

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
    const action = typeof result === 'string' ? result : result.action
    if (!actionFits(hook.event, action)) {
      this.report(hook, `handler returned ${action}, which a hook on ${hook.event} cannot take; the default applies.`)
      return { action: 'continue', ...by }
    }
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
