/**
 * Supervision: the orchestrator actor decides what follows a thread's crash (restart it, its
 * group, or give up), and this part keeps what it decides from — each live thread's group and
 * start order — and carries its decisions out.
 */
import { createActor } from 'xstate'
import type { Actor, InspectionEvent } from 'xstate'
import type { Clock } from '../base/clock.js'
import { describeError } from '../base/errors.js'
import type { Config } from '../../config/schema.js'
import { orchestratorMachine } from '../../machines/orchestrator.machine.js'
import type { OrchestratorEmitted, SupervisedThread } from '../../machines/orchestrator.machine.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { Emitter, Reporter } from './events.js'
import type { ThreadTable } from './threadTable.js'

export interface SupervisorDeps {
  table: ThreadTable
  clock: Clock
  config: Config
  bus: Reporter & Emitter
  inspect?: ((event: InspectionEvent) => void) | undefined
  /** Stops a thread the orchestrator gave up on restarting (a cancel, as by `rt.cancel`). */
  stop(id: string, reason: string, by: string): Promise<unknown>
}

export class Supervisor {
  /** Live threads' parents (null: host code) and start order, for supervision groups. */
  private readonly groups = new Map<string, string | null>()
  private readonly startSeq = new Map<string, number>()
  private seq = 0
  private readonly orchestrator: Actor<typeof orchestratorMachine>

  constructor(private readonly deps: SupervisorDeps) {
    const { config } = deps
    this.orchestrator = createActor(orchestratorMachine, {
      id: 'orchestrator',
      systemId: 'orchestrator',
      ...(deps.inspect ? { inspect: deps.inspect } : {}),
      input: {
        defaultStrategy: config.supervision.strategy,
        intensity: { maxRestarts: config.supervision.maxRestarts, withinMs: config.supervision.withinMs },
      },
    })
    this.orchestrator.on('*', (emitted) => {
      try {
        this.carryOut(emitted as OrchestratorEmitted)
      } catch (error) {
        deps.bus.report(error)
      }
    })
    this.orchestrator.start()
  }

  /** Supervision bookkeeping of a live thread: its group and start order (the orchestrator keeps no copy). */
  supervise(id: string, parentId: string | null): void {
    this.groups.set(id, parentId)
    if (!this.startSeq.has(id)) this.startSeq.set(id, ++this.seq)
  }

  forget(id: string): void {
    this.groups.delete(id)
    this.startSeq.delete(id)
  }

  /** Recovery is over: the orchestrator starts acting on crashes. */
  ready(): void {
    this.orchestrator.send({ type: 'READY' })
  }

  close(): void {
    this.orchestrator.send({ type: 'CLOSE' })
  }

  private supervised(id: string): SupervisedThread | undefined {
    const thread = this.deps.table.get(id)
    if (!thread || thread.stopped) return undefined
    return {
      id,
      group: this.groups.get(id) ?? 'root',
      restart: thread.context().policy.supervision?.restart ?? this.deps.config.supervision.restart,
      seq: this.startSeq.get(id) ?? 0,
    }
  }

  /** An exception escaped an effect of live thread `id` (not a storage failure, not damage): the orchestrator decides. */
  crashed(id: string, error: unknown): void {
    const { table, clock, bus } = this.deps
    const thread = table.get(id)!
    const described = describeError(error)
    const code = described.code === 'Error' ? 'THREAD_CRASHED' : described.code
    bus.report(error, id)
    thread.note('thread_crashed', { at: clock.now(), error: { code, message: described.message }, pid: process.pid })
    const me = this.supervised(id)
    const group = this.groups.get(id) ?? null
    const siblings: SupervisedThread[] = []
    for (const [other, parent] of this.groups) {
      if (other === id || parent !== group) continue
      const sibling = this.supervised(other)
      if (sibling) siblings.push(sibling)
    }
    const strategy = group === null ? undefined : table.contextOf(group)?.policy.supervision?.childStrategy
    this.orchestrator.send({
      type: 'THREAD_CRASHED',
      id,
      at: clock.now(),
      error: { code, message: described.message },
      thread: me ? { ...me, group: group ?? 'root' } : undefined,
      siblings: siblings.map((t) => ({ ...t, group: group ?? 'root' })),
      ...(strategy ? { strategy } : {}),
    })
  }

  /** Carries out what the orchestrator decided. */
  private carryOut(emitted: OrchestratorEmitted): void {
    const { table, clock, bus } = this.deps
    const at = clock.now()
    switch (emitted.type) {
      case 'crashed':
        bus.emit({ type: 'thread_crashed', at, threadId: emitted.id, error: emitted.error })
        return
      case 'restart':
        for (const id of emitted.ids) {
          const thread = table.get(id)
          if (!thread || thread.stopped) continue
          thread.note('thread_restarted', { at, crashed: emitted.crashed, restartsInWindow: emitted.restartsInWindow })
          if (thread.restart(threadMachine)) {
            bus.emit({ type: 'thread_restarted', at, threadId: id, crashed: emitted.crashed, restartsInWindow: emitted.restartsInWindow })
          }
        }
        return
      case 'stop':
        for (const id of emitted.ids) {
          this.deps.stop(id, emitted.reason, 'supervisor').catch((error: unknown) => bus.report(error, id))
        }
        return
      case 'give_up':
        for (const id of emitted.ids) {
          const thread = table.get(id)
          if (!thread || thread.stopped) continue
          thread.deliver({ type: 'FAIL', at, error: { code: 'SUPERVISION_GAVE_UP', message: emitted.report } })
        }
        bus.emit({ type: 'supervision_gave_up', at, threadIds: emitted.ids, crashed: emitted.crashed, report: emitted.report })
        return
    }
  }
}
