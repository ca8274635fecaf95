/**
 * The gate before every model call — tool calls left without results repaired, the tree's budget,
 * budget governance, the context window's pressure — and the hand-off of a thread to a
 * continuation when its context is too full (or a provider refused it as too long).
 */
import type { Clock } from '../base/clock.js'
import { newThreadId } from '../base/ids.js'
import type { Config } from '../../config/schema.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { RecoveryStore, Registry } from '../../persistence/types.js'
import { continuationMessages, continuationSheds, findDanglingToolCalls } from '../thread/continuation.js'
import type { LiveThread } from '../thread/liveThread.js'
import { TOOL_CALLS_REPAIRED } from '../thread/messages.js'
import { checkGovernance } from '../policies/governance.js'
import type { HookInput } from '../policies/hookInput.js'
import type { Budgets } from './budgets.js'
import type { Emitter } from './events.js'
import { DEFAULT_MODEL } from './models.js'
import type { Models } from './models.js'
import type { Parking } from './parking.js'
import type { PolicyDesk } from './policyDesk.js'
import type { ThreadStarter } from './threadStarter.js'
import type { ThreadTable } from './threadTable.js'

type HandOffCause = 'context_window_pressure' | 'context_length' | 'reduced_context'

export interface ModelGateDeps {
  models: Pick<Models, 'has' | 'get'>
  table: ThreadTable
  registry: Registry
  recoveryStore: Pick<RecoveryStore, 'degradeStep' | 'bumpDegradeStep'>
  budgets: Pick<Budgets, 'exhausted' | 'continueAccount'>
  policies: Pick<PolicyDesk, 'hooksOf' | 'hookInput'>
  parking: Pick<Parking, 'cancel'>
  starter: ThreadStarter
  clock: Clock
  config: Config
  bus: Emitter
}

export class ModelGate {
  /** Hand-offs under way, so that two model calls of one thread never start two successors. */
  private readonly handingOff = new Map<string, Promise<string | null>>()

  constructor(private readonly deps: ModelGateDeps) {}

  /** The context window of the thread's model, when its adapter says (none for a model this runtime lacks). */
  private windowOf(thread: LiveThread): number | undefined {
    const name = thread.directive().model
    return this.deps.models.has(name ?? DEFAULT_MODEL) ? this.deps.models.get(name).contextWindow : undefined
  }

  async beforeModelCall(id: string, at: { turn: number; attempt: number }): Promise<'proceed' | 'stop'> {
    const { table, registry, budgets, clock, config } = this.deps
    const thread = table.get(id)
    if (!thread || thread.stopped) return 'stop'
    const toCheck = thread.messagesToCheck()
    // History just read back (recovery, restart) of a thread killed between registering its
    // successor and recording the hand-off: the successor runs the task; hand off before any call.
    if (toCheck && registry.successorOf(id) !== null) {
      const window = this.windowOf(thread)
      const pressed = window !== undefined && thread.context().promptTokens / window >= config.context.pressureRatio
      await this.handOff(thread, pressed ? 'context_window_pressure' : 'context_length')
      return 'stop'
    }
    const repairs = toCheck ? findDanglingToolCalls(toCheck) : []
    if (repairs.length > 0) {
      // Recorded like any input, so the conversation rebuilt from the transcript has them too.
      thread.note(TOOL_CALLS_REPAIRED, { at: clock.now(), turn: at.turn, repairs })
      thread.repairMessages(repairs)
    }
    const exhausted = budgets.exhausted(id)
    if (exhausted) {
      thread.deliver({ type: 'BUDGET_EXHAUSTED', at: clock.now(), ...exhausted })
      return 'stop'
    }
    const context = thread.context()
    if ((await this.govern(thread, context)) === 'stopped') return 'stop'
    const window = this.windowOf(thread)
    if (window && context.promptTokens > 0) {
      const ratio = context.promptTokens / window
      if (ratio >= config.context.pressureRatio) {
        const decision = await this.pressureDecision(thread, context, { ratio, promptTokens: context.promptTokens, contextWindow: window })
        if (decision !== 'proceed') return 'stop'
      }
    }
    // The call is made right after this returns, and writes nothing before it: a process that
    // woke from a stall past its lease (another may run the thread now) must not make it.
    if (thread.stopped || thread.fencedOff()) return 'stop'
    return 'proceed'
  }

  /** What the context_window_pressure hooks decide; without one, the configured default. */
  private async pressureDecision(
    thread: LiveThread,
    context: ThreadContext,
    pressure: { ratio: number; promptTokens: number; contextWindow: number },
  ): Promise<'proceed' | 'stopped'> {
    const { policies, clock } = this.deps
    const hooks = policies.hooksOf(thread.id)
    let action: string = 'continue'
    let hookId: string | null = null
    let message = ''
    if (hooks.has('context_window_pressure')) {
      const decided = await hooks.decide('context_window_pressure', policies.hookInput(context, { pressure } as Partial<HookInput>))
      if (decided.hookId) {
        action = decided.action
        hookId = decided.hookId
        message = decided.message ? `: ${decided.message}` : ''
        thread.note('hook_decided', { at: clock.now(), event: 'context_window_pressure', hookId, action })
      }
    }
    if (thread.stopped) return 'stopped'
    if (action === 'fail') {
      thread.deliver({ type: 'FAIL', at: clock.now(), error: { code: 'HOOK_FAILED', message: `Hook ${hookId} failed the thread on context_window_pressure${message}.` } })
      return 'stopped'
    }
    if (action === 'abort') {
      this.deps.parking.cancel(thread, `aborted by hook ${hookId}${message}`, `hook ${hookId}`)
      return 'stopped'
    }
    // `retry` means "carry on as you are"; `continue` means the default.
    if (action === 'retry' || this.deps.config.context.onPressure === 'ignore') return 'proceed'
    await this.handOff(thread, 'context_window_pressure')
    return 'stopped'
  }

