/**
 * The policy desk: each thread's hooks (the runtime's, and its directive's), and the verdicts on
 * what its effects meet — a model failure (classified, a retry delay, the `error` hooks), a limit
 * (the `limit` hooks, a budget, or an escalation for a person) — and the hooks on transitions.
 */
import type { Clock } from '../base/clock.js'
import type { Config } from '../../config/schema.js'
import type { EffectHost } from '../../actors/effectPorts.js'
import type { HookVerdict } from '../../machines/threadEvents.js'
import type { Limits } from '../../machines/threadPolicy.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { Registry } from '../../persistence/types.js'
import type { LiveThread } from '../thread/liveThread.js'
import { classifyError, retryDelayMs } from '../policies/classifyError.js'
import { escalationMessage, proposeLimit } from '../policies/escalation.js'
import type { CompiledHooks, HookEvent, HookSpec } from '../policies/hooks.js'
import type { HookInput } from '../policies/hookInput.js'
import type { Budgets } from './budgets.js'
import type { Reporter } from './events.js'
import type { ThreadTable } from './threadTable.js'

export interface PolicyDeskDeps {
  /** The runtime-wide hooks (every layer's but the directives'). */
  hooks: CompiledHooks
  table: ThreadTable
  registry: Registry
  budgets: Pick<Budgets, 'raise'>
  clock: Clock
  config: Config
  bus: Reporter
  /** Cancels a thread a hook aborted (as any cancel: waits with a parked thread). */
  cancel(thread: LiveThread, reason: string, by: string): void
}

export class PolicyDesk {
  /** Hooks of threads whose directive has its own, compiled once per live thread. */
  private readonly threadHooks = new Map<string, CompiledHooks>()

  constructor(private readonly deps: PolicyDeskDeps) {}

  /** The runtime-wide hooks with those of a directive, compiled now so a bad `when` is refused before anything is written. */
  withDirective(name: string, dataHooks: HookSpec[]): CompiledHooks {
    return dataHooks.length ? this.deps.hooks.with([{ layer: 'directive', source: `directive "${name}"`, hooks: dataHooks }]) : this.deps.hooks
  }

  /** A thread starts with `hooks` (its directive's compiled in). */
  remember(id: string, hooks: CompiledHooks): void {
    if (hooks !== this.deps.hooks) this.threadHooks.set(id, hooks)
  }

  forget(id: string): void {
    this.threadHooks.delete(id)
  }

  hooksOf(id: string): CompiledHooks {
    const cached = this.threadHooks.get(id)
    if (cached) return cached
    const thread = this.deps.table.get(id)
    const own = thread ? thread.context().policy.hooks : []
    let hooks = this.deps.hooks
    if (own.length) {
      try {
        hooks = this.deps.hooks.with([{ layer: 'directive', source: `directive of thread ${id}`, hooks: own as unknown as HookSpec[] }])
      } catch (error) {
        // Stored hooks that no longer compile (a changed CEL library): report, run without them.
        this.deps.bus.report(error, id)
      }
    }
    this.threadHooks.set(id, hooks)
    return hooks
  }

  hookInput(context: ThreadContext, extra: Partial<HookInput> = {}): HookInput {
    const u = context.usage
    return {
      thread: {
        id: context.threadId,
        directive: context.directive.name,
        turn: u.turns,
        attempt: context.attempt,
        depth: context.depth,
        state: context.suspendReason ?? '',
        cost: { turns: u.turns, inputTokens: u.inputTokens, outputTokens: u.outputTokens, tokens: u.inputTokens + u.outputTokens, spend: u.spend },
        limits: { ...context.limits },
      },
      ...extra,
    } as HookInput
  }

