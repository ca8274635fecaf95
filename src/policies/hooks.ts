/**
 * Policy hooks: at an event (a model error, a limit hit, a finished step …) the first hook whose
 * `when` holds decides what happens; when none does, the default behaviour applies.
 *
 * Conditions are CEL (Common Expression Language) evaluated by @marcbachmann/cel-js: no I/O, no
 * loops, no code of the user's runs inside spindle except handlers passed in code on purpose.
 * Every expression is parsed and type-checked against the declared variables when the hooks are
 * compiled, so a typo fails at start-up, not at 3 a.m. on the first rate limit.
 */
import { Environment } from '@marcbachmann/cel-js'
import { HOOK_ACTIONS, HOOK_EVENTS, HookSpecSchema } from '../../config/hookSchema.js'
import type { HookAction, HookEvent, HookSpec } from '../../config/hookSchema.js'
import type { Limits } from '../../machines/thread.machine.js'
import { SpindleError, describeError } from '../errors.js'

export type { HookAction, HookEvent, HookSpec }

/** Precedence: lower rank decides first (design 001, step 7). */
export const HOOK_LAYERS = { user: 0, directive: 1, builtin: 2, project: 3, infra: 4 } as const
export type HookLayer = keyof typeof HOOK_LAYERS

/** The variables a `when` sees. Those not about the current event are empty maps. */
export interface HookInput {
  thread: {
    id: string
    directive: string
    /** Turns completed so far. */
    turn: number
    attempt: number
    /** Level in the thread tree (0 for a root). */
    depth: number
    state: string
    cost: { turns: number; inputTokens: number; outputTokens: number; tokens: number; spend: number }
    limits: Limits
  }
  error?: { category: string; message: string; status?: number; code?: string; attempt: number; retryInMs: number }
  limit?: { name: string; used: number; max: number; proposed: number | null }
  pressure?: { ratio: number; promptTokens: number; contextWindow: number }
  step?: { turn: number; toolCalls: number }
  outcome?: { status: string; result: string | null }
}

export type HookResult = HookAction | { action: HookAction; message?: string; limits?: Partial<Limits> }

/** A hook given in code: its handler decides (a `when`, if any, is checked first). */
export interface CodeHook {
  id: string
  event: HookEvent
  when?: string
  handler: (input: HookInput) => HookResult | Promise<HookResult>
}

export interface HookDecision {
  action: HookAction
  hookId?: string
  layer?: HookLayer
  source?: string
  message?: string
  limits?: Partial<Limits>
}

export interface HookProblem {
  hookId: string
  source: string
  message: string
}

export interface HookSet {
  layer: HookLayer
  /** A file path or a description such as 'createRuntime options'; named in every error. */
  source: string
  hooks: ReadonlyArray<HookSpec | CodeHook>
}

interface Compiled {
  id: string
  event: HookEvent
  layer: HookLayer
  source: string
  order: number
  when: ((context: Record<string, unknown>) => unknown) | null
  expression: string | null
  decide: (input: HookInput) => HookResult | Promise<HookResult>
}

const VARIABLES = ['thread', 'error', 'limit', 'pressure', 'step', 'outcome'] as const

const environment = (() => {
  const env = new Environment()
  for (const name of VARIABLES) env.registerVariable(name, 'map')
  return env
})()

function invalid(set: HookSet, id: string, what: string): SpindleError {
  const code = set.hooks.some((h) => 'handler' in h) ? 'INVALID_OPTIONS' : 'CONFIG_INVALID'
  return new SpindleError(code, `${set.source}: hook "${id}": ${what}`, { details: { source: set.source, hookId: id } })
}

function compileWhen(set: HookSet, id: string, expression: string): Compiled['when'] {
  let parsed: ReturnType<Environment['parse']>
  try {
    parsed = environment.parse(expression)
  } catch (error) {
    throw invalid(set, id, `\`when: ${expression}\` is not a valid CEL expression: ${describeError(error).message}`)
  }
  const checked = parsed.check() as { valid: boolean; error?: Error }
  if (!checked.valid) {
    const detail = checked.error?.message ?? 'it does not type-check'
    throw invalid(set, id, `\`when: ${expression}\` cannot be evaluated: ${detail}. Known variables: ${VARIABLES.join(', ')}.`)
  }
  return (context) => parsed(context)
}

function compileOne(set: HookSet, hook: HookSpec | CodeHook, order: number): Compiled {
  const id = typeof hook?.id === 'string' && hook.id !== '' ? hook.id : `#${order + 1}`
  let decide: Compiled['decide']
  let event: HookEvent
  let when: string | undefined
  if (hook && typeof (hook as CodeHook).handler === 'function') {
    const code = hook as CodeHook
    if (!HOOK_EVENTS.includes(code.event)) throw invalid(set, id, `event must be one of ${HOOK_EVENTS.join(', ')} (got ${JSON.stringify(code.event)})`)
    if (code.when !== undefined && typeof code.when !== 'string') throw invalid(set, id, '`when` must be a CEL expression string')
    event = code.event
    when = code.when
    decide = code.handler
  } else {
    const parsed = HookSpecSchema.safeParse(hook)
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!
      throw invalid(set, id, `${issue.path.join('.') || '(hook)'}: ${issue.message}`)
    }
    const spec = parsed.data
    event = spec.event
    when = spec.when
    const result: HookResult = {
      action: spec.action,
      ...(spec.message !== undefined ? { message: spec.message } : {}),
      ...(spec.limits !== undefined ? { limits: spec.limits as Partial<Limits> } : {}),
    }
    decide = () => result
  }
  return { id, event, layer: set.layer, source: set.source, order, when: when ? compileWhen(set, id, when) : null, expression: when ?? null, decide }
}

