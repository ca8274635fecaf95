/**
 * Recovery escalation: when a thread ends in `error`, who tries its task next and when — the same
 * directive again, the next handler of the chain, or a person — kept in the recovery store so a
 * restart resumes decisions whose attempt had not started. Owns the cooldown timers.
 */
import type { Clock } from '../base/clock.js'
import { SpindleError } from '../base/errors.js'
import { childThreadId } from '../base/ids.js'
import type { Config } from '../../config/schema.js'
import type { TaskInfo, ThreadContext } from '../../machines/threadContext.js'
import type { RecoveryRecord, RecoveryStore, Registry, RequestInbox } from '../../persistence/types.js'
import { decideRecovery, describeRecovery } from '../policies/recovery.js'
import type { Emitter, Lifecycle, Reporter } from './events.js'
import type { Spawner } from './spawner.js'
import type { ThreadTable } from './threadTable.js'

export interface TaskRecoveryDeps {
  inbox: Pick<RequestInbox, 'putEscalation'>
  store: RecoveryStore
  registry: Registry
  table: ThreadTable
  spawner: Pick<Spawner, 'spawn'>
  clock: Clock
  config: Config
  bus: Reporter & Emitter
  life: Lifecycle
}

export class TaskRecovery {
  private readonly timers = new Set<unknown>()

  constructor(private readonly deps: TaskRecoveryDeps) {}

  /** A thread ended in `error`: decide who tries its task next, and when. */
  failed(id: string, context: ThreadContext): void {
    const { store, clock, config, bus } = this.deps
    if (!config.recovery.enabled) return
    try {
      const now = clock.now()
      const taskKey = context.task?.key ?? id
      const reasonCode = context.error?.code ?? 'error'
      const previous = store.get(taskKey, reasonCode)
      const { decision, next } = decideRecovery(config.recovery, previous, {
        taskKey,
        reasonCode,
        // The chain starts at the task's own directive, whichever handler failed now.
        directive: context.task?.directive ?? context.directive.name,
        now,
      })
      const message = describeRecovery(decision)
      bus.emit({ type: 'recovery_decided', at: now, threadId: id, taskKey, decision, message })
      if (decision.cooldownActive) return
      const record: RecoveryRecord = { ...next, failedThreadId: id, nextThreadId: null, updatedAt: now }
      store.put(record)
      if (decision.action === 'human') {
        this.writeEscalation(id, { taskKey, decision, message, error: context.error, directive: context.directive, at: new Date(now).toISOString() })
        return
      }
      this.schedule(record)
    } catch (error) {
      bus.report(error, id)
    }
  }

  /** Decisions whose next attempt had not started when the last process stopped. */
  resumePending(): void {
    if (!this.deps.config.recovery.enabled) return
    try {
      for (const record of this.deps.store.pending()) this.schedule(record)
    } catch (error) {
      this.deps.bus.report(error)
    }
  }

  close(): void {
    for (const handle of this.timers) this.deps.clock.clearTimeout(handle)
  }

  private schedule(record: RecoveryRecord): void {
    const { clock } = this.deps
    const handle = clock.setTimeout(() => {
      this.timers.delete(handle)
      if (this.deps.life.closed) return
      this.startAttempt(record).catch((error: unknown) => this.deps.bus.report(error, record.failedThreadId))
    }, Math.max(0, record.cooldownUntil - clock.now()))
    this.timers.add(handle)
    ;(handle as { unref?: () => void })?.unref?.()
  }

  /**
   * Starts the attempt a decision called for: a thread of the handler's directive, with the
   * task's prompt and what failed before. Its id comes from the decision, so a restart between
   * starting it and recording it finds it instead of starting a second one.
   */
  private async startAttempt(record: RecoveryRecord): Promise<void> {
    const { registry, table, clock } = this.deps
    const failed = registry.get(record.failedThreadId)
    const context = table.storedContext(record.failedThreadId) ?? table.get(record.failedThreadId)?.context()
    if (!failed || !context) throw new SpindleError('RECOVERY_FAILED', `Cannot retry the task of ${record.failedThreadId}: its thread has no readable state.`)
    const task: TaskInfo = {
      key: record.taskKey,
      directive: context.task?.directive ?? context.directive.name,
      prompt: context.task?.prompt ?? context.directive.prompt,
      handler: record.handler,
      attempt: record.attempt,
      retryOf: record.failedThreadId,
    }
    const id = childThreadId(record.handler, `${record.taskKey}:${record.reasonCode}:${record.handler}:${record.attempt}:${record.failedThreadId}`)
    if (!registry.get(id)) {
      const error = context.error ? `${context.error.code}: ${context.error.message}` : record.reasonCode
      await this.deps.spawner.spawn(
        {
          directive: {
            name: record.handler,
            prompt:
              `${task.prompt}\n\n[Attempt ${record.attempt} by ${record.handler}. The previous attempt (thread ${record.failedThreadId}, ` +
              `directive ${context.directive.name}) failed with ${error}. Take the task over from the start.]`,
            // A handler of the same directive is the same agent trying again; another one is told
            // nothing of the failed agent's role.
            ...(record.handler === context.directive.name && context.directive.instructions ? { instructions: context.directive.instructions } : {}),
          },
          ...(failed.parentId ? { parentId: failed.parentId } : {}),
        },
        id,
        task,
      )
    }
    this.deps.store.put({ ...record, nextThreadId: id, updatedAt: clock.now() })
    this.deps.bus.emit({ type: 'recovery_started', at: clock.now(), threadId: id, taskKey: record.taskKey, handler: record.handler, attempt: record.attempt, retryOf: record.failedThreadId })
  }

  /** The end of the chain: a file a person finds next to the failed thread. */
  private writeEscalation(id: string, escalation: Record<string, unknown>): void {
    try {
      this.deps.inbox.putEscalation(id, { threadId: id, kind: 'recovery_escalation', ...escalation })
    } catch (error) {
      this.deps.bus.report(error, id)
    }
  }
}