  async judgeModelFailure(
    id: string,
    error: unknown,
    at: { turn: number; attempt: number },
  ): Promise<Awaited<ReturnType<EffectHost['judgeModelFailure']>>> {
    const { clock, config } = this.deps
    const thread = this.deps.table.running(id)
    const context = thread.context()
    const classified = classifyError(error, clock.now(), config.errors.patterns)
    const retryInMs = retryDelayMs(classified, at.attempt, context.policy.retry)
    let decision: HookVerdict | undefined
    const hooks = this.hooksOf(id)
    if (hooks.has('error')) {
      const decided = await hooks.decide(
        'error',
        this.hookInput(context, { error: { ...classified.failure, attempt: at.attempt, retryInMs } } as Partial<HookInput>),
      )
      if (decided.hookId && (decided.action === 'retry' || decided.action === 'fail' || decided.action === 'abort')) {
        decision = { action: decided.action, hookId: decided.hookId, ...(decided.message ? { message: decided.message } : {}) }
      }
    }
    thread.note('error_classified', {
      at: clock.now(),
      turn: at.turn,
      attempt: at.attempt,
      ...classified.failure,
      ...(classified.retryAfterMs !== undefined ? { retryAfterMs: classified.retryAfterMs } : {}),
      retryInMs,
      ...(decision ? { decision } : {}),
    })
    return { failure: classified.failure, retryInMs, ...(decision ? { decision } : {}) }
  }

  async decideLimit(id: string, hit: { limit: 'turns' | 'tokens' | 'spend' | 'durationMs'; used: number; max: number }) {
    const { clock, bus } = this.deps
    const thread = this.deps.table.running(id)
    const context = thread.context()
    const proposed = proposeLimit(hit.max, context.policy.escalation[hit.limit])
    const hooks = this.hooksOf(id)
    if (hooks.has('limit')) {
      const decided = await hooks.decide('limit', this.hookInput(context, { limit: { name: hit.limit, used: hit.used, max: hit.max, proposed } } as Partial<HookInput>))
      if (decided.hookId && decided.action !== 'continue') {
        thread.note('hook_decided', { at: clock.now(), event: 'limit', hookId: decided.hookId, action: decided.action, limit: hit.limit })
        const by = { hookId: decided.hookId, ...(decided.message ? { message: decided.message } : {}) }
        if (decided.action === 'fail' || decided.action === 'abort') return { action: decided.action, ...by }
        const limits = decided.limits ?? (proposed !== null ? { [hit.limit]: proposed } : undefined)
        if (limits) {
          try {
            this.deps.budgets.raise(id, limits as Partial<Limits>)
            return { action: 'raise' as const, limits: limits as Partial<Limits>, ...by }
          } catch (error) {
            // The tree cannot cover the raise: the hit goes to a person (or is the child's budget).
            bus.report(error, id)
          }
        }
      }
    }
    if ((hit.limit === 'spend' || hit.limit === 'tokens') && this.deps.registry.get(id)?.parentId) {
      // A child's spend and token limits are its reservation from its parent: a budget, not a
      // limit for a person to raise on its own.
      thread.note('budget_exhausted', { at: clock.now(), amount: hit.limit, used: hit.used, max: hit.max })
      return { action: 'budget' as const }
    }
    const requestId = `${hit.limit}-${context.usage.turns}-${clock.now().toString(36)}`
    thread.note('limit_escalation_requested', {
      at: clock.now(),
      requestId,
      ...hit,
      proposed,
      cost: { ...context.usage },
      message: escalationMessage(context.directive.name, { ...hit, proposed }, context.usage),
    })
    return { action: 'escalate' as const, proposed, requestId }
  }

  /** Runs the thread's hooks on `event`; a `fail` or `abort` verdict ends the thread. */
  fireHook(thread: LiveThread, event: HookEvent, context: ThreadContext, extra: Record<string, unknown> = {}): void {
    const { clock, bus } = this.deps
    const hooks = this.hooksOf(thread.id)
    if (!hooks.has(event)) return
    hooks.decide(event, this.hookInput(context, extra as Partial<HookInput>)).then(
      (decided) => {
        if (!decided.hookId || decided.action === 'continue' || decided.action === 'retry') return
        // after_complete sees a thread that has already stopped: its decision changes nothing.
        if (thread.stopped) return
        thread.note('hook_decided', { at: clock.now(), event, hookId: decided.hookId, action: decided.action })
        const message = decided.message ? `: ${decided.message}` : ''
        if (decided.action === 'fail') {
          thread.deliver({
            type: 'FAIL',
            at: clock.now(),
            error: { code: 'HOOK_FAILED', message: `Hook ${decided.hookId} failed the thread on ${event}${message}.` },
          })
        } else {
          this.deps.cancel(thread, `aborted by hook ${decided.hookId}${message}`, `hook ${decided.hookId}`)
        }
      },
      (error: unknown) => bus.report(error, thread.id),
    )
  }
}
