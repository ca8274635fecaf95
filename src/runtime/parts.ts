/** Every part of a runtime, as the composition root (createRuntime.ts) wires them. */
import type { Clock } from '../base/clock.js'
import type { ThreadEffects } from '../../actors/threadEffects.js'
import type { Config } from '../../config/schema.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { Durability } from '../../persistence/types.js'
import type { Approvals } from './approvals.js'
import type { Budgets } from './budgets.js'
import type { CallDeadlines } from './callDeadlines.js'
import type { CallDecisions } from './callDecisions.js'
import type { CallerIds } from './callerIds.js'
import type { CrashLoopGuard } from './crashLoop.js'
import type { Decisions } from './decisions.js'
import type { FollowUps } from './followUps.js'
import type { EventBus, Lifecycle } from './events.js'
import type { EventStream } from './eventStream.js'
import type { Family } from './family.js'
import type { InboxPoller } from './inboxPoller.js'
import type { Leases } from './leases.js'
import type { ThreadLoader } from './loadThread.js'
import type { ModelGate } from './modelGate.js'
import type { Stores } from './openStores.js'
import type { Parking } from './parking.js'
import type { PolicyDesk } from './policyDesk.js'
import type { Reactions } from './reactions.js'
import type { Shutdown } from './shutdown.js'
import type { Recovery } from './recovery.js'
import type { ReplyStream } from './replyStream.js'
import type { Spawner } from './spawner.js'
import type { Supervisor } from './supervisor.js'
import type { TaskRecovery } from './taskRecovery.js'
import type { ThreadStarter } from './threadStarter.js'
import type { ThreadTable } from './threadTable.js'
import type { Tracing } from './tracing.js'
import type { Waiting } from './waiting.js'

export interface Parts {
  dir: string
  durability: Durability
  /** The most threads this process runs at once (Infinity: no limit); beyond it spawns are left to workers. */
  maxThreads: number
  /** Whether other processes may run this runtime's threads wherever they are (a database): handles of those wait for them. */
  runsElsewhere: boolean
  config: Config
  clock: Clock
  bus: EventBus
  life: Lifecycle
  stores: Stores
  commit: GroupCommit
  table: ThreadTable
  effects: ThreadEffects
  leases: Leases
  budgets: Budgets
  family: Family
  parking: Parking
  supervisor: Supervisor
  waiting: Waiting
  policies: PolicyDesk
  crashLoop: CrashLoopGuard
  starter: ThreadStarter
  spawner: Spawner
  callerIds: CallerIds
  gate: ModelGate
  taskRecovery: TaskRecovery
  approvals: Approvals
  reactions: Reactions
  loader: ThreadLoader
  recovery: Recovery
  decisions: Decisions
  calls: CallDecisions
  deadlines: CallDeadlines
  followUps: FollowUps
  inbox: InboxPoller
  shutdown: Shutdown
  replies: ReplyStream
  /** OpenTelemetry spans of threads, or null (no @opentelemetry/api, or `telemetry: false`). */
  tracing: Tracing | null
  events: EventStream
}