  async handOffOnContextLength(id: string): Promise<boolean> {
    const thread = this.deps.table.get(id)
    if (!thread || thread.stopped) return false
    // null: a successor would carry no less history (say, the prompt alone is too big) and be
    // refused the same way; the thread suspends for context_length instead of chaining for ever.
    return (await this.handOff(thread, 'context_length')) !== null
  }

  /**
   * Ends `thread` `continued` and starts its successor with the same directive, policy, limits
   * and parent, its usage carried over, and its history rebuilt from the transcript within the
   * resume ceiling. The successor is durable before the hand-off is recorded; after a crash
   * between the two, the registry's chain finds it again instead of starting another.
   */
  private handOff(thread: LiveThread, cause: HandOffCause): Promise<string | null> {
    const running = this.handingOff.get(thread.id)
    if (running) return running
    const { registry, config, clock } = this.deps
    const work = (async (): Promise<string | null> => {
      const id = thread.id
      const context = thread.context()
      const record = registry.get(id)
      const existing = registry.chain(id).find((r) => r.previousThreadId === id)
      let nextId: string
      if (existing) {
        nextId = existing.id
      } else {
        const window = this.windowOf(thread) ?? config.context.defaultContextWindow
        const ceiling = config.context.resumeCeilingTokens ?? Math.floor(window * config.context.resumeCeilingRatio)
        // A provider that refused the history outright gets half of that.
        const messages = continuationMessages(thread.messages(), {
          prompt: context.directive.prompt,
          previousThreadId: id,
          ceilingTokens: cause === 'context_window_pressure' ? ceiling : Math.floor(ceiling / 2),
        })
        if (cause === 'context_length' && !continuationSheds(thread.messages(), messages, { isContinuation: context.previousThreadId != null })) return null
        nextId = newThreadId(context.directive.name)
        this.deps.budgets.continueAccount(nextId, id)
        await this.deps.starter.start({
          input: {
            threadId: nextId,
            directive: context.directive,
            limits: context.limits,
            policy: context.policy,
            depth: context.depth,
            carried: { usage: { ...context.usage }, activeMs: context.activeMs, previousThreadId: id },
          },
          hooks: this.deps.policies.hooksOf(id),
          parentId: record?.parentId ?? null,
          previousThreadId: id,
          messages,
        })
      }
      if (!thread.stopped) {
        thread.note('thread_continued', { at: clock.now(), cause, nextThreadId: nextId })
        thread.deliver({ type: 'HAND_OFF', at: clock.now(), nextThreadId: nextId })
        this.deps.bus.emit({ type: 'thread_continued', at: clock.now(), threadId: id, nextThreadId: nextId, cause })
      }
      return nextId
    })()
    this.handingOff.set(thread.id, work)
    work.finally(() => this.handingOff.delete(thread.id)).catch(() => {})
    return work
  }

  /** Budget governance before a model call: the degrade policy when a budget is exceeded. */
  private async govern(thread: LiveThread, context: ThreadContext): Promise<'proceed' | 'stopped'> {
    const { registry, recoveryStore, clock, config } = this.deps
    const policy = config.governance
    if (policy.tokens === null && policy.wallTimeMs === null && policy.retries === null && Object.keys(policy.byDirective).length === 0) return 'proceed'
    const usage = {
      tokens: context.usage.inputTokens + context.usage.outputTokens,
      wallTimeMs: context.activeMs,
      retries: context.retries ?? 0,
    }
    if (!checkGovernance(policy, context.directive.name, usage, 0)) return 'proceed'
    // Steps are counted per task: a continuation (which starts with its predecessor's usage, so
    // exceeds at once) takes the next step, not the first again (reduced_context for ever).
    const previous = context.previousThreadId
    const taskKey = context.task?.key ?? (previous ? (registry.chain(previous)[0]?.id ?? previous) : thread.id)
    const verdict = checkGovernance(policy, context.directive.name, usage, recoveryStore.degradeStep(taskKey))
    if (!verdict) return 'proceed'
    recoveryStore.bumpDegradeStep(taskKey, clock.now())
    const at = clock.now()
    thread.note('governance_applied', { at, ...verdict, usage })
    this.deps.bus.emit({ type: 'governance_applied', at, threadId: thread.id, exceededKeys: verdict.exceededKeys, action: verdict.action, degradeStep: verdict.degradeStep })
    const key = verdict.exceededKeys[0]!
    const budgets = { ...policy, ...(policy.byDirective[context.directive.name] ?? {}) }
    switch (verdict.action) {
      case 'reduced_context':
        await this.handOff(thread, 'reduced_context')
        return 'stopped'
      case 'manual_handoff':
        thread.deliver({ type: 'BUDGET_EXHAUSTED', at, amount: key, used: usage[key], max: budgets[key] ?? 0 })
        return 'stopped'
      case 'stop_run':
        thread.deliver({
          type: 'FAIL',
          at,
          error: { code: 'budget_exceeded', message: `Thread ${thread.id} exceeded its ${verdict.exceededKeys.join(', ')} budget (budget governance); the degrade policy stopped the run.` },
        })
        return 'stopped'
    }
  }
}