function normalise(result: HookResult): { action: HookAction; message?: string; limits?: Partial<Limits> } | null {
  if (typeof result === 'string') return HOOK_ACTIONS.includes(result) ? { action: result } : null
  if (result && typeof result === 'object' && HOOK_ACTIONS.includes(result.action)) return result
  return null
}

/** Hooks compiled once, evaluated at every event they listen to. */
export class CompiledHooks {
  private readonly byEvent = new Map<HookEvent, Compiled[]>()

  constructor(
    private readonly sets: readonly HookSet[],
    private readonly onError: (problem: HookProblem) => void,
  ) {
    let order = 0
    const all: Compiled[] = []
    for (const set of sets) {
      if (!(set.layer in HOOK_LAYERS)) throw new SpindleError('INVALID_OPTIONS', `${set.source}: unknown hook layer "${set.layer}".`)
      const seen = new Set<string>()
      for (const hook of set.hooks) {
        const compiled = compileOne(set, hook, order++)
        if (seen.has(compiled.id)) throw invalid(set, compiled.id, 'two hooks in this source have this id')
        seen.add(compiled.id)
        all.push(compiled)
      }
    }
    all.sort((a, b) => HOOK_LAYERS[a.layer] - HOOK_LAYERS[b.layer] || a.order - b.order)
    for (const hook of all) {
      const list = this.byEvent.get(hook.event) ?? []
      list.push(hook)
      this.byEvent.set(hook.event, list)
    }
  }

  /** Whether any hook listens to `event` (callers skip building inputs otherwise). */
  has(event: HookEvent): boolean {
    return (this.byEvent.get(event)?.length ?? 0) > 0
  }

  /** These hooks plus more sets (a thread's directive hooks over the runtime's). */
  with(sets: readonly HookSet[]): CompiledHooks {
    return new CompiledHooks([...this.sets, ...sets], this.onError)
  }

  /** The decision of the first hook for `event` whose condition holds; `{ action: 'continue' }` when none does. */
  async decide(event: HookEvent, input: HookInput): Promise<HookDecision> {
    const hooks = this.byEvent.get(event)
    if (!hooks) return { action: 'continue' }
    const context: Record<string, unknown> = {}
    for (const name of VARIABLES) context[name] = (input as unknown as Record<string, unknown>)[name] ?? {}
    for (const hook of hooks) {
      if (hook.when) {
        let holds: unknown
        try {
          holds = hook.when(context)
        } catch (error) {
          // A condition about fields this event lacks simply does not hold; say so once per call.
          this.onError({ hookId: hook.id, source: hook.source, message: `\`when: ${hook.expression}\` failed: ${describeError(error).message}` })
          continue
        }
        if (holds !== true) {
          if (typeof holds !== 'boolean') {
            this.onError({ hookId: hook.id, source: hook.source, message: `\`when: ${hook.expression}\` gave ${String(holds)}, not true or false` })
          }
          continue
        }
      }
      let result: ReturnType<typeof normalise>
      try {
        result = normalise(await hook.decide(input))
      } catch (error) {
        this.onError({ hookId: hook.id, source: hook.source, message: `handler threw: ${describeError(error).message}` })
        return { action: 'continue' }
      }
      if (!result) {
        this.onError({ hookId: hook.id, source: hook.source, message: `handler returned no action (expected one of ${HOOK_ACTIONS.join(', ')})` })
        return { action: 'continue' }
      }
      return {
        action: result.action,
        hookId: hook.id,
        layer: hook.layer,
        source: hook.source,
        ...(result.message !== undefined ? { message: result.message } : {}),
        ...(result.limits !== undefined ? { limits: result.limits } : {}),
      }
    }
    return { action: 'continue' }
  }
}

/**
 * Compiles hook sets; throws naming the source, the hook and what is wrong with it.
 *
 * @example
 * const hooks = compileHooks([{ layer: 'project', source: 'config.yaml', hooks: [
 *   { id: 'late-429', event: 'error', when: "error.category == 'rate_limited' && thread.turn > 3", action: 'fail' },
 * ] }])
 * await hooks.decide('error', input) // { action: 'fail', hookId: 'late-429', … } at turn 4
 */
export function compileHooks(sets: readonly HookSet[], options: { onError?: (problem: HookProblem) => void } = {}): CompiledHooks {
  return new CompiledHooks(sets, options.onError ?? (() => {}))
}
