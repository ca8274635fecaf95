/**
 * The `EffectHost` that the thread effects (actors/threadEffects.ts) run against: what they may
 * read of a thread, where their results go, and where a crash inside one is sorted — a storage
 * failure parks the thread, damaged files end it, anything else goes to its supervisor.
 */
import type { Clock } from '../base/clock.js'
import { isSpindleError } from '../base/errors.js'
import type { EffectHost } from '../../actors/effectPorts.js'
import type { EffectTracing } from '../../actors/effectTracing.js'
import type { Tool } from '../../actors/tools.js'
import { toolDefinition } from '../../actors/tools.js'
import type { Config } from '../../config/schema.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import { isStorageFailure } from '../../persistence/storageFailure.js'
import type { CrashLoopGuard } from './crashLoop.js'
import type { Decisions } from './decisions.js'
import type { Lifecycle, Reporter } from './events.js'
import type { ModelGate } from './modelGate.js'
import type { Parking } from './parking.js'
import type { PolicyDesk } from './policyDesk.js'
import type { Reactions } from './reactions.js'
import type { Shutdown } from './shutdown.js'
import type { Supervisor } from './supervisor.js'
import type { ThreadTable } from './threadTable.js'
import type { ToolGate } from './toolGate.js'
import { DEFAULT_MODEL } from './models.js'
import type { Models } from './models.js'
import type { OutputSchemas } from './outputSchemas.js'
import type { ReplyStream } from './replyStream.js'

/** Errors that say a thread's own files are damaged: the thread cannot go on from them, and they are left as they are. */
const DAMAGED_FILES = new Set<string>(['TRANSCRIPT_CHAIN_BROKEN', 'TRANSCRIPT_CORRUPT', 'STATE_CORRUPT'])

export interface EffectHostDeps {
  clock: Clock
  models: Models
  tools: ReadonlyMap<string, Tool>
  /**
   * Tools a closing runtime stops at once rather than letting them finish: the built-in ones, which
   * need the runtime open (a spawn would be refused, a wait would end with its children) and are
   * idempotent, so the next process runs them again.
   */
  stoppedAtClose: ReadonlySet<string>
  config: Config
  table: ThreadTable
  commit: Pick<GroupCommit, 'whenLogged'>
  crashLoop: Pick<CrashLoopGuard, 'waitTurn' | 'starting'>
  shutdown: Pick<Shutdown, 'toolStarted'>
  life: Pick<Lifecycle, 'closed'>
  policies: Pick<PolicyDesk, 'judgeModelFailure' | 'decideLimit'>
  gate: Pick<ModelGate, 'beforeModelCall' | 'handOffOnContextLength'>
  toolGate: Pick<ToolGate, 'approval' | 'waitRequest'>
  decisions: Pick<Decisions, 'settleChildren'>
  parking: Pick<Parking, 'storageFailed' | 'parkForStorage'>
  reactions: Pick<Reactions, 'endDamaged'>
  supervisor: Pick<Supervisor, 'crashed'>
  bus: Reporter
  outputSchemas: Pick<OutputSchemas, 'validator'>
  replies: Pick<ReplyStream, 'sink'>
  tracing?: EffectTracing | null
}

export function createEffectHost(deps: EffectHostDeps): EffectHost {
  const { table, commit, crashLoop, shutdown, life, bus } = deps

  /** An exception escaped an effect of thread `id`: sorted by what it says. */
  const crashed = (id: string, error: unknown): void => {
    const thread = table.get(id)
    if (!thread || thread.stopped) {
      bus.report(error, id)
      return
    }
    // Parked, or failing for want of storage: not the thread's fault, so not a crash for its
    // supervisor (whose restarts would count against it) and no FAIL (which could not be written).
    if (thread.parked) return
    if (isStorageFailure(error)) {
      deps.parking.storageFailed(thread, error)
      return
    }
    if (isSpindleError(error) && DAMAGED_FILES.has(error.code)) {
      // Not a crash to restart: the same damage would be read again, and each restart would count
      // against its group's restart intensity.
      bus.report(error, id)
      deps.reactions.endDamaged(id, thread, error)
      return
    }
    deps.supervisor.crashed(id, error)
  }

  return {
    clock: deps.clock,
    model: (id) => {
      const name = table.running(id).directive().model ?? DEFAULT_MODEL
      return { name, adapter: deps.models.get(name, id) }
    },
    tools: deps.tools,
    toolDefinitions: [...deps.tools.values()].map(toolDefinition),
    allowedTools: (id) => {
      const allowed = table.get(id)?.context().policy.tools
      return allowed ? new Set(allowed) : null
    },
    permissions: (id) => table.get(id)?.context().policy.permissions,
    modelTimeoutMs: deps.config.timeouts.modelMs,
    toolTimeoutMs: deps.config.timeouts.toolMs,
    // A suspect of a crash loop runs nothing before its turn comes (crashLoop.ts).
    checkpointed: (id) => {
      const turn = crashLoop.waitTurn(id)
      if (!turn) return commit.whenLogged()
      return turn.then(() => commit.whenLogged()).then(() => crashLoop.starting(id))
    },
    deliver: (id, event) => table.get(id)?.deliver(event) ?? false,
    messages: (id) => table.running(id).messages(),
    directive: (id) => table.running(id).directive(),
    outputValidator: (id) => {
      const directive = table.running(id).directive()
      return deps.outputSchemas.validator(id, directive.name, directive.output ?? {})
    },
    judgeModelFailure: (id, error, at) => deps.policies.judgeModelFailure(id, error, at),
    decideLimit: (id, hit) => deps.policies.decideLimit(id, hit),
    toolIntent: (id, key) => table.get(id)?.toolIntent(key) ?? null,
    recordToolIntent: async (id, key, call, signal) => {
      await crashLoop.waitTurn(id)
      // Checked here, after any wait for a turn: a call that has not started is the next process's.
      if (life.closed) return null
      // A suspect cancelled (or detached) while it waited for its turn: its step was stopped, and
      // nothing of a tool that will not run belongs in its transcript.
      if (signal.aborted) return null
      const thread = table.get(id)
      if (!thread || thread.stopped) return null
      thread.recordToolIntent(key, call)
      const underWay = deps.stoppedAtClose.has(call.name) ? () => {} : shutdown.toolStarted(id, { key, callId: call.id, name: call.name })
      try {
        await commit.whenLogged()
      } catch (error) {
        underWay()
        throw error
      }
      crashLoop.starting(id)
      return underWay
    },
    toolApproval: (id, turn, call) => deps.toolGate.approval(id, turn, call),
    waitRequest: (_id, turn, deadlineMs) => deps.toolGate.waitRequest(turn, deadlineMs),
    closing: () => life.closed,
    crash: (id, error) => {
      // Called from an effect's catch: whatever happens here must not escape as an unhandled
      // rejection, which would end the host process for one thread's trouble.
      try {
        crashed(id, error)
      } catch (failure) {
        if (!deps.parking.parkForStorage(id, failure)) bus.report(failure, id)
      }
    },
    beforeModelCall: (id, at) => deps.gate.beforeModelCall(id, at),
    handOffOnContextLength: (id) => deps.gate.handOffOnContextLength(id),
    settleChildren: (id, reason, signal) => deps.decisions.settleChildren(id, reason, signal),
    replySink: (id, at) => deps.replies.sink(id, at),
    tracing: deps.tracing ?? null,
  }
}
