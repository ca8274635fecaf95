/**
 * The runtime host programs use: spawn threads, find them, and carry every unfinished thread on
 * after a crash.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { ModelAdapter } from '../actors/model.js'
import type { EffectHost, ThreadEffects } from '../actors/threadEffects.js'
import type { Clock } from './base/clock.js'
import { createThreadEffects } from '../actors/threadEffects.js'
import { systemClock } from './base/clock.js'
import type { Tool } from '../actors/tools.js'
import { toolDefinition } from '../actors/tools.js'
import type { HookVerdict, Limits, TaskInfo, ThreadContext, ThreadEvent, ThreadInput, ThreadOutcome, ThreadPolicy } from '../machines/thread.machine.js'
import { exceeded, outcomeOf, threadMachine } from '../machines/thread.machine.js'
import { writeFileAtomicSync } from '../persistence/atomicFile.js'
import { BellReader } from './requestBell.js'
import { createFileCheckpointStore } from '../persistence/fileCheckpointStore.js'
import { makeEnvelope } from '../persistence/envelope.js'
import { FAILED_ROUND_BACKOFF_MAX_MS, GroupCommit } from '../persistence/groupCommit.js'
import { checkpointsFailing, isStorageFailure, storageFailureOf, threadParked } from '../persistence/storageFailure.js'
import type { CommitStats } from '../persistence/groupCommit.js'
import { anchorSetAside, createJsonlTranscriptStore } from '../persistence/jsonlTranscript.js'
import { createMemoryCheckpointStore } from '../persistence/memoryCheckpointStore.js'
import { createMemoryTranscriptStore } from '../persistence/memoryTranscript.js'
import { assertDirectories, assertRealDirectories, assertRegistryKept, dataPaths, STATE_FILE, threadDir, threadFile, TRANSCRIPT_FILE } from '../persistence/paths.js'
import { openSqliteRegistry } from '../persistence/sqliteRegistry.js'
import { openSqliteLedger } from '../persistence/sqliteLedger.js'
import { openSqliteLeases } from '../persistence/sqliteLeases.js'
import os from 'node:os'
import { nanoid } from 'nanoid'
import type {
  BudgetAmounts,
  CheckpointStore,
  Durability,
  Lease,
  LeaseStore,
  Ledger,
  RecordedWait,
  RecoveryRecord,
  RecoveryStore,
  Registry,
  StateEnvelope,
  ThreadRecord,
  ThreadStatus,
  TranscriptEntry,
  TranscriptOpenResult,
  TranscriptStore,
} from '../persistence/types.js'
import { staleLinesMessage } from '../persistence/transcriptLines.js'
import { SpindleError, describeError, isSpindleError, midSentence } from './base/errors.js'
import { assertThreadId, newNonce, newThreadId } from './base/ids.js'
import { bootThreadFileReader } from '../persistence/prefetch.js'
import type { PrefetchedThread, ThreadFileReader } from '../persistence/prefetch.js'
import type { ThreadHandle, ThreadServices, ThreadView } from './liveThread.js'
import { LiveThread, viewOf } from './liveThread.js'
import type { RetryPolicy } from './policies/classifyError.js'
import { classifyError, retryDelayMs } from './policies/classifyError.js'
import { loadFileLayers, mergeConfig, systemDefaults, userConfigFile } from '../config/load.js'
import { ConfigLayerSchema, LimitsSchema } from '../config/schema.js'
import type { Config, ConfigLayer } from '../config/schema.js'
import { escalationMessage, proposeLimit } from './policies/escalation.js'
import type { CodeHook, CompiledHooks, HookEvent, HookInput, HookSet, HookSpec } from './policies/hooks.js'
import { compileHooks } from './policies/hooks.js'
import type { ApprovalRequest, CancelRequest, RequestLogEntry } from './requests.js'
import {
  APPROVALS_DIR,
  ApprovalResponseSchema,
  CANCEL_FILE,
  CancelRequestSchema,
  approvalFiles,
  resumeFile,
  cancelFile,
  cancelRefusal,
  claim,
  logRequest,
  readRequestFile,
  requestCancel,
  setAside,
} from './requests.js'
import { SPAWN_ENTRY, isMachineEventEntry, replayTranscript } from './replay.js'
import { createActor } from 'xstate'
import type { Actor, InspectionEvent } from 'xstate'
import { orchestratorMachine } from '../machines/orchestrator.machine.js'
import type { OrchestratorEmitted, RestartType, SupervisedThread, SupervisionStrategy } from '../machines/orchestrator.machine.js'
import type { Message } from '../actors/model.js'
import { childTools } from './childTools.js'
import type { SpawnThreadInput } from './childTools.js'
import { continuationMessages, continuationSheds, findDanglingToolCalls } from './continuation.js'
import { TOOL_CALLS_REPAIRED } from './messages.js'
import { capPermissions, PermissionsSchema } from './base/permissions.js'
import { pidAlive } from './base/processes.js'
import { assertNoWaitCycle, assertWaitCanEnd, findWaitCycle, waitCycleEnd, waitThreads } from './waits.js'
import { decideRecovery, describeRecovery } from './policies/recovery.js'
import type { RecoveryDecision } from './policies/recovery.js'
import { checkGovernance } from './policies/governance.js'
import { CrashLoopGuard, crashLoopError } from './crashLoop.js'
import { openSqliteRecovery } from '../persistence/sqliteRecovery.js'
import type { SettledThread, WaitCycleEnd, WaitGraph, WaitInProgress, WaitOptions, WaitReport } from './waits.js'
import { childThreadId } from './base/ids.js'
import type { z } from 'zod'
import { isActive, isStateValue, statusOfValue } from './threadStatus.js'

export interface RuntimeOptions {
  /** Data directory: `registry.db` and `threads/<id>/{state.json,transcript.jsonl}`. */
  dir: string
  model: ModelAdapter
  tools?: Tool<any>[]
  /**
   * 'fsync' (default): an acknowledged step survives power loss — every effect waits until the
   * checkpoint that starts it has been fsynced. 'process': it survives a crash of this process
   * (the OS has the bytes), not a power loss or kernel crash.
   */
  durability?: Durability
  /** 'file' (default) or 'memory': nothing on disk, for tests and benchmarks. */
  store?: 'file' | 'memory'
  /** Carry unfinished threads on when the runtime opens (default true). */
  recover?: boolean
  /** Limits for threads that do not set their own, over config/defaults.yaml's `limits`. null is unlimited. */
  defaultLimits?: Partial<Limits>
  /** Over config/defaults.yaml's `retry`. */
  retry?: Partial<RetryPolicy>
  /** Over config/defaults.yaml's `timeouts`: `modelMs` abandons a model call (classified transient), `toolMs` is the default tool timeout. */
  timeouts?: Partial<Config['timeouts']>
  clock?: Clock
  /** Problems that did not stop the runtime: a thread that failed, a file that could not be read. */
  onProblem?: (problem: Problem) => void
  /**
   * The user's configuration file. Default: $XDG_CONFIG_HOME/spindle/config.yaml, else
   * ~/.config/spindle/config.yaml. null skips the user layer. `<dir>/config.yaml` is the project layer.
   */
  userConfig?: string | null
  /** A whole configuration layer given in code, over the user and project files. */
  config?: ConfigLayer
  /** Hooks in code (with handlers) or as data; they sit in the project layer. */
  hooks?: Array<HookSpec | CodeHook>
  /**
   * Told about every lifecycle event, from the first: runtime_ready and thread_recovered happen
   * inside createRuntime, before `rt.on` could be called.
   */
  onLifecycle?: (event: LifecycleEvent) => void
  /** Give every thread the built-in `spawn_thread` and `wait_threads` tools (default true). */
  builtinTools?: boolean
  /**
   * XState inspection of every thread actor and the orchestrator — pass `inspector.inspect` of
   * @statelyai/inspect to watch them live in the Stately inspector (`spindle demo --inspect`).
   */
  inspect?: (event: InspectionEvent) => void
}

/** What the orchestrator tells host code, so a UI never shows a dead thread as alive. */
export type LifecycleEvent =
  | { type: 'runtime_ready'; at: number; recovery: RecoveryReport }
  | { type: 'thread_recovered'; at: number; threadId: string; state: unknown }
  | { type: 'thread_crashed'; at: number; threadId: string; error: { code: string; message: string } }
  | { type: 'thread_restarted'; at: number; threadId: string; crashed: string; restartsInWindow: number }
  /**
   * A write of the thread's failed for want of storage (a full disk, an I/O error): it is parked at
   * its last recorded input and tried again by itself, backing off (`thread_unparked` when it goes on).
   */
  | { type: 'thread_parked'; at: number; threadId: string; error: { code: 'STORAGE_FAILED'; message: string } }
  /** A parked thread's disk took writes again: it goes on from where it was parked. */
  | { type: 'thread_unparked'; at: number; threadId: string; since: number; attempts: number }
  | { type: 'supervision_gave_up'; at: number; threadIds: string[]; crashed: string; report: string }
  /**
   * Recovery found the thread at the same point `recoveries` times in a row, each time after the
   * process running it died: it is suspended (CRASH_LOOP) instead of run again. `seq`: where it stuck.
   */
  | { type: 'thread_quarantined'; at: number; threadId: string; recoveries: number; seq: number; error: { code: 'CRASH_LOOP'; message: string } }
  | { type: 'thread_continued'; at: number; threadId: string; nextThreadId: string; cause: 'context_window_pressure' | 'context_length' | 'reduced_context' }
  | { type: 'child_thread_failed'; at: number; threadId: string; parentId: string; error: { code: string; message: string } }
  /** A thread's share of its tree's budget ran out: it suspended (reason `budget`). */
  | { type: 'budget_exhausted'; at: number; threadId: string; parentId: string | null; amount: 'spend' | 'tokens' | 'wallTimeMs' | 'retries'; used: number; max: number }
  /** Recovery escalation decided what follows a failed thread (design 003 §6). */
  | { type: 'recovery_decided'; at: number; threadId: string; taskKey: string; decision: RecoveryDecision; message: string }
  /** A thread recovery escalation started to try a failed task again. */
  | { type: 'recovery_started'; at: number; threadId: string; taskKey: string; handler: string; attempt: number; retryOf: string }
  /**
   * Recovery at open (or `rt.recover()`) is under way: `done` of `total` unfinished threads looked
   * at, by outcome, and what the recovered ones had spent. Sent first with done 0, then at most
   * every 100 ms, and last with done = total.
   */
  | { type: 'recovery_progress'; at: number; done: number; total: number; resumed: number; settled: number; rebuilt: number; failed: number; elsewhere: number; spend: number }
  /** Budget governance acted on a thread (design 003 §7). */
  | { type: 'governance_applied'; at: number; threadId: string; exceededKeys: string[]; action: string; degradeStep: number }

export type LifecycleEventType = LifecycleEvent['type']

/** How often recovery tells its progress while it works through many threads. */
const RECOVERY_PROGRESS_EVERY_MS = 100

/** A spawn that failed for want of storage: nothing of the thread runs, and the caller may spawn again. */
function notCreated(id: string, error: unknown): SpindleError {
  if (isSpindleError(error) && error.code === 'STORAGE_FAILED') return error
  return new SpindleError(
    'STORAGE_FAILED',
    `Thread ${id} was not created: ${describeError(error).message.replace(/\.?$/, '.')} Nothing of it runs; spawn it again once the disk of the data directory takes writes.`,
    { cause: error, details: { threadId: id } },
  )
}
/** A thread parked for want of storage is tried again after this, doubling up to the max. */
const STORAGE_RETRY_FIRST_MS = 250
const STORAGE_RETRY_MAX_MS = 10_000
const STORAGE_REPORT_EVERY_MS = 60_000
/** From this many threads to recover on, a worker reads their files ahead (below it, starting one costs more). */
const PREFETCH_FROM = 256
/** Errors that say a thread's own files are damaged: the thread cannot go on from them, and they are left as they are. */
const DAMAGED_FILES = new Set<string>(['TRANSCRIPT_CHAIN_BROKEN', 'TRANSCRIPT_CORRUPT', 'STATE_CORRUPT'])

export interface Problem {
  threadId?: string
  code: string
  message: string
}

/** What a thread is told to do, and the configuration that travels with it (the directive layer). */
export interface DirectiveSpec {
  name: string
  prompt: string
  /** The tools the thread may use, by name (each must be a tool of the runtime); absent: all of them. */
  tools?: string[]
  /**
   * What its tools may do: capability → granted, `*` for every capability not named (default:
   * granted). A tool that needs a capability the thread lacks is hidden from the model and a call
   * to it gets PERMISSION_DENIED. A child's are capped by its parent's.
   */
  permissions?: Record<string, boolean>
  limits?: Partial<Limits>
  retry?: Partial<RetryPolicy>
  escalation?: ConfigLayer['escalation']
  hooks?: HookSpec[]
}

export interface SpawnOptions {
  directive: DirectiveSpec
  /** Per-spawn overrides, over the directive's. A child's limits are also capped by its parent's. */
  limits?: Partial<Limits>
  retry?: Partial<RetryPolicy>
  escalation?: ConfigLayer['escalation']
  hooks?: HookSpec[]
  parentId?: string
  /** How the supervisor treats this thread after a crash (default: config `supervision.restart`). */
  restart?: RestartType
  /** The restart strategy for this thread's own children (default: config `supervision.strategy`). */
  childStrategy?: SupervisionStrategy
}

export interface ApproveOptions {
  /** New limits; default: the proposal of the approval request. */
  limits?: Partial<Limits>
  /** Who approved, recorded in the transcript (default 'api'). */
  by?: string
  message?: string
}

export type CancelResult =
  | { status: 'cancelled'; outcome: ThreadOutcome }
  /** The thread runs in another process: its cancel file was written with the thread's nonce. */
  | { status: 'requested'; file: string }

export interface RequestsReport {
  honoured: Array<{ threadId: string; kind: 'cancel' | 'approval' | 'resume'; file: string }>
  refused: Array<{ threadId: string | null; kind: 'cancel' | 'approval' | 'resume'; file: string; reason: string }>
}

export interface RecoveryReport {
  /** Threads carried on by a live actor. */
  resumed: string[]
  /** Threads whose checkpoint showed them stopped (terminal or suspended); the registry was brought in line. */
  settled: string[]
  /** Threads rebuilt from their transcript because state.json was missing or damaged. */
  rebuilt: string[]
  /** Threads that could not be recovered, with the reason; each was marked `error`. */
  failed: Array<{ threadId: string; code: string; message: string }>
  /** Unfinished threads another live runtime process holds the lease of: left to it. */
  elsewhere: string[]
  /**
   * Threads whose transcript had lost its newest lines (a power loss before the file's own
   * fdatasync), written back from the transcript journal before they were carried on.
   */
  restored: string[]
  /**
   * Threads found at the same point more than `supervision.maxRecoveries` times in a row, each
   * after the process running them died: suspended (CRASH_LOOP) instead of run again.
   */
  quarantined: string[]
}

export interface Runtime {
  readonly dir: string
  readonly durability: Durability
  /** The report of the last recovery (the one at open, unless `recover()` ran since). */
  readonly lastRecovery: RecoveryReport
  spawn(options: SpawnOptions): Promise<ThreadHandle>
  /** A thread by id: live if this runtime runs it, otherwise a view of its stored state. */
  get(id: string): ThreadHandle
  list(filter?: { status?: ThreadStatus | ThreadStatus[]; limit?: number }): ThreadRecord[]
  /** Rehydrates every created or running thread that this runtime does not already run. */
  recover(): Promise<RecoveryReport>
  /** Live threads of this runtime. */
  active(): ThreadHandle[]
  /** Counters for benchmarks and diagnostics. */
  stats(): CommitStats & { live: number }
  /**
   * Cancels a thread: a live one at once (its model call, tool and retry wait are aborted), a
   * suspended one from disk; one running in another process gets a cancel request file.
   */
  cancel(id: string, reason?: string): Promise<CancelResult>
  /** Approves a limit escalation: raises the limits and carries the same thread on. */
  approve(id: string, options?: ApproveOptions): Promise<ThreadHandle>
  /** Denies a suspended thread: it ends `cancelled` with its partial result. */
  deny(id: string, reason?: string, options?: { by?: string }): Promise<ThreadOutcome>
  /** Carries on a thread suspended for a reason other than a limit (an error that outlasted its retries). */
  resume(id: string, options?: { by?: string }): Promise<ThreadHandle>
  /** Acts on cancel and approval-response files now (the runtime also polls for them). */
  checkRequests(options?: { sweep?: boolean }): Promise<RequestsReport>
  /**
   * Waits for threads to settle (following continuations), from completion events. With
   * `failFast` it ends at the first failure; with `cancelSiblingsOnFailure` the others are then
   * cancelled, each naming the one that failed.
   */
  waitThreads(ids: string[], options?: WaitOptions): Promise<WaitReport>
  /** The continuation chain `id` belongs to, oldest first. */
  chain(id: string): ThreadRecord[]
  /** Listens for one lifecycle event type (or '*' for all); returns the unsubscribe function. */
  on<T extends LifecycleEventType | '*'>(type: T, listener: (event: T extends '*' ? LifecycleEvent : Extract<LifecycleEvent, { type: T }>) => void): () => void
  /**
   * Ends an orphan — a created or running thread no live process holds — without running it:
   * `error` (ORPHAN_MARKED) or `cancelled`. Takes its lease first; a thread a live process holds is refused.
   */
  settleOrphan(id: string, action: 'mark_error' | 'mark_cancelled', reason?: string): Promise<ThreadOutcome>
  /** The merged configuration this runtime runs with. */
  readonly config: Config
  /** Stops every live thread where it is (its checkpoint stays) and closes the stores. */
  close(): Promise<void>
}

/** Validates a layer of options against the configuration schema, naming the field that is wrong. */
function validateLayer(layer: ConfigLayer, where: string): ConfigLayer {
  const result = ConfigLayerSchema.safeParse(layer)
  if (result.success) return result.data
  const issue = result.error.issues[0]!
  const field = issue.path.join('.')
  throw new SpindleError('INVALID_OPTIONS', `${where}: ${field} ${midSentence(issue.message)} (got ${JSON.stringify(fieldValue(layer, issue.path))}).`, {
    details: { field },
  })
}

function fieldValue(value: unknown, at: ReadonlyArray<PropertyKey>): unknown {
  return at.reduce<unknown>((v, key) => (v && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[key] : undefined), value)
}

function validateSpawn(options: SpawnOptions): void {
  const d = options?.directive
  if (!d || typeof d.name !== 'string' || d.name.trim() === '' || typeof d.prompt !== 'string') {
    throw new SpindleError(
      'INVALID_OPTIONS',
      'spawn needs a directive with a non-empty string `name` and a string `prompt`, e.g. { name: "research", prompt: "Find X" }.',
      { details: { field: 'directive' } },
    )
  }
}

/** A handle of a thread this runtime does not run: its stored state, read once. */
class StoredThread implements ThreadHandle {
  readonly done: Promise<ThreadOutcome>
  constructor(
    readonly id: string,
    readonly status: ThreadStatus,
    private readonly view: ThreadView | null,
    outcome: ThreadOutcome | null,
  ) {
    this.done = outcome
      ? Promise.resolve(outcome)
      : Promise.reject(
          new SpindleError(
            'THREAD_NOT_ACTIVE',
            `Thread ${id} is ${status} but no actor runs it in this process. Call rt.recover() to carry it on here.`,
            { details: { threadId: id, status } },
          ),
        )
    this.done.catch(() => {})
  }
  subscribe(listener: (view: ThreadView) => void): () => void {
    if (this.view) listener(this.view)
    return () => {}
  }
  getSnapshot(): ThreadView {
    if (!this.view) throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${this.id} has no stored snapshot.`)
    return this.view
  }
}

/**
 * Opens a runtime on a data directory and, unless `recover: false`, carries on every thread that
 * was created or running when the last process stopped.
 *
 * @example
 * const rt = await createRuntime({ dir: '.spindle', model: scriptedModel(script), tools: [lookup] })
 * const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Find X' }, limits: { turns: 20 } })
 * const outcome = await thread.done
 */
export async function createRuntime(options: RuntimeOptions): Promise<Runtime> {
  if (!options || typeof options.dir !== 'string' || options.dir === '') {
    throw new SpindleError('INVALID_OPTIONS', 'createRuntime needs `dir`, the data directory (e.g. ".spindle").', {
      details: { field: 'dir' },
    })
  }
  if (!options.model || typeof options.model.generate !== 'function') {
    throw new SpindleError('INVALID_OPTIONS', 'createRuntime needs `model`, a model adapter such as scriptedModel(script).', {
      details: { field: 'model' },
    })
  }
  const durability: Durability = options.durability ?? 'fsync'
  if (durability !== 'fsync' && durability !== 'process') {
    throw new SpindleError('INVALID_OPTIONS', `durability must be 'fsync' or 'process' (got ${JSON.stringify(durability)}).`, {
      details: { field: 'durability' },
    })
  }
  const paths = dataPaths(options.dir)
  const memory = options.store === 'memory'
  let transcripts: TranscriptStore
  let checkpoints: CheckpointStore
  let registry: Registry
  let ledger: Ledger
  let leases: LeaseStore
  let recovery: RecoveryStore
  // Bound late: stores report problems found while the runtime recovers.
  let runtime: RuntimeImpl | undefined
  if (memory) {
    transcripts = createMemoryTranscriptStore()
    checkpoints = createMemoryCheckpointStore()
    registry = openSqliteRegistry({ path: ':memory:', durability })
    ledger = openSqliteLedger({ path: ':memory:', durability })
    leases = openSqliteLeases({ path: ':memory:', durability })
    recovery = openSqliteRecovery({ path: ':memory:', durability })
  } else {
    assertDirectories(paths)
    assertRegistryKept(paths)
    fs.mkdirSync(paths.threads, { recursive: true })
    transcripts = createJsonlTranscriptStore({
      paths,
      durability,
      onJournalSkipped: ({ file, reason }) =>
        runtime?.reportProblem(
          new SpindleError('JOURNAL_UNREADABLE', `Skipped ${file} in the transcript journal: ${reason}. Threads open without whatever it holds; move it out of ${paths.journal} (if it is a journal spindle wrote, make it readable and open the directory again).`, {
            details: { file },
          }),
        ),
      onForeignTail: ({ threadId, file, bytes, savedTo }) =>
        runtime?.reportProblem(
          new SpindleError(
            'TRANSCRIPT_FOREIGN_TAIL',
            `${bytes} bytes this process did not write were found at the end of ${file} and moved to ${savedTo} before the next line: ` +
              'most likely the last line of a process that lost the thread to this one while it was stopped (its lease ran out). ' +
              'The transcript goes on unbroken; look at the saved bytes if no other process ran this thread.',
            { details: { threadId, file, bytes, savedTo } },
          ),
          threadId,
        ),
    })
    checkpoints = createFileCheckpointStore({ paths, durability, onFolderInvalid: (threadId, error) => runtime?.folderInvalid(threadId, error) })
    registry = openSqliteRegistry({ path: paths.registry, durability })
    ledger = openSqliteLedger({ path: paths.ledger, durability })
    leases = openSqliteLeases({ path: paths.leases, durability })
    recovery = openSqliteRecovery({ path: paths.recovery, durability })
  }
  try {
    runtime = new RuntimeImpl(options, durability, paths.root, transcripts, checkpoints, registry, ledger, leases, recovery)
  } catch (error) {
    transcripts.closeAll()
    registry.close()
    ledger.close()
    leases.close()
    recovery.close()
    throw error
  }
  if (options.recover !== false) {
    // Before any recovered thread can re-run the spawn_thread call that made one of them.
    runtime.dropUnbornAccounts()
    await runtime.recover()
    // After recovery took the dead owners' leases of the threads it carries on: what is left is few.
    runtime.dropUnbornLeases()
  }
  await runtime.checkRequests({ sweep: true })
  runtime.startPolling()
  runtime.startHeartbeat()
  runtime.resumePendingRecoveries()
  runtime.ready()
  return runtime
}

/**
 * A reason, message or `by` given to a decision: recorded in the transcript, so it must be text of
 * a sensible length.
 */
function assertText(value: unknown, field: string): void {
  if (value === undefined) return
  if (typeof value !== 'string' || value.length > 10_000) {
    throw new SpindleError('INVALID_OPTIONS', `${field} must be a string of at most 10,000 characters (got ${typeof value === 'string' ? `${value.length} characters` : typeof value}).`, {
      details: { field },
    })
  }
}

class RuntimeImpl implements Runtime {
  readonly dir: string
  lastRecovery: RecoveryReport = { resumed: [], settled: [], rebuilt: [], failed: [], elsewhere: [], restored: [], quarantined: [] }
  private readonly live = new Map<string, LiveThread>()
  private readonly commit: GroupCommit
  private readonly effects: ThreadEffects
  private readonly clock: Clock
  readonly config: Config
  private readonly hooks: CompiledHooks
  private readonly threadHooks = new Map<string, CompiledHooks>()
  /** Suspended threads this runtime watches for requests: id → pending approval request id. */
  private readonly suspended = new Map<string, string | null>()
  private poller: NodeJS.Timeout | null = null
  private polls = 0
  /** createRuntime has finished opening the directory. */
  private opened = false
  /** Rings of the request bell: which threads' directories have a new request file. */
  private readonly bell: BellReader
  /** Threads still to look in for request files written by hand, in this round of polls. */
  private scanQueue: string[] = []
  /** Threads recovery took on whose directory the read-ahead worker saw without a cancel file. */
  private noCancelAtRecovery = new Set<string>()
  private polling: Promise<RequestsReport> | null = null
  private closed = false
  private readonly orchestrator: Actor<typeof orchestratorMachine>
  private readonly lifecycleListeners = new Map<string, Set<(event: LifecycleEvent) => void>>()
  /** Threads waited on that are not live here: looked up in the registry every `waits.remotePollMs`. */
  private readonly remoteWatches = new Map<string, Set<() => void>>()
  /**
   * The wait-for graph: the `wait_threads` calls of this runtime's threads in progress, by waiting
   * thread. A wait that would close a cycle in it is refused (WAIT_CYCLE) instead of waiting out
   * its timeout. Each wait leaves it as it ends, however it ends.
   */
  private readonly waitingFor = new Map<string, Set<WaitInProgress>>()
  private remoteTimer: unknown = null
  private readonly toolNames: ReadonlySet<string>
  /** Live threads' parents (null: host code) and start order, for supervision groups. */
  private readonly groups = new Map<string, string | null>()
  private readonly startSeq = new Map<string, number>()
  /** spawn_thread calls under way, by parent: emptied as each returns (a cancel of the parent waits for them). */
  private readonly spawning = new Map<string, Set<Promise<LiveThread>>>()
  private seq = 0
  /** This process as a lease owner. */
  private readonly owner = { id: `${os.hostname()}:${process.pid}:${nanoid(8)}`, pid: process.pid, host: os.hostname() }
  /** Wall-clock time until which this process's leases are certainly its own (self-fencing). */
  private leaseValidUntil = 0
  /** The token of each lease this process holds (leases.db): what its registry writes are fenced with. */
  private readonly leaseTokens = new Map<string, number>()
  private heartbeat: NodeJS.Timeout | null = null
  /** Ledger keys known to have (or not have) an account: most threads never touch the ledger. */
  private readonly accountKnown = new Map<string, boolean>()
  /** Turns whose usage the ledger has, per thread: usage changes only with a reply. */
  private readonly recordedTurns = new Map<string, number>()
  /** Thread id → the ledger account it spends from: the first thread of its continuation chain. */
  private readonly budgetKeys = new Map<string, string>()
  /** Hand-offs under way, so that two model calls of one thread never start two successors. */
  private readonly handingOff = new Map<string, Promise<string | null>>()
  /** Recovery counts kept in the registry, and the suspects of a crash loop held back to run one at a time. */
  private readonly crashLoop: CrashLoopGuard

  constructor(
    private readonly options: RuntimeOptions,
    readonly durability: Durability,
    root: string,
    private readonly transcripts: TranscriptStore,
    private readonly checkpoints: CheckpointStore,
    private readonly registry: Registry,
    private readonly ledger: Ledger,
    private readonly leases: LeaseStore,
    private readonly recoveryStore: RecoveryStore,
  ) {
    this.dir = root
    this.clock = options.clock ?? systemClock
    this.bell = new BellReader(root, { onProblem: (problem) => this.report(problem) })
    const files = loadFileLayers(root, options.userConfig === undefined ? userConfigFile() : options.userConfig)
    this.config = mergeConfig(
      files.config,
      options.config === undefined ? undefined : validateLayer(options.config, 'createRuntime options.config'),
      validateLayer({ limits: options.defaultLimits, retry: options.retry, timeouts: options.timeouts }, 'createRuntime options'),
    )
    const hookSets: HookSet[] = []
    for (const { kind, file, layer } of files.layers) {
      if (layer.hooks?.length) hookSets.push({ layer: kind, source: file, hooks: layer.hooks })
    }
    const builtinHooks = systemDefaults().hooks
    if (builtinHooks.length) hookSets.push({ layer: 'builtin', source: 'config/defaults.yaml', hooks: builtinHooks })
    if (options.config?.hooks?.length) hookSets.push({ layer: 'project', source: 'createRuntime options.config', hooks: options.config.hooks })
    if (options.hooks?.length) hookSets.push({ layer: 'project', source: 'createRuntime options.hooks', hooks: options.hooks })
    this.hooks = compileHooks(hookSets, { onError: (problem) => this.report(new SpindleError('HOOK_FAILED', `${problem.source}: hook ${problem.hookId}: ${problem.message}`)) })
    this.crashLoop = new CrashLoopGuard(registry, this.config.supervision.maxRecoveries, (error, threadId) => this.report(error, threadId), {
      ms: this.config.supervision.aloneMs,
      clock: this.clock,
    })
    this.commit = new GroupCommit(
      { transcripts, checkpoints, registry },
      (threadId, error) => this.report(error, threadId),
      (error) => this.report(isStorageFailure(error) ? checkpointsFailing(this.dir, error, FAILED_ROUND_BACKOFF_MAX_MS) : error),
      // Until this process has held a lease, what it publishes (registry rows of settled threads
      // it found) is no thread's that another process runs.
      () => (this.leaseValidUntil === 0 ? null : this.fenced()),
      (threadId) => this.leaseTokens.get(threadId),
    )
    const tools = new Map<string, Tool>()
    const builtin = options.builtinTools === false ? [] : childTools({
      spawnChild: (parentId, key, spec) => this.spawnChild(parentId, key, spec),
      // A wait that cannot be recorded for want of storage parks its caller, as spawn_thread does.
      waitThreads: async (parentId, ids, waitOptions) => {
        try {
          return await this.childWait(parentId, ids, waitOptions)
        } catch (error) {
          this.parkForStorage(parentId, error)
          throw error
        }
      },
    })
    for (const tool of [...builtin, ...(options.tools ?? [])]) {
      if (tools.has(tool.name)) {
        const builtinName = builtin.some((b) => b.name === tool.name)
        throw new SpindleError('INVALID_OPTIONS', builtinName
          ? `A tool is named "${tool.name}", like spindle's built-in tool; rename it, or pass builtinTools: false.`
          : `Two tools are named "${tool.name}"; tool names must be unique.`, {
          details: { field: 'tools' },
        })
      }
      tools.set(tool.name, tool)
    }
    const host: EffectHost = {
      clock: this.clock,
      model: options.model,
      tools,
      toolDefinitions: [...tools.values()].map(toolDefinition),
      allowedTools: (id) => {
        const allowed = this.live.get(id)?.context().policy.tools
        return allowed ? new Set(allowed) : null
      },
      permissions: (id) => this.live.get(id)?.context().policy.permissions,
      modelTimeoutMs: this.config.timeouts.modelMs,
      toolTimeoutMs: this.config.timeouts.toolMs,
      // A suspect of a crash loop runs nothing before its turn comes (crashLoop.ts).
      checkpointed: (id) => {
        const turn = this.crashLoop.waitTurn(id)
        if (!turn) return this.commit.whenLogged()
        return turn.then(() => this.commit.whenLogged()).then(() => this.crashLoop.starting(id))
      },
      deliver: (id, event) => this.live.get(id)?.deliver(event) ?? false,
      messages: (id) => this.liveThread(id).messages(),
      directiveName: (id) => this.liveThread(id).directiveName(),
      judgeModelFailure: (id, error, at) => this.judgeModelFailure(id, error, at),
      decideLimit: (id, hit) => this.decideLimit(id, hit),
      hasToolIntent: (id, key) => this.live.get(id)?.hasToolIntent(key) ?? false,
      recordToolIntent: async (id, key, call) => {
        await this.crashLoop.waitTurn(id)
        this.liveThread(id).recordToolIntent(key, call)
        await this.commit.whenLogged()
        this.crashLoop.starting(id)
      },
      crash: (id, error) => {
        // Called from an effect's catch: whatever happens here must not escape as an unhandled
        // rejection, which would end the host process for one thread's trouble.
        try {
          this.crashed(id, error)
        } catch (failure) {
          if (!this.parkForStorage(id, failure)) this.report(failure, id)
        }
      },
      beforeModelCall: (id, at) => this.beforeModelCall(id, at),
      handOffOnContextLength: (id) => this.handOffOnContextLength(id),
      settleChildren: (id, reason, signal) => this.settleChildren(id, reason, signal),
    }
    this.toolNames = new Set(tools.keys())
    this.effects = createThreadEffects(host)
    this.orchestrator = createActor(orchestratorMachine, {
      id: 'orchestrator',
      systemId: 'orchestrator',
      ...(options.inspect ? { inspect: options.inspect } : {}),
      input: {
        defaultStrategy: this.config.supervision.strategy,
        intensity: { maxRestarts: this.config.supervision.maxRestarts, withinMs: this.config.supervision.withinMs },
      },
    })
    this.orchestrator.on('*', (emitted) => {
      try {
        this.carryOut(emitted as OrchestratorEmitted)
      } catch (error) {
        this.report(error)
      }
    })
    this.orchestrator.start()
  }

  async spawn(options: SpawnOptions): Promise<ThreadHandle> {
    this.assertOpen()
    validateSpawn(options)
    return this.spawnResolved(options)
  }

  private async spawnResolved(options: SpawnOptions, id?: string, task?: TaskInfo): Promise<LiveThread> {
    const { name, prompt, tools: allowedTools, permissions: ownPermissions, ...directiveLayer } = options.directive
    if (allowedTools !== undefined) {
      const unknown = allowedTools.filter((tool) => !this.toolNames.has(tool))
      if (!Array.isArray(allowedTools) || unknown.length > 0) {
        throw new SpindleError(
          'INVALID_OPTIONS',
          `directive "${name}": tools names ${unknown.map((t) => JSON.stringify(t)).join(', ')}, which this runtime does not have (it has ${[...this.toolNames].join(', ') || 'none'}).`,
          { details: { field: 'directive.tools' } },
        )
      }
    }
    if (ownPermissions !== undefined) {
      const checked = PermissionsSchema.safeParse(ownPermissions)
      if (!checked.success) {
        const issue = checked.error.issues[0]!
        throw new SpindleError('INVALID_OPTIONS', `directive "${name}": permissions${issue.path.length ? `.${issue.path.join('.')}` : ''}: ${issue.message}.`, {
          details: { field: 'directive.permissions' },
        })
      }
    }
    const fromDirective = validateLayer(directiveLayer, `directive "${name}"`)
    const fromSpawn = validateLayer(
      { limits: options.limits, retry: options.retry, escalation: options.escalation, hooks: options.hooks },
      'spawn',
    )
    const resolved = mergeConfig(this.config, fromDirective, fromSpawn)
    const dataHooks = [...(fromDirective.hooks ?? []), ...(fromSpawn.hooks ?? [])]
    const policy: ThreadPolicy = {
      retry: resolved.retry,
      escalation: resolved.escalation,
      hooks: dataHooks as ThreadPolicy['hooks'],
      ...(allowedTools !== undefined ? { tools: [...allowedTools] } : {}),
      ...(ownPermissions !== undefined ? { permissions: { ...ownPermissions } } : {}),
      supervision: {
        restart: options.restart ?? resolved.supervision.restart,
        childStrategy: options.childStrategy ?? resolved.supervision.strategy,
      },
    }
    // Compiling now refuses a bad `when` before anything is written.
    const hooks = dataHooks.length ? this.hooks.with([{ layer: 'directive', source: `directive "${name}"`, hooks: dataHooks }]) : this.hooks
    let limits = resolved.limits
    let depth = 0
    if (options.parentId !== undefined) {
      assertThreadId(options.parentId)
      ;({ limits, depth } = this.capByParent(options.parentId, limits))
      // A child never has a capability its parent lacks.
      const parentPermissions = (this.live.get(options.parentId)?.context() ?? this.storedContext(options.parentId))?.policy.permissions
      const capped = capPermissions(parentPermissions, policy.permissions)
      if (capped) policy.permissions = { ...capped }
    }
    const directive = { name, prompt }
    const threadId = id ?? newThreadId(directive.name)
    // The lease comes first: a runtime opening the directory drops a reservation that has neither
    // a registry row nor a live lease (a spawn killed before it returned), so this one must never
    // be without both.
    try {
      this.takeLease(threadId)
    } catch (error) {
      throw isStorageFailure(error) ? notCreated(threadId, error) : error
    }
    // Write-ahead: the budget is reserved before anything of the thread exists; a refusal
    // (BUDGET_EXCEEDED) leaves nothing behind.
    const explicit = (key: 'spend' | 'tokens'): boolean => fromSpawn.limits?.[key] !== undefined || fromDirective.limits?.[key] !== undefined
    try {
      limits = this.reserveBudget(threadId, options.parentId ?? null, limits, { spend: explicit('spend'), tokens: explicit('tokens') })
    } catch (error) {
      this.releaseLease(threadId)
      throw isStorageFailure(error) ? notCreated(threadId, error) : error
    }
    const input: ThreadInput = { threadId, directive, limits, policy, depth, ...(task ? { task } : {}) }
    try {
      return await this.startThread({ input, hooks, parentId: options.parentId ?? null, previousThreadId: null, messages: null })
    } catch (error) {
      this.releaseBudget(threadId, false)
      // Failed before its actor was adopted (its spawn entry could not be written): nothing else
      // gives its lease up.
      if (!this.live.has(threadId)) this.releaseLease(threadId)
      throw isStorageFailure(error) ? notCreated(threadId, error) : error
    }
  }

  // ── leases (leases.db): one process runs a thread ──────────────────────────────────────────

  private get leaseTtlMs(): number {
    return this.config.orphans.thresholdMs
  }

  /** Whether `lease` belongs to a process that is gone: expired, or a dead pid on this host. */
  private leaseIsStale(lease: Lease, now: number): boolean {
    if (lease.owner === this.owner.id) return false
    if (lease.expiresAt <= now) return true
    if (lease.host !== this.owner.host) return false
    return !pidAlive(lease.pid)
  }

  /** Takes a thread's lease, or says which live process holds it. */
  private tryLease(id: string): boolean {
    const now = Date.now()
    let taken = this.leases.acquire(id, this.owner, this.leaseTtlMs, now)
    if (!taken.acquired && this.leaseIsStale(taken.lease, now)) {
      // The holder died on this host before its lease ran out: no need to wait for the expiry.
      // Only that lease is removed: another process may have taken the thread since we read it.
      if (this.leases.removeIf(taken.lease)) taken = this.leases.acquire(id, this.owner, this.leaseTtlMs, now)
    }
    if (taken.acquired && this.leaseValidUntil < now + this.leaseTtlMs - this.heartbeatMs) this.leaseValidUntil = now + this.leaseTtlMs - this.heartbeatMs
    if (taken.acquired && this.claimTokens(new Map([[id, taken.lease.token]])).has(id)) return false
    return taken.acquired
  }

  /**
   * Threads the registry calls suspended that moved on: a process killed right after an approval,
   * a resume or a cancel of a suspended thread had recorded the decision (the transcript is the
   * truth) but not committed the status it led to. Their state.json says another status (killed
   * between state.json and the registry), or their transcript holds more than state.json covers
   * (killed before state.json). Recovery replays them like running ones; one still suspended after
   * its tail is settled as it was. The others are taken under watch here, as the sweep would, so
   * each state.json is read once.
   */
  private suspendedMovedOn(): Array<{ id: string; status: ThreadStatus; parentId: string | null }> {
    if (this.options.store === 'memory') return []
    const paths = dataPaths(this.dir)
    const moved: Array<{ id: string; status: ThreadStatus; parentId: string | null }> = []
    for (const record of this.registry.statuses(['suspended'])) {
      if (this.live.has(record.id)) continue
      let envelope: StateEnvelope | null
      try {
        envelope = this.checkpoints.load(record.id)
      } catch {
        // Damaged: recovery rebuilds it from the transcript (or says why it cannot).
        this.suspended.delete(record.id)
        moved.push(record)
        continue
      }
      let size: number
      try {
        size = fs.statSync(threadFile(paths, record.id, TRANSCRIPT_FILE)).size
      } catch {
        continue
      }
      if (!envelope || envelope.status !== 'suspended' || size > envelope.transcript.bytes) {
        // Watched here as suspended until now (another runtime woke it, then died): no longer.
        this.suspended.delete(record.id)
        moved.push(record)
        continue
      }
      if (this.suspended.has(record.id)) continue
      const context = (envelope.snapshot as { context: ThreadContext }).context
      this.watchSuspended(paths, record.id, context)
    }
    return moved
  }

  /** Takes the leases of many threads in one transaction; a lease held by a dead local process is taken too. */
  private leaseAll(ids: string[]): Set<string> {
    if (ids.length === 0) return new Set()
    const now = Date.now()
    // One liveness check per owner, not per thread: a dead process held all of its threads.
    const verdicts = new Map<string, boolean>()
    const stale = (lease: Lease): boolean => {
      let verdict = verdicts.get(lease.owner)
      if (verdict === undefined) verdicts.set(lease.owner, (verdict = this.leaseIsStale({ ...lease, expiresAt: Number.MAX_SAFE_INTEGER }, now)))
      return verdict
    }
    const { acquired, tokens } = this.leases.acquireMany(ids, this.owner, this.leaseTtlMs, now, stale)
    const taken = new Set(acquired)
    if (taken.size > 0) this.leaseValidUntil = Math.max(this.leaseValidUntil, now + this.leaseTtlMs - this.heartbeatMs)
    for (const id of this.claimTokens(tokens)) taken.delete(id)
    return taken
  }

  /**
   * Remembers the lease tokens this process holds threads with, and claims the threads that
   * changed hands in the registry with them, before anything of theirs is read or run: a process
   * that held one before and stopped between its lease check and its registry write publishes with
   * an older token from then on, and is refused (see GroupCommit).
   *
   * A thread already claimed with the token leases.db gave, or a larger one, is one of two cases.
   * leases.db handed the token out again (it is not fsynced, so a power loss can take its last
   * commits; or it was deleted): this process still holds the lease, raises its token past the
   * claim and claims that. Or this process was stopped between taking the lease and claiming it,
   * and another took the thread since: it no longer holds the lease. Returns those threads: lost.
   */
  private claimTokens(tokens: ReadonlyMap<string, number>): Set<string> {
    const lost = new Set<string>()
    const claims: Array<{ id: string; token: number }> = []
    for (const [id, token] of tokens) {
      if (this.leaseTokens.get(id) === token) continue
      this.leaseTokens.set(id, token)
      claims.push({ id, token })
    }
    try {
      const raised: Array<{ id: string; token: number }> = []
      for (const ahead of this.registry.claim(claims)) {
        const token = ahead.token + 1
        if (this.leases.raiseToken(ahead.id, this.owner.id, token)) {
          this.leaseTokens.set(ahead.id, token)
          raised.push({ id: ahead.id, token })
        } else {
          this.leaseTokens.delete(ahead.id)
          lost.add(ahead.id)
        }
      }
      this.registry.claim(raised)
    } catch (error) {
      // Only the fence is lost: the threads still run, and are claimed at their next change of hands.
      this.report(error)
    }
    return lost
  }

  private takeLease(id: string): void {
    if (this.tryLease(id)) return
    const lease = this.leases.get(id)
    throw new SpindleError(
      'THREAD_LEASED',
      `Thread ${id} is run by another runtime process (${lease?.owner ?? 'unknown'}, pid ${lease?.pid ?? '?'}, lease until ` +
        `${lease ? new Date(lease.expiresAt).toISOString() : '?'}). Act on it there, or wait until that process stops and its lease expires.`,
      { details: { threadId: id, owner: lease?.owner, pid: lease?.pid } },
    )
  }

  private releaseLease(id: string): void {
    // What it staged while it held the lease keeps that token (GroupCommit.stageRegistry).
    this.leaseTokens.delete(id)
    try {
      this.leases.release(id, this.owner.id)
      this.unreleased.delete(id)
    } catch (error) {
      // Given up again at the next heartbeat that renews: a lease left behind would make the
      // thread look held by this process until it exits.
      if (!this.unreleased.has(id)) this.report(error, id)
      this.unreleased.add(id)
    }
  }

  /** Leases whose release failed (a full disk), tried again at each heartbeat. */
  private readonly unreleased = new Set<string>()

  private get heartbeatMs(): number {
    return this.config.orphans.heartbeatMs ?? Math.max(1, Math.floor(this.config.orphans.thresholdMs / 3))
  }

  /** Why this process may not write for its threads any more: its leases ran out unrenewed. */
  private fenced(): SpindleError | null {
    if (this.options.store === 'memory' || this.closed) return null
    if (Date.now() < this.leaseValidUntil) return null
    return new SpindleError(
      'LEASE_LOST',
      `This runtime could not renew its thread leases in time (valid until ${new Date(this.leaseValidUntil).toISOString()}); ` +
        'another process may have taken its threads over, so it stops writing them. Check the data directory with `spindle doctor`.',
      // Renewals that failed for want of storage: its threads are parked, not let go (liveThread.ts).
      this.renewFailure !== null && isStorageFailure(this.renewFailure) ? { cause: this.renewFailure } : {},
    )
  }

  /** Why the last heartbeat could not renew the leases; null once one did. */
  private renewFailure: unknown = null

  /** @internal Renews this process's leases and takes over orphans, every heartbeat. */
  startHeartbeat(): void {
    if (this.options.store === 'memory') return
    this.heartbeat = setInterval(() => this.beat(), this.heartbeatMs)
    this.heartbeat.unref()
  }

  private beat(): void {
    if (this.closed) return
    const now = Date.now()
    const ids = [...this.live.keys()]
    let lost: string[] = []
    try {
      lost = this.leases.renew(this.owner.id, ids, this.leaseTtlMs, now)
      this.leaseValidUntil = now + this.leaseTtlMs - this.heartbeatMs
      this.renewFailure = null
      for (const id of this.unreleased) if (!this.live.has(id)) this.releaseLease(id)
    } catch (error) {
      // Told once per run of failures (a full disk fails every heartbeat until it is freed).
      if (this.renewFailure === null) this.report(error)
      this.renewFailure = error
      return
    }
    for (const id of lost) {
      const thread = this.live.get(id)
      if (!thread) continue
      this.report(new SpindleError('LEASE_LOST', `Thread ${id} was taken over by another runtime process; this one stops running it.`, { details: { threadId: id } }), id)
      thread.detach(new SpindleError('LEASE_LOST', `Thread ${id} is now run by another runtime process.`, { details: { threadId: id } }))
    }
    // Orphans: unfinished threads no live process holds. Detection runs all the time, not only at start-up.
    this.takeOrphans(now)
  }

  /** Takes over the unfinished threads no live process holds, if `orphans.autoTakeover`. */
  private takeOrphans(now: number): void {
    if (!this.config.orphans.autoTakeover || this.closed) return
    const orphans = this.orphans(now)
    if (orphans.length > 0) {
      this.recover().then(
        (report) => {
          for (const id of report.resumed) this.report(new SpindleError('THREAD_LEASED', `Took over orphaned thread ${id}.`, { details: { threadId: id } }), id)
        },
        (error: unknown) => this.report(error),
      )
    }
  }

  /** Created or running threads not run here whose lease is missing, expired, or held by a dead process. */
  private orphans(now: number): string[] {
    const found: string[] = []
    for (const record of this.registry.activeStatuses()) {
      if (this.live.has(record.id)) continue
      const lease = this.leases.get(record.id)
      if (!lease || this.leaseIsStale(lease, now)) found.push(record.id)
    }
    return found
  }

  // ── budgets (ledger.db) ────────────────────────────────────────────────────────────────────

  /** The ledger account thread `id` spends from: its continuation chain's first thread. */
  private budgetKey(id: string, continuation = true): string {
    const cached = this.budgetKeys.get(id)
    if (cached) return cached
    let key = id
    try {
      // Most threads have their own account; only a continuation looks up its chain.
      if (continuation && !this.hasAccount(id)) key = this.registry.chain(id)[0]?.id ?? id
    } catch (error) {
      this.report(error, id)
    }
    this.budgetKeys.set(id, key)
    return key
  }

  private hasAccount(key: string): boolean {
    let known = this.accountKnown.get(key)
    if (known === undefined) {
      known = this.ledger.get(key) !== null
      this.accountKnown.set(key, known)
    }
    return known
  }

  /**
   * Opens a root's account, or reserves a child's budget from its parent's remainder: the child's
   * own spend and token limits when it names them, else `children.budgetShare` of what the parent
   * has left. Returns the limits the thread runs under (a child's are its reservation).
   */
  private reserveBudget(id: string, parentId: string | null, limits: Limits, explicit: { spend: boolean; tokens: boolean }): Limits {
    const at = this.clock.now()
    if (parentId === null) {
      // An unlimited root needs no account until it has children (they open it then).
      if (limits.spend !== null || limits.tokens !== null) {
        this.ledger.openRoot(id, { spend: limits.spend, tokens: limits.tokens }, at)
        this.accountKnown.set(id, true)
      } else this.accountKnown.set(id, false)
      return limits
    }
    const parentKey = this.budgetKey(parentId)
    let parent = this.ledger.get(parentKey)
    if (!parent) {
      // A parent from before the ledger (or whose account was lost): its limits open one now.
      const ctx = this.live.get(parentId)?.context() ?? this.storedContext(parentId)
      parent = this.ledger.openRoot(parentKey, { spend: ctx?.limits.spend ?? null, tokens: ctx?.limits.tokens ?? null }, at)
      this.accountKnown.set(parentKey, true)
    }
    const share = this.config.children.budgetShare
    const ask = (key: 'spend' | 'tokens'): number | null => {
      if (explicit[key]) return limits[key]
      const available = parent!.available[key]
      if (available === null) return limits[key]
      const part = available * share
      return key === 'tokens' ? Math.floor(part) : part
    }
    const account = this.ledger.reserve(id, parentKey, { spend: ask('spend'), tokens: ask('tokens') }, at)
    this.budgetKeys.set(id, id)
    this.accountKnown.set(id, true)
    return { ...limits, spend: account.limit.spend, tokens: account.limit.tokens }
  }

  /**
   * @internal Returns to their parents the budgets of spawns that never returned: a process killed
   * between a child's reservation (write-ahead) and its registry row left an account no thread
   * will ever release. An account still being spawned by a live process (its lease is live) is
   * left alone.
   */
  dropUnbornAccounts(): void {
    try {
      const now = Date.now()
      for (const id of this.ledger.untouched()) {
        if (this.live.has(id) || this.registry.get(id)) continue
        const lease = this.leases.get(id)
        if (lease && !this.leaseIsStale(lease, now)) continue
        if (this.ledger.dropUnborn(id)) this.accountKnown.delete(id)
      }
    } catch (error) {
      this.report(error)
    }
  }

  /**
   * @internal Removes the stale leases of threads that have no registry row, or a row of a thread
   * that is not running: a process killed between taking a new thread's lease and committing its
   * row, or one that could not release a finished thread's lease (a full disk), left a lease no
   * runtime would ever take over or release. A lease still used by a live process is not stale
   * and stays.
   */
  dropUnbornLeases(): void {
    try {
      const now = Date.now()
      const verdicts = new Map<string, boolean>()
      for (const lease of this.leases.heldByOthers(this.owner.id)) {
        // One pid check per owner: a dead process held all of its leases.
        let dead = verdicts.get(lease.owner)
        if (dead === undefined) verdicts.set(lease.owner, (dead = this.leaseIsStale({ ...lease, expiresAt: Number.MAX_SAFE_INTEGER }, now)))
        if (!dead && lease.expiresAt > now) continue
        if (this.live.has(lease.threadId)) continue
        const row = this.registry.get(lease.threadId)
        if (row && isActive(row.status)) continue
        this.leases.removeIf(lease)
      }
    } catch (error) {
      this.report(error)
    }
  }

  /** Raises the ledger account with new spend or token limits; `onRefusal` runs before a refusal is thrown. */
  private raiseBudget(id: string, limits: Partial<Limits>, onRefusal?: () => void): void {
    const raise: Partial<BudgetAmounts> = {}
    if (limits.spend !== undefined) raise.spend = limits.spend
    if (limits.tokens !== undefined) raise.tokens = limits.tokens
    if (Object.keys(raise).length === 0) return
    try {
      if (this.hasAccount(this.budgetKey(id))) this.ledger.raise(this.budgetKey(id), raise, this.clock.now())
    } catch (error) {
      onRefusal?.()
      throw error
    }
  }

  private releaseBudget(id: string, continuation = true): void {
    this.recordedTurns.delete(id)
    try {
      const key = this.budgetKey(id, continuation)
      if (this.hasAccount(key)) this.ledger.release(key, this.clock.now())
    } catch (error) {
      this.report(error, id)
    }
  }

  /**
   * Brings the ledger up to the thread's recorded usage. The delta is computed from the ledger
   * itself, so running it twice (or after a crash between the transcript and the ledger) counts
   * nothing twice and loses nothing.
   */
  private recordUsage(id: string, usage: ThreadContext['usage'], continuation = true): void {
    if (this.recordedTurns.get(id) === usage.turns) return
    // Nothing spent yet (a thread recovered before its first reply): nothing the ledger could lack,
    // and no need to look its account up.
    if (usage.spend === 0 && usage.inputTokens === 0 && usage.outputTokens === 0) return
    try {
      const key = this.budgetKey(id, continuation)
      if (!this.hasAccount(key)) return
      this.recordedTurns.set(id, usage.turns)
      const account = this.ledger.get(key)
      if (!account) return
      const spend = usage.spend - account.ownSpent.spend
      const tokens = usage.inputTokens + usage.outputTokens - account.ownSpent.tokens
      if (spend > 1e-12 || tokens > 0) this.ledger.record(key, { spend: Math.max(0, spend), tokens: Math.max(0, tokens) }, this.clock.now())
    } catch (error) {
      this.report(error, id)
    }
  }

  /** The tree's budget, checked before each model call: a thread whose share is gone suspends. */
  private budgetExhausted(id: string): { amount: 'spend' | 'tokens'; used: number; max: number } | null {
    let account
    try {
      const key = this.budgetKey(id)
      if (!this.hasAccount(key)) return null
      account = this.ledger.get(key)
    } catch (error) {
      this.report(error, id)
      return null
    }
    if (!account) return null
    for (const amount of ['spend', 'tokens'] as const) {
      const max = account.limit[amount]
      const available = account.available[amount]
      if (max !== null && available !== null && available <= 1e-9) {
        return { amount, used: account.spent[amount] + account.reserved[amount], max }
      }
    }
    return null
  }

  /** A thread suspended for its budget: its parent's transcript says so, host code is told. */
  private budgetSuspended(id: string, context: ThreadContext): void {
    const hit = context.budgetHit
    if (!hit) return
    const parentId = this.registry.get(id)?.parentId ?? null
    if (parentId) this.live.get(parentId)?.note('child_budget_exhausted', { at: this.clock.now(), childId: id, ...hit })
    this.emitLifecycle({ type: 'budget_exhausted', at: this.clock.now(), threadId: id, parentId, ...hit })
  }

  /**
   * Writes a new thread's first transcript entry, starts its actor and registers it; resolves once
   * all of that is durable. START follows on the next turn of the event loop.
   */
  private async startThread(init: {
    input: ThreadInput
    hooks: CompiledHooks
    parentId: string | null
    previousThreadId: string | null
    /** A continuation's rebuilt history (recorded in its spawn entry); null: the directive prompt. */
    messages: Message[] | null
  }): Promise<LiveThread> {
    const { input } = init
    const id = input.threadId
    this.takeLease(id)
    if (init.hooks !== this.hooks) this.threadHooks.set(id, init.hooks)
    this.transcripts.open(id)
    this.transcripts.append(id, SPAWN_ENTRY, {
      input,
      parentId: init.parentId,
      ...(init.previousThreadId ? { previousThreadId: init.previousThreadId } : {}),
      ...(init.messages ? { messages: init.messages } : {}),
    })
    const thread = this.adopt(id, {
      messages: init.messages ? [...init.messages] : [{ role: 'user', content: input.directive.prompt }],
      seeded: init.messages !== null,
    })
    thread.start(threadMachine, { input })
    this.supervise(id, init.parentId)
    // The row commits in the round that makes the first state.json durable: a thread exists once
    // it is registered, and a registered thread always has files. Files without a row are a spawn
    // that never returned; recovery leaves them alone.
    this.commit.stageRegistration({
      id,
      directiveName: input.directive.name,
      directive: input.directive,
      parentId: init.parentId,
      previousThreadId: init.previousThreadId,
      nonce: newNonce(),
      createdAt: this.clock.now(),
    })
    try {
      await this.commit.whenDurable()
    } catch (error) {
      // Not created after all (a full disk, say): the caller is told so, so its row is withdrawn
      // before a later round could write it, and it stops here. Files it left are a spawn that
      // never returned, which recovery leaves alone and `spindle doctor` lists.
      this.commit.withdrawRegistration(id)
      this.commit.discard(id)
      thread.detach(isSpindleError(error) ? error : notCreated(id, error))
      throw error
    }
    // START comes on the next turn of the event loop, after the caller's `await spawn(...)`
    // continuation has run: a subscriber attached right away sees every transition. A crash before
    // it leaves a durable `created` thread, which recovery starts.
    setImmediate(() => thread.deliver({ type: 'START', at: this.clock.now() }))
    return thread
  }

  /** `spawn_thread`: a child whose id comes from the call's idempotency key, so a re-run finds it. */
  private async spawnChild(
    parentId: string,
    key: string,
    spec: z.infer<typeof SpawnThreadInput>,
  ): Promise<{ threadId: string; status: string; limits: unknown; existing: boolean }> {
    const id = childThreadId(spec.name, key)
    const existing = this.registry.get(id)
    if (existing) {
      const limits = this.live.get(id)?.context().limits ?? this.storedContext(id)?.limits ?? null
      return { threadId: id, status: existing.status, limits, existing: true }
    }
    // A child may use no tool its parent may not.
    const parentTools = this.live.get(parentId)?.context().policy.tools
    const spawning = this.spawnResolved(
      {
        directive: { name: spec.name, prompt: spec.prompt, ...(parentTools ? { tools: parentTools } : {}) },
        ...(spec.limits ? { limits: spec.limits } : {}),
        parentId,
      },
      id,
    )
    // A cancel of the parent that arrives now must wait for this child: it is not registered yet.
    let inFlight = this.spawning.get(parentId)
    if (!inFlight) this.spawning.set(parentId, (inFlight = new Set()))
    inFlight.add(spawning)
    let thread: LiveThread
    try {
      thread = await spawning
    } catch (error) {
      // The child could not be made durable for want of storage: not the model's to handle (an
      // error result would cost it a turn, and be as hard to record). The parent is parked, which
      // stops this call before its result is delivered; carried on, it runs spawn_thread again.
      this.parkForStorage(parentId, error)
      throw error
    } finally {
      inFlight.delete(spawning)
      if (inFlight.size === 0 && this.spawning.get(parentId) === inFlight) this.spawning.delete(parentId)
    }
    return { threadId: id, status: thread.status, limits: thread.context().limits, existing: false }
  }

  /** A child's limits: each the min of its own and its parent's; depth one less; the parent's spawns counted. */
  private capByParent(parentId: string, own: Limits): { limits: Limits; depth: number } {
    const record = this.registry.get(parentId)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `Parent thread ${parentId} is not in ${this.dir}.`, { details: { threadId: parentId } })
    }
    const parent = this.live.get(parentId)?.context() ?? this.storedContext(parentId)
    if (!parent) {
      throw new SpindleError('SPAWN_REFUSED', `Parent thread ${parentId} has no readable state; a child cannot be capped by it.`, {
        details: { threadId: parentId },
      })
    }
    const min = (a: number | null, b: number | null): number | null => (a === null ? b : b === null ? a : Math.min(a, b))
    const limits = { ...own }
    for (const key of ['turns', 'tokens', 'spend', 'durationMs', 'spawns'] as const) limits[key] = min(own[key], parent.limits[key])
    const parentDepth = parent.limits.depth
    if (parentDepth !== null) {
      const remaining = parentDepth - 1
      if (remaining < 0) {
        throw new SpindleError('SPAWN_REFUSED', `Thread ${parentId} may not start children: its depth limit is ${parentDepth}.`, {
          details: { threadId: parentId, limit: 'depth' },
        })
      }
      limits.depth = min(own.depth, remaining)
    }
    const maxSpawns = parent.limits.spawns
    if (maxSpawns !== null) {
      const children = this.registry.listChildren(parentId).length
      if (children >= maxSpawns) {
        throw new SpindleError('SPAWN_REFUSED', `Thread ${parentId} has started ${children} children, its spawns limit is ${maxSpawns}.`, {
          details: { threadId: parentId, limit: 'spawns' },
        })
      }
    }
    return { limits, depth: parent.depth + 1 }
  }

  private storedContext(id: string): ThreadContext | null {
    try {
      return (this.checkpoints.load(id)?.snapshot as { context?: ThreadContext } | undefined)?.context ?? null
    } catch {
      return null
    }
  }

  get(id: string): ThreadHandle {
    assertThreadId(id)
    const live = this.live.get(id)
    if (live) return live
    const record = this.registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir}. List threads with rt.list() or \`spindle ls\`.`, {
        details: { threadId: id },
      })
    }
    let envelope: StateEnvelope | null = null
    try {
      envelope = this.checkpoints.load(id)
    } catch (error) {
      this.report(error, id)
    }
    const context = (envelope?.snapshot as { context?: ThreadContext } | undefined)?.context
    const value = (envelope?.snapshot as { value?: unknown } | undefined)?.value
    const view = context && value !== undefined ? viewOf(id, { value: value as never, context }) : null
    const stopped = !isActive(record.status)
    let outcome: ThreadOutcome | null = null
    if (stopped && context) outcome = outcomeOf(record.status as ThreadOutcome['status'], context)
    else if (stopped) {
      outcome = {
        status: record.status as ThreadOutcome['status'],
        cost: record.cost ?? { turns: 0, inputTokens: 0, outputTokens: 0, spend: 0 },
        ...(typeof record.result === 'string' ? { result: record.result } : {}),
        ...(record.error ? { error: record.error } : {}),
      }
    }
    return new StoredThread(id, record.status, view, outcome)
  }

  list(filter?: { status?: ThreadStatus | ThreadStatus[]; limit?: number }): ThreadRecord[] {
    this.assertOpen()
    return this.registry.list(filter)
  }

  active(): ThreadHandle[] {
    return [...this.live.values()]
  }

  stats(): CommitStats & { live: number } {
    return { ...this.commit.stats, live: this.live.size }
  }

  async recover(): Promise<RecoveryReport> {
    this.assertOpen()
    const report: RecoveryReport = { resumed: [], settled: [], rebuilt: [], failed: [], elsewhere: [], restored: [], quarantined: [] }
    const candidates = [...this.registry.activeStatuses(), ...this.suspendedMovedOn()].filter((record) => !this.live.has(record.id))
    // Thousands of threads: their files are read on another core while this one restores actors.
    // The worker boots while the leases are taken, and reads only once they are ours: until then
    // another process may still be appending to them.
    const reader = this.options.store !== 'memory' && candidates.length >= PREFETCH_FROM ? this.bootReader() : null
    const leased = this.leaseAll(candidates.map((r) => r.id))
    const ours = candidates.filter((r) => leased.has(r.id)).map((r) => r.id)
    const prefetch = reader && ours.length >= PREFETCH_FROM ? reader.read(ours) : null
    if (reader && !prefetch) void reader.cancel() // it exits on its own; nothing waits for that
    const progress = { total: candidates.length, done: 0, spend: 0, lastAt: 0 }
    // The loop holds the event loop; a host shows progress from these events (synchronous writes).
    const tell = (final: boolean): void => {
      const now = performance.now()
      if (!final && now - progress.lastAt < RECOVERY_PROGRESS_EVERY_MS) return
      progress.lastAt = now
      this.emitLifecycle({
        type: 'recovery_progress',
        at: this.clock.now(),
        done: progress.done,
        total: progress.total,
        resumed: report.resumed.length,
        settled: report.settled.length,
        rebuilt: report.rebuilt.length,
        failed: report.failed.length,
        elsewhere: report.elsewhere.length,
        spend: progress.spend,
      })
    }
    if (candidates.length > 0) tell(true)
    try {
      this.crashLoop.begin()
      for (const record of candidates) {
        progress.done++
        if (!leased.has(record.id)) {
          report.elsewhere.push(record.id)
        } else {
          try {
            const read = prefetch?.take(record.id)
            progress.spend += this.rehydrate(record, report, read)
            if (read?.watched === false) this.noCancelAtRecovery.add(record.id)
          } catch (error) {
            this.markUnrecoverable(record.id, error, report)
          }
        }
        tell(progress.done === progress.total)
      }
    } finally {
      // Before this turn of the event loop ends: no recovered thread's effect has run yet.
      this.crashLoop.flush()
      await prefetch?.close()
    }
    // Journals left by dead processes go once every thread they name holds their lines.
    try {
      await this.transcripts.settleJournals?.((id) => {
        // A stopped thread (terminal) is opened by no runtime: its lines go back now. A suspended
        // one gets them when it is approved or resumed; an active one when it is recovered.
        const record = this.registry.get(id)
        return record !== null && !this.live.has(id) && !isActive(record.status) && record.status !== 'suspended'
      })
    } catch (error) {
      this.report(error)
    }
    // Settled and failed threads changed stored status: make that durable before reporting it.
    // Resumed threads need no wait here; their first effect waits for their transcript anyway.
    if (report.settled.length + report.failed.length + report.rebuilt.length > 0) await this.commit.whenDurable()
    // A wait that looked these up while recovery ran read their old rows: it need not poll for them.
    for (const id of [...report.settled, ...report.failed.map((f) => f.threadId)]) this.wakeWatchers(id)
    this.lastRecovery = report
    return report
  }

  /** The recovery's read-ahead worker, or null (then the stores read every file) if none can start. */
  private bootReader(): ThreadFileReader | null {
    try {
      return bootThreadFileReader(dataPaths(this.dir).threads, { watchFile: CANCEL_FILE })
    } catch (error) {
      this.report(error)
      return null
    }
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.poller) clearInterval(this.poller)
    if (this.heartbeat) clearInterval(this.heartbeat)
    for (const handle of this.recoveryTimers) this.clock.clearTimeout(handle)
    for (const episode of this.parkedThreads.values()) if (episode.timer !== null) this.clock.clearTimeout(episode.timer)
    this.parkedThreads.clear()
    if (this.remoteTimer !== null) this.clock.clearTimeout(this.remoteTimer)
    this.orchestrator.send({ type: 'CLOSE' })
    await this.polling?.catch(() => {})
    const reason = new SpindleError('RUNTIME_CLOSED', 'The runtime was closed; the thread stays checkpointed and resumes when a runtime opens this directory again.')
    this.crashLoop.close(this.live.keys())
    for (const thread of [...this.live.values()]) thread.detach(reason)
    // Detaching aborted every wait; none of them may outlive the runtime in its graph.
    this.waitingFor.clear()
    try {
      this.leases.endWaitsOf(this.owner.id)
    } catch (error) {
      // Its rows stop counting once its leases are gone or taken over.
      this.report(error)
    }
    try {
      await this.commit.close()
    } finally {
      this.transcripts.closeAll()
      this.registry.close()
      this.ledger.close()
      this.leases.close()
      this.recoveryStore.close()
    }
  }

  // ── supervision and lifecycle ──────────────────────────────────────────────────────────────

  on<T extends LifecycleEventType | '*'>(type: T, listener: (event: any) => void): () => void {
    let set = this.lifecycleListeners.get(type)
    if (!set) this.lifecycleListeners.set(type, (set = new Set()))
    set.add(listener)
    return () => set.delete(listener)
  }

  /** @internal */
  emitLifecycle(event: LifecycleEvent): void {
    const targets = [this.options.onLifecycle, ...(this.lifecycleListeners.get(event.type) ?? []), ...(this.lifecycleListeners.get('*') ?? [])]
    for (const listener of targets) {
      if (!listener) continue
      try {
        listener(event)
      } catch (error) {
        // A failing listener is the host's problem, reported; it must not stop the orchestrator.
        this.report(error)
      }
    }
  }

  /** @internal Recovery is over: the orchestrator is ready and host code is told. */
  ready(): void {
    this.opened = true
    this.orchestrator.send({ type: 'READY' })
    this.emitLifecycle({ type: 'runtime_ready', at: this.clock.now(), recovery: this.lastRecovery })
  }

  /** Supervision bookkeeping of a live thread: its group and start order (the orchestrator keeps no copy). */
  private supervise(id: string, parentId: string | null): void {
    this.groups.set(id, parentId)
    if (!this.startSeq.has(id)) this.startSeq.set(id, ++this.seq)
  }

  private supervised(id: string): SupervisedThread | undefined {
    const thread = this.live.get(id)
    if (!thread || thread.stopped) return undefined
    return {
      id,
      group: this.groups.get(id) ?? 'root',
      restart: thread.context().policy.supervision?.restart ?? this.config.supervision.restart,
      seq: this.startSeq.get(id) ?? 0,
    }
  }

  /** An exception escaped an effect of thread `id`: the orchestrator decides. */
  private crashed(id: string, error: unknown): void {
    const thread = this.live.get(id)
    if (!thread || thread.stopped) {
      this.report(error, id)
      return
    }
    // Parked, or failing for want of storage: not the thread's fault, so not a crash for its
    // supervisor (whose restarts would count against it) and no FAIL (which could not be written).
    if (thread.parked) return
    if (isStorageFailure(error)) {
      this.storageFailed(thread, error)
      return
    }
    if (isSpindleError(error) && DAMAGED_FILES.has(error.code)) {
      // Not a crash to restart: the same damage would be read again, and each restart would count
      // against its group's restart intensity.
      this.report(error, id)
      this.endDamaged(id, thread, error)
      return
    }
    const described = describeError(error)
    const code = described.code === 'Error' ? 'THREAD_CRASHED' : described.code
    this.report(error, id)
    thread.note('thread_crashed', { at: this.clock.now(), error: { code, message: described.message }, pid: process.pid })
    const me = this.supervised(id)
    const group = this.groups.get(id) ?? null
    const siblings: SupervisedThread[] = []
    for (const [other, parent] of this.groups) {
      if (other === id || parent !== group) continue
      const sibling = this.supervised(other)
      if (sibling) siblings.push(sibling)
    }
    const strategy = group === null ? undefined : (this.live.get(group)?.context() ?? this.storedContext(group))?.policy.supervision?.childStrategy
    this.orchestrator.send({
      type: 'THREAD_CRASHED',
      id,
      at: this.clock.now(),
      error: { code, message: described.message },
      thread: me ? { ...me, group: group ?? 'root' } : undefined,
      siblings: siblings.map((t) => ({ ...t, group: group ?? 'root' })),
      ...(strategy ? { strategy } : {}),
    })
  }

  /** Carries out what the orchestrator decided. */
  private carryOut(emitted: OrchestratorEmitted): void {
    const at = this.clock.now()
    switch (emitted.type) {
      case 'crashed':
        this.emitLifecycle({ type: 'thread_crashed', at, threadId: emitted.id, error: emitted.error })
        return
      case 'restart':
        for (const id of emitted.ids) {
          const thread = this.live.get(id)
          if (!thread || thread.stopped) continue
          thread.note('thread_restarted', { at, crashed: emitted.crashed, restartsInWindow: emitted.restartsInWindow })
          if (thread.restart(threadMachine)) {
            this.emitLifecycle({ type: 'thread_restarted', at, threadId: id, crashed: emitted.crashed, restartsInWindow: emitted.restartsInWindow })
          }
        }
        return
      case 'stop':
        for (const id of emitted.ids) {
          this.cancelAs(id, emitted.reason, 'supervisor').catch((error: unknown) => this.report(error, id))
        }
        return
      case 'give_up':
        for (const id of emitted.ids) {
          const thread = this.live.get(id)
          if (!thread || thread.stopped) continue
          thread.deliver({ type: 'FAIL', at, error: { code: 'SUPERVISION_GAVE_UP', message: emitted.report } })
        }
        this.emitLifecycle({ type: 'supervision_gave_up', at, threadIds: emitted.ids, crashed: emitted.crashed, report: emitted.report })
        return
    }
  }

  // ── children: waves, cancel cascade ────────────────────────────────────────────────────────

  /**
   * `wait_threads`: refused for the caller itself or its ancestors, and when it would close a
   * cycle of waits (each could only time out), and timed from when the call began — `lastAt` of
   * the caller, the event that started this tool step, kept in its checkpoint — so a wait run
   * again after a crash or a kill -9 gets what remained of its timeout instead of all of it again.
   * A wait run again after a crash comes through here too, so it is back in the wait-for graph.
   */
  private childWait(parentId: string, ids: string[], options: WaitOptions): Promise<WaitReport> {
    assertWaitCanEnd(parentId, ids, (id) => {
      const record = this.registry.get(id)
      return record ? { chain: this.registry.chain(id).map((r) => r.id), parentId: record.parentId ?? null } : null
    })
    const open = new Set(ids)
    const wait: WaitInProgress = { open, failFast: options.failFast === true }
    // Checked against the waits of every process sharing the directory, and recorded for them, in
    // one transaction of the lease store; and in this runtime's graph before anything is awaited.
    // So two waits closing one cycle at the same moment cannot both pass, in one process or two.
    const recorded = this.leases.recordWait(this.owner.id, { waiter: parentId, failFast: wait.failFast, ids }, (elsewhere) =>
      assertNoWaitCycle(parentId, ids, wait.failFast, this.waitGraph(elsewhere)),
    )
    let mine = this.waitingFor.get(parentId)
    if (!mine) this.waitingFor.set(parentId, (mine = new Set()))
    mine.add(wait)
    const outOfGraph = (): void => {
      mine.delete(wait)
      if (mine.size === 0 && this.waitingFor.get(parentId) === mine) this.waitingFor.delete(parentId)
    }
    const leave = (): void => {
      outOfGraph()
      if (this.closed) return // close ended every wait of this runtime at once
      try {
        this.leases.endWait(this.owner.id, recorded)
      } catch (error) {
        // Left behind, the row goes when this runtime closes or gives the thread's lease up.
        this.report(error, parentId)
      }
    }
    const startedAt = this.live.get(parentId)?.context().lastAt
    const waiting = this.waitFor(ids, startedAt != null ? { ...options, startedAt } : options, (id, settled) => {
      open.delete(id)
      // A fail-fast wait was let through for its way out: a thread that might fail. One settling
      // without failing may close the last way out; then the wait is checked again, as if asked now.
      if (!wait.failFast || open.size === 0 || settled.status === 'error') return undefined
      const stuck = this.stuckWait(parentId, wait, settled)
      // Out of the graph at once, before any other wait's check in this same turn counts it.
      if (stuck) outOfGraph()
      return stuck
    })
    waiting.then(leave, leave)
    return waiting
  }

  /** Whether fail-fast wait `wait` of `waiter`, whose thread `closedBy` just settled without failing, can now only time out. */
  private stuckWait(waiter: string, wait: WaitInProgress, closedBy: SettledThread): WaitCycleEnd | undefined {
    try {
      const elsewhere = this.leases.waitsOfOthers(this.owner.id)
      const found = findWaitCycle(waiter, [...wait.open], true, this.waitGraph(elsewhere))
      return found ? waitCycleEnd(waiter, found, closedBy) : undefined
    } catch (error) {
      // Unreadable lease store: the wait goes on as it was let through, and ends at its timeout at worst.
      this.report(error, waiter)
      return undefined
    }
  }

  /**
   * What the wait-for graph check reads: this runtime's waits, those of other processes sharing the
   * directory (`elsewhere`, from the lease store), and chains from the registry.
   */
  private waitGraph(elsewhere: readonly RecordedWait[] = []): WaitGraph {
    let waits: Map<string, Set<WaitInProgress>> = this.waitingFor
    if (elsewhere.length > 0) {
      waits = new Map(this.waitingFor)
      for (const found of elsewhere) {
        // This runtime's own view of a thread it runs wins over what another process left.
        if (this.waitingFor.has(found.waiter)) continue
        let set = waits.get(found.waiter)
        if (!set) waits.set(found.waiter, (set = new Set()))
        set.add({ open: new Set(found.ids), failFast: found.failFast })
      }
    }
    return {
      waits,
      tail: (id) => {
        // A live thread that has not stopped is the last of its chain: no registry read for most.
        const seen = new Set<string>()
        let last = id
        for (;;) {
          seen.add(last)
          const live = this.live.get(last)
          if (live && !live.stopped) return last
          const next = this.registry.successorOf(last)
          if (next === null || seen.has(next)) return last
          last = next
        }
      },
      stopped: (id) => {
        const live = this.live.get(id)
        if (live && !live.stopped) return false
        const record = this.registry.get(id)
        // A thread that ended in error ends the fail-fast waits for it: for them it is a way out.
        return !record || (record.status !== 'suspended' && record.status !== 'error' && !isActive(record.status))
      },
    }
  }

  waitThreads(ids: string[], options: WaitOptions = {}): Promise<WaitReport> {
    return this.waitFor(ids, options)
  }

  private async waitFor(ids: string[], options: WaitOptions, onSettled?: Parameters<typeof waitThreads>[3]): Promise<WaitReport> {
    this.assertOpen()
    if (!Array.isArray(ids)) throw new SpindleError('INVALID_OPTIONS', 'waitThreads needs an array of thread ids.')
    for (const id of ids) {
      assertThreadId(id)
      if (!this.live.has(id) && !this.registry.get(id)) {
        throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir} to wait for.`, { details: { threadId: id } })
      }
    }
    return waitThreads(
      {
        clock: this.clock,
        defaultTimeoutMs: this.config.waits.defaultTimeoutMs,
        settled: (id) => this.settled(id),
        cancel: (id, reason, by) => this.cancelAs(id, reason, by),
      },
      ids,
      options,
      onSettled,
    )
  }

  chain(id: string): ThreadRecord[] {
    this.assertOpen()
    assertThreadId(id)
    const chain = this.registry.chain(id)
    if (chain.length === 0) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir}.`, { details: { threadId: id } })
    return chain
  }

  /**
   * Resolves once thread `id` has stopped for good. A live thread resolves from its own `done`
   * (after its end is durable); a suspended one when it is woken here and ends; one that another
   * process runs from the registry, looked up every `waits.remotePollMs`.
   */
  private settled(id: string): { promise: Promise<ThreadOutcome>; cancel(): void } {
    let cancelled = false
    let stopWatch: () => void = () => {}
    const promise = new Promise<ThreadOutcome>((resolve, reject) => {
      const attempt = (): void => {
        if (cancelled) return
        const live = this.live.get(id)
        if (live && !live.stopped) {
          live.done.then(
            (outcome) => (outcome.status === 'suspended' ? attempt() : resolve(outcome)),
            (error: unknown) => (this.closed ? reject(error) : attempt()),
          )
          return
        }
        if (live) {
          // Stopped here a moment ago: its `done` settles once the end is durable.
          live.done.then(() => attempt(), () => attempt())
          return
        }
        const record = this.registry.get(id)
        if (!record) return reject(new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir}.`, { details: { threadId: id } }))
        if (record.status !== 'suspended' && !isActive(record.status)) return resolve(this.storedOutcome(id, record))
        stopWatch = this.watchRemote(id, () => attempt())
      }
      attempt()
    })
    promise.catch(() => {})
    return {
      promise,
      cancel: () => {
        cancelled = true
        stopWatch()
      },
    }
  }

  private storedOutcome(id: string, record: ThreadRecord): ThreadOutcome {
    const context = this.storedContext(id)
    const status = record.status as ThreadOutcome['status']
    if (context) return outcomeOf(status, context)
    return {
      status,
      cost: record.cost ?? { turns: 0, inputTokens: 0, outputTokens: 0, spend: 0 },
      ...(typeof record.result === 'string' ? { result: record.result } : {}),
      ...(record.error ? { error: record.error } : {}),
    }
  }

  /**
   * Calls `changed` when thread `id` becomes live here or its registry row leaves created, running
   * and suspended. Threads another process runs send no events here, so their rows are read.
   */
  private watchRemote(id: string, changed: () => void): () => void {
    let set = this.remoteWatches.get(id)
    if (!set) this.remoteWatches.set(id, (set = new Set()))
    const once = (): void => {
      set!.delete(once)
      if (set!.size === 0) this.remoteWatches.delete(id)
      changed()
    }
    set.add(once)
    if (this.remoteTimer === null) this.scheduleRemotePoll()
    return () => {
      set!.delete(once)
      if (set!.size === 0) this.remoteWatches.delete(id)
    }
  }

  private scheduleRemotePoll(): void {
    this.remoteTimer = this.clock.setTimeout(() => {
      this.remoteTimer = null
      if (this.closed) return
      for (const [id, listeners] of [...this.remoteWatches]) {
        const live = this.live.get(id)
        let changed = live !== undefined
        if (!changed) {
          try {
            const record = this.registry.get(id)
            changed = !record || (record.status !== 'suspended' && !isActive(record.status))
          } catch (error) {
            this.report(error, id)
          }
        }
        if (changed) for (const listener of [...listeners]) listener()
      }
      if (this.remoteWatches.size > 0) this.scheduleRemotePoll()
    }, this.config.waits.remotePollMs)
    ;(this.remoteTimer as { unref?: () => void })?.unref?.()
  }

  /** Wakes waiters on a thread that has just become live here (approved, resumed, cancelled). */
  private wakeWatchers(id: string): void {
    const listeners = this.remoteWatches.get(id)
    if (listeners) queueMicrotask(() => { for (const listener of [...listeners]) listener() })
  }

  /**
   * Children (and their descendants) of `id` that are not settled yet — with those of the threads
   * `id` continues: a continuation is the same task, and its predecessors' children are its own.
   */
  private openChildren(id: string): ThreadRecord[] {
    const chain = this.registry.chain(id)
    const upTo = chain.findIndex((r) => r.id === id)
    const ids = upTo < 0 ? [id] : chain.slice(0, upTo + 1).map((r) => r.id)
    return ids.flatMap((t) => this.registry.listChildren(t)).filter((child) => isActive(child.status) || child.status === 'suspended')
  }

  /** The `settleChildren` effect of a cancelled thread: cancel every open child, wait for each. */
  private async settleChildren(id: string, reason: string, signal: AbortSignal): Promise<string[]> {
    // Children whose spawn_thread call was under way when the cancel came are registered once it
    // returns: wait for them, else they would run on under a cancelled parent.
    while (this.spawning.has(id) && !signal.aborted) await Promise.allSettled([...this.spawning.get(id)!])
    const children = this.openChildren(id)
    const cause = `parent ${id} was cancelled: ${reason}`
    await Promise.all(
      children.map(async (child) => {
        try {
          await this.cancelAs(child.id, cause, `parent ${id}`)
        } catch (error) {
          // Settled in the meantime (completed, or cancelled by someone else): nothing to cancel.
          if (!isSpindleError(error) || error.code !== 'THREAD_NOT_ACTIVE') this.report(error, child.id)
        }
        if (signal.aborted) return
        await this.settled(child.id).promise.catch(() => {})
      }),
    )
    return children.map((c) => c.id)
  }

  // ── continuation and the checks before a model call ───────────────────────────────────────

  private async beforeModelCall(id: string, at: { turn: number; attempt: number }): Promise<'proceed' | 'stop'> {
    const thread = this.live.get(id)
    if (!thread || thread.stopped) return 'stop'
    const toCheck = thread.messagesToCheck()
    // History just read back (recovery, restart) of a thread killed between registering its
    // successor and recording the hand-off: the successor runs the task; hand off before any call.
    if (toCheck && this.registry.successorOf(id) !== null) {
      const window = this.options.model.contextWindow
      const pressed = window !== undefined && thread.context().promptTokens / window >= this.config.context.pressureRatio
      await this.handOff(thread, pressed ? 'context_window_pressure' : 'context_length')
      return 'stop'
    }
    const repairs = toCheck ? findDanglingToolCalls(toCheck) : []
    if (repairs.length > 0) {
      // Recorded like any input, so the conversation rebuilt from the transcript has them too.
      thread.note(TOOL_CALLS_REPAIRED, { at: this.clock.now(), turn: at.turn, repairs })
      thread.repairMessages(repairs)
    }
    const exhausted = this.budgetExhausted(id)
    if (exhausted) {
      thread.deliver({ type: 'BUDGET_EXHAUSTED', at: this.clock.now(), ...exhausted })
      return 'stop'
    }
    const context = thread.context()
    if ((await this.govern(thread, context)) === 'stopped') return 'stop'
    const window = this.options.model.contextWindow
    if (window && context.promptTokens > 0) {
      const ratio = context.promptTokens / window
      if (ratio >= this.config.context.pressureRatio) {
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
    const hooks = this.hooksOf(thread.id)
    let action: string = 'continue'
    let hookId: string | null = null
    let message = ''
    if (hooks.has('context_window_pressure')) {
      const decided = await hooks.decide('context_window_pressure', this.hookInput(context, { pressure } as Partial<HookInput>))
      if (decided.hookId) {
        action = decided.action
        hookId = decided.hookId
        message = decided.message ? `: ${decided.message}` : ''
        thread.note('hook_decided', { at: this.clock.now(), event: 'context_window_pressure', hookId, action })
      }
    }
    if (thread.stopped) return 'stopped'
    if (action === 'fail') {
      thread.deliver({ type: 'FAIL', at: this.clock.now(), error: { code: 'HOOK_FAILED', message: `Hook ${hookId} failed the thread on context_window_pressure${message}.` } })
      return 'stopped'
    }
    if (action === 'abort') {
      this.deliverCancel(thread, `aborted by hook ${hookId}${message}`, `hook ${hookId}`)
      return 'stopped'
    }
    // `retry` means "carry on as you are"; `continue` means the default.
    if (action === 'retry' || this.config.context.onPressure === 'ignore') return 'proceed'
    await this.handOff(thread, 'context_window_pressure')
    return 'stopped'
  }

  private async handOffOnContextLength(id: string): Promise<boolean> {
    const thread = this.live.get(id)
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
  private handOff(thread: LiveThread, cause: 'context_window_pressure' | 'context_length' | 'reduced_context'): Promise<string | null> {
    const running = this.handingOff.get(thread.id)
    if (running) return running
    const work = (async (): Promise<string | null> => {
      const id = thread.id
      const context = thread.context()
      const record = this.registry.get(id)
      const existing = this.registry.chain(id).find((r) => r.previousThreadId === id)
      let nextId: string
      if (existing) {
        nextId = existing.id
      } else {
        const window = this.options.model.contextWindow ?? this.config.context.defaultContextWindow
        const ceiling = this.config.context.resumeCeilingTokens ?? Math.floor(window * this.config.context.resumeCeilingRatio)
        // A provider that refused the history outright gets half of that.
        const messages = continuationMessages(thread.messages(), {
          prompt: context.directive.prompt,
          previousThreadId: id,
          ceilingTokens: cause === 'context_window_pressure' ? ceiling : Math.floor(ceiling / 2),
        })
        if (cause === 'context_length' && !continuationSheds(thread.messages(), messages, { isContinuation: context.previousThreadId != null })) return null
        nextId = newThreadId(context.directive.name)
        this.budgetKeys.set(nextId, this.budgetKey(id))
        await this.startThread({
          input: {
            threadId: nextId,
            directive: context.directive,
            limits: context.limits,
            policy: context.policy,
            depth: context.depth,
            carried: { usage: { ...context.usage }, activeMs: context.activeMs, previousThreadId: id },
          },
          hooks: this.hooksOf(id),
          parentId: record?.parentId ?? null,
          previousThreadId: id,
          messages,
        })
      }
      if (!thread.stopped) {
        thread.note('thread_continued', { at: this.clock.now(), cause, nextThreadId: nextId })
        thread.deliver({ type: 'HAND_OFF', at: this.clock.now(), nextThreadId: nextId })
        this.emitLifecycle({ type: 'thread_continued', at: this.clock.now(), threadId: id, nextThreadId: nextId, cause })
      }
      return nextId
    })()
    this.handingOff.set(thread.id, work)
    work.finally(() => this.handingOff.delete(thread.id)).catch(() => {})
    return work
  }

  private deliverCancel(thread: LiveThread, reason: string, by: string): boolean {
    if (!thread.parked) {
      const awaitChildren = this.openChildren(thread.id).length > 0 || this.spawning.has(thread.id)
      try {
        return thread.deliver({ type: 'CANCEL', at: this.clock.now(), reason, by, ...(awaitChildren ? { awaitChildren } : {}) })
      } catch (error) {
        // Not recorded for want of storage: the thread is parked now, and the cancel waits with it.
        if (!thread.parked) throw error
      }
    }
    // A cancel is an input like any other, recorded before it acts: kept with the episode and
    // delivered as soon as the thread can write again, which is tried at once.
    const episode = this.parkedThreads.get(thread.id)
    if (!episode) return false
    episode.cancel ??= { reason, by }
    if (episode.timer !== null) this.clock.clearTimeout(episode.timer)
    this.retryParked(thread.id)
    return true
  }

  // ── recovery escalation and budget governance (design 003 §6–7) ───────────────────────────

  /** A thread ended in `error`: decide who tries its task next, and when. */
  private recoverTask(id: string, context: ThreadContext): void {
    try {
      const now = this.clock.now()
      const taskKey = context.task?.key ?? id
      const reasonCode = context.error?.code ?? 'error'
      const previous = this.recoveryStore.get(taskKey, reasonCode)
      const { decision, next } = decideRecovery(this.config.recovery, previous, {
        taskKey,
        reasonCode,
        // The chain starts at the task's own directive, whichever handler failed now.
        directive: context.task?.directive ?? context.directive.name,
        now,
      })
      const message = describeRecovery(decision)
      this.emitLifecycle({ type: 'recovery_decided', at: now, threadId: id, taskKey, decision, message })
      if (decision.cooldownActive) return
      const record: RecoveryRecord = { ...next, failedThreadId: id, nextThreadId: null, updatedAt: now }
      this.recoveryStore.put(record)
      if (decision.action === 'human') {
        this.writeEscalation(id, { taskKey, decision, message, error: context.error, directive: context.directive, at: new Date(now).toISOString() })
        return
      }
      this.scheduleRecovery(record)
    } catch (error) {
      this.report(error, id)
    }
  }

  private readonly recoveryTimers = new Set<unknown>()

  // ── storage failures: threads parked until the disk takes writes again ──────────────────────

  /** When each thread's storage failure was last told to `onProblem`. */
  private readonly storageToldAt = new Map<string, number>()

  /** Threads in a storage episode: the retry timer (null while unparked) and the attempts so far. */
  private readonly parkedThreads = new Map<
    string,
    { timer: unknown; attempts: number; since: number; errno: string; cancel?: { reason: string; by: string } }
  >()

  /**
   * A write of the thread's failed for want of storage (a full disk, an I/O error, a file system
   * gone read-only): it is parked at its last recorded input, and tried again later, backing off.
   * Told to the host once per episode. A thread that meets it again after a retry stays in the
   * same episode.
   */
  private storageFailed(thread: LiveThread, error: unknown): void {
    if (this.closed || thread.stopped) return
    thread.park()
    const episode = this.parkedThreads.get(thread.id)
    if (episode && episode.timer !== null) return
    const attempts = (episode?.attempts ?? 0) + 1
    if (attempts === 1) {
      const parked = threadParked(thread.id, error, STORAGE_RETRY_MAX_MS)
      // A disk on the edge of full lets a thread go on and stop again and again (a journal epoch
      // deleted frees a little): the host hears of it once a minute, and sees each park as an event.
      const now = this.clock.now()
      const told = this.storageToldAt.get(thread.id)
      if (told === undefined || now - told >= STORAGE_REPORT_EVERY_MS) {
        this.storageToldAt.set(thread.id, now)
        this.report(parked, thread.id)
      }
      this.emitLifecycle({ type: 'thread_parked', at: now, threadId: thread.id, error: { code: 'STORAGE_FAILED', message: parked.message } })
    }
    const delay = Math.min(STORAGE_RETRY_MAX_MS, STORAGE_RETRY_FIRST_MS * 2 ** (attempts - 1))
    const timer = this.clock.setTimeout(() => this.retryParked(thread.id), delay)
    this.parkedThreads.set(thread.id, {
      ...episode,
      timer,
      attempts,
      since: episode?.since ?? this.clock.now(),
      errno: episode?.errno ?? storageFailureOf(error)?.code ?? 'unknown',
    })
  }

  /** Parks live thread `id` if `error` is a storage failure; true if it did. */
  private parkForStorage(id: string, error: unknown): boolean {
    const thread = this.live.get(id)
    if (!thread || !isStorageFailure(error)) return false
    this.storageFailed(thread, error)
    return true
  }

  /**
   * Tries a parked thread again. A note first, as a probe: it costs one line, where carrying the
   * thread on would cost a model call whose reply might not be recordable either.
   */
  private retryParked(id: string): void {
    const episode = this.parkedThreads.get(id)
    if (!episode || this.closed) return
    episode.timer = null
    const thread = this.live.get(id)
    if (!thread || thread.stopped || !thread.parked) {
      this.parkedThreads.delete(id)
      return
    }
    const at = this.clock.now()
    try {
      if (!thread.unpark(threadMachine, ['storage_resumed', { at, since: episode.since, attempts: episode.attempts, errno: episode.errno }])) return
    } catch (error) {
      // The probe failed: `storageFailed` has set the next attempt. Anything else is reported.
      if (!isStorageFailure(error)) this.report(error, id)
      return
    }
    this.parkedThreads.delete(id)
    this.emitLifecycle({ type: 'thread_unparked', at, threadId: id, since: episode.since, attempts: episode.attempts })
    if (episode.cancel) this.deliverCancel(thread, episode.cancel.reason, episode.cancel.by)
  }

  private scheduleRecovery(record: RecoveryRecord): void {
    const handle = this.clock.setTimeout(() => {
      this.recoveryTimers.delete(handle)
      if (this.closed) return
      this.startRecoveryAttempt(record).catch((error: unknown) => this.report(error, record.failedThreadId))
    }, Math.max(0, record.cooldownUntil - this.clock.now()))
    this.recoveryTimers.add(handle)
    ;(handle as { unref?: () => void })?.unref?.()
  }

  /** @internal Decisions whose next attempt had not started when the last process stopped. */
  resumePendingRecoveries(): void {
    if (!this.config.recovery.enabled) return
    try {
      for (const record of this.recoveryStore.pending()) this.scheduleRecovery(record)
    } catch (error) {
      this.report(error)
    }
  }

  /**
   * Starts the attempt a decision called for: a thread of the handler's directive, with the
   * task's prompt and what failed before. Its id comes from the decision, so a restart between
   * starting it and recording it finds it instead of starting a second one.
   */
  private async startRecoveryAttempt(record: RecoveryRecord): Promise<void> {
    const failed = this.registry.get(record.failedThreadId)
    const context = this.storedContext(record.failedThreadId) ?? this.live.get(record.failedThreadId)?.context()
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
    if (!this.registry.get(id)) {
      const error = context.error ? `${context.error.code}: ${context.error.message}` : record.reasonCode
      await this.spawnResolved(
        {
          directive: {
            name: record.handler,
            prompt:
              `${task.prompt}\n\n[Attempt ${record.attempt} by ${record.handler}. The previous attempt (thread ${record.failedThreadId}, ` +
              `directive ${context.directive.name}) failed with ${error}. Take the task over from the start.]`,
          },
          ...(failed.parentId ? { parentId: failed.parentId } : {}),
        },
        id,
        task,
      )
    }
    this.recoveryStore.put({ ...record, nextThreadId: id, updatedAt: this.clock.now() })
    this.emitLifecycle({ type: 'recovery_started', at: this.clock.now(), threadId: id, taskKey: record.taskKey, handler: record.handler, attempt: record.attempt, retryOf: record.failedThreadId })
  }

  /** The end of the chain: a file a person finds next to the failed thread. */
  private writeEscalation(id: string, escalation: Record<string, unknown>): void {
    if (this.options.store === 'memory') return
    try {
      const file = path.join(threadDir(dataPaths(this.dir), id), 'escalation.request.json')
      writeFileAtomicSync(file, `${JSON.stringify({ threadId: id, kind: 'recovery_escalation', ...escalation }, null, 2)}\n`, { fsync: this.durability === 'fsync', under: dataPaths(this.dir).root })
    } catch (error) {
      this.report(error, id)
    }
  }

  /** Budget governance before a model call: the degrade policy when a budget is exceeded. */
  private async govern(thread: LiveThread, context: ThreadContext): Promise<'proceed' | 'stopped'> {
    const policy = this.config.governance
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
    const taskKey = context.task?.key ?? (previous ? (this.registry.chain(previous)[0]?.id ?? previous) : thread.id)
    const verdict = checkGovernance(policy, context.directive.name, usage, this.recoveryStore.degradeStep(taskKey))
    if (!verdict) return 'proceed'
    this.recoveryStore.bumpDegradeStep(taskKey, this.clock.now())
    const at = this.clock.now()
    thread.note('governance_applied', { at, ...verdict, usage })
    this.emitLifecycle({ type: 'governance_applied', at, threadId: thread.id, exceededKeys: verdict.exceededKeys, action: verdict.action, degradeStep: verdict.degradeStep })
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

  // ── policies: errors, limits, hooks ────────────────────────────────────────────────────────

  private hooksOf(id: string): CompiledHooks {
    const cached = this.threadHooks.get(id)
    if (cached) return cached
    const thread = this.live.get(id)
    const own = thread ? thread.context().policy.hooks : []
    let hooks = this.hooks
    if (own.length) {
      try {
        hooks = this.hooks.with([{ layer: 'directive', source: `directive of thread ${id}`, hooks: own as unknown as HookSpec[] }])
      } catch (error) {
        // Stored hooks that no longer compile (a changed CEL library): report, run without them.
        this.report(error, id)
      }
    }
    this.threadHooks.set(id, hooks)
    return hooks
  }

  private hookInput(context: ThreadContext, extra: Partial<HookInput> = {}): HookInput {
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

  private async judgeModelFailure(
    id: string,
    error: unknown,
    at: { turn: number; attempt: number },
  ): Promise<Awaited<ReturnType<EffectHost['judgeModelFailure']>>> {
    const thread = this.liveThread(id)
    const context = thread.context()
    const classified = classifyError(error, this.clock.now(), this.config.errors.patterns)
    const retryInMs = retryDelayMs(classified, at.attempt, context.policy.retry)
    let decision: HookVerdict | undefined
    const hooks = this.hooksOf(id)
    if (hooks.has('error')) {
      const decided = await hooks.decide(
        'error',
        this.hookInput(context, { error: { ...classified.failure, attempt: at.attempt, retryInMs } } as Partial<HookInput>),
      )
      if (decided.hookId && decided.action !== 'continue') {
        decision = { action: decided.action, hookId: decided.hookId, ...(decided.message ? { message: decided.message } : {}) }
      }
    }
    thread.note('error_classified', {
      at: this.clock.now(),
      turn: at.turn,
      attempt: at.attempt,
      ...classified.failure,
      ...(classified.retryAfterMs !== undefined ? { retryAfterMs: classified.retryAfterMs } : {}),
      retryInMs,
      ...(decision ? { decision } : {}),
    })
    return { failure: classified.failure, retryInMs, ...(decision ? { decision } : {}) }
  }

  private async decideLimit(id: string, hit: { limit: 'turns' | 'tokens' | 'spend' | 'durationMs'; used: number; max: number }) {
    const thread = this.liveThread(id)
    const context = thread.context()
    const proposed = proposeLimit(hit.max, context.policy.escalation[hit.limit])
    const hooks = this.hooksOf(id)
    if (hooks.has('limit')) {
      const decided = await hooks.decide('limit', this.hookInput(context, { limit: { name: hit.limit, used: hit.used, max: hit.max, proposed } } as Partial<HookInput>))
      if (decided.hookId && decided.action !== 'continue') {
        thread.note('hook_decided', { at: this.clock.now(), event: 'limit', hookId: decided.hookId, action: decided.action, limit: hit.limit })
        const by = { hookId: decided.hookId, ...(decided.message ? { message: decided.message } : {}) }
        if (decided.action === 'fail' || decided.action === 'abort') return { action: decided.action, ...by }
        const limits = decided.limits ?? (proposed !== null ? { [hit.limit]: proposed } : undefined)
        if (limits) {
          try {
            this.raiseBudget(id, limits as Partial<Limits>)
            return { action: 'raise' as const, limits: limits as Partial<Limits>, ...by }
          } catch (error) {
            // The tree cannot cover the raise: the hit goes to a person (or is the child's budget).
            this.report(error, id)
          }
        }
      }
    }
    if ((hit.limit === 'spend' || hit.limit === 'tokens') && this.registry.get(id)?.parentId) {
      // A child's spend and token limits are its reservation from its parent: a budget, not a
      // limit for a person to raise on its own.
      thread.note('budget_exhausted', { at: this.clock.now(), amount: hit.limit, used: hit.used, max: hit.max })
      return { action: 'budget' as const }
    }
    const requestId = `${hit.limit}-${context.usage.turns}-${this.clock.now().toString(36)}`
    thread.note('limit_escalation_requested', {
      at: this.clock.now(),
      requestId,
      ...hit,
      proposed,
      cost: { ...context.usage },
      message: escalationMessage(context.directive.name, { ...hit, proposed }, context.usage),
    })
    return { action: 'escalate' as const, proposed, requestId }
  }

  /** Hooks on transitions, and the bookkeeping of suspended threads. */
  private observe(thread: LiveThread, snapshot: { value: unknown; context: ThreadContext }, previous: { status: ThreadStatus | null; value: unknown }): void {
    const status = statusOfValue(snapshot.value as never)
    const context = snapshot.context
    this.crashLoop.progressed(thread.id)
    if (status === 'suspended' && previous.status !== 'suspended') {
      this.suspended.set(thread.id, context.limitHit?.requestId ?? null)
      if (context.suspendReason === 'limit' && context.limitHit?.requestId) {
        const request = this.approvalRequest(thread.id, context)
        // Write-ahead: the request goes out once the suspension it describes is durable.
        this.commit.whenDurable().then(
          () => this.writeApprovalRequest(thread.id, request),
          () => {},
        )
      }
    }
    if (previous.status === 'created' && status === 'running') this.fireHook(thread, 'thread_started', context)
    const wasRunningTools = isStateValue(previous.value, 'runningTools')
    const wasCalling = isStateValue(previous.value, 'callingModel')
    if ((wasRunningTools && !isStateValue(snapshot.value, 'runningTools')) || (wasCalling && status === 'completed')) {
      this.fireHook(thread, 'after_step', context, { step: { turn: context.usage.turns, toolCalls: context.toolCalls.length } })
    }
    if (!isActive(status) && status !== 'suspended') {
      this.fireHook(thread, 'after_complete', context, { outcome: { status, result: context.result } })
    }
    if (status === 'error' && previous.status !== 'error') {
      this.childFailed(thread.id, context)
      if (this.config.recovery.enabled) this.recoverTask(thread.id, context)
    }
    this.recordUsage(thread.id, context.usage, context.previousThreadId != null)
    if (status === 'suspended' && previous.status !== 'suspended' && context.suspendReason === 'budget') this.budgetSuspended(thread.id, context)
    // A continued thread's successor spends from the same account.
    if (!isActive(status) && status !== 'suspended' && status !== 'continued') this.releaseBudget(thread.id, context.previousThreadId != null)
  }

  /** A child that ended in error: its parent's transcript says so, and host code is told. */
  private childFailed(id: string, context: ThreadContext): void {
    const parentId = this.registry.get(id)?.parentId ?? null
    if (!parentId) return
    const error = context.error ?? { code: 'error', message: 'failed' }
    this.live.get(parentId)?.note('child_thread_failed', { at: this.clock.now(), childId: id, directive: context.directive.name, error })
    this.emitLifecycle({ type: 'child_thread_failed', at: this.clock.now(), threadId: id, parentId, error })
  }

  private fireHook(thread: LiveThread, event: HookEvent, context: ThreadContext, extra: Record<string, unknown> = {}): void {
    const hooks = this.hooksOf(thread.id)
    if (!hooks.has(event)) return
    hooks.decide(event, this.hookInput(context, extra as Partial<HookInput>)).then(
      (decided) => {
        if (!decided.hookId || decided.action === 'continue' || decided.action === 'retry') return
        // after_complete sees a thread that has already stopped: its decision changes nothing.
        if (thread.stopped) return
        thread.note('hook_decided', { at: this.clock.now(), event, hookId: decided.hookId, action: decided.action })
        const message = decided.message ? `: ${decided.message}` : ''
        if (decided.action === 'fail') {
          thread.deliver({
            type: 'FAIL',
            at: this.clock.now(),
            error: { code: 'HOOK_FAILED', message: `Hook ${decided.hookId} failed the thread on ${event}${message}.` },
          })
        } else {
          this.deliverCancel(thread, `aborted by hook ${decided.hookId}${message}`, `hook ${decided.hookId}`)
        }
      },
      (error: unknown) => this.report(error, thread.id),
    )
  }

  // ── approvals, resume, cancel ──────────────────────────────────────────────────────────────

  private approvalRequest(id: string, context: ThreadContext): ApprovalRequest {
    const hit = context.limitHit!
    const cost = { ...context.usage }
    const files = this.options.store === 'memory' ? null : approvalFiles(dataPaths(this.dir), id, hit.requestId!)
    return {
      id: hit.requestId!,
      threadId: id,
      directive: context.directive.name,
      kind: 'limit_escalation',
      limit: hit.limit,
      used: hit.used,
      max: hit.max,
      proposed: hit.proposed,
      cost,
      message: escalationMessage(context.directive.name, hit, cost),
      // When the thread suspended (its last input's time), also for a request written after a
      // restart: the stated timeout runs from the request, not from the process that wrote it.
      createdAt: new Date(context.lastAt ?? this.clock.now()).toISOString(),
      timeoutSeconds: context.policy.escalation.requestTimeoutSeconds,
      respond: {
        file: files ? path.relative(this.dir, files.response) : '(memory store: use rt.approve / rt.deny)',
        approve: { approved: true, ...(hit.proposed !== null ? { limits: { [hit.limit]: hit.proposed } } : {}), message: 'optional note' },
        deny: { approved: false, message: 'why' },
      },
    }
  }

  /** A suspended thread on disk, watched here for request files from now on. */
  private watchSuspended(paths: ReturnType<typeof dataPaths>, id: string, context: ThreadContext): void {
    this.suspended.set(id, context.limitHit?.requestId ?? null)
    this.ensureApprovalRequest(paths, id, context)
  }

  /**
   * Writes a suspended thread's missing approval request (a process killed between a suspension
   * and its request file). Looks for the files first: building a request costs more than that,
   * and opening a directory of 10,000 suspended threads does this for each.
   */
  private ensureApprovalRequest(paths: ReturnType<typeof dataPaths>, id: string, context: ThreadContext): void {
    const requestId = context.limitHit?.requestId
    if (context.suspendReason !== 'limit' || !requestId || this.options.store === 'memory') return
    const files = approvalFiles(paths, id, requestId)
    if (fs.existsSync(files.request) || fs.existsSync(files.decision)) return
    this.writeApprovalRequest(id, this.approvalRequest(id, context))
  }

  private writeApprovalRequest(id: string, request: ApprovalRequest): void {
    if (this.options.store === 'memory' || this.closed) return
    try {
      const files = approvalFiles(dataPaths(this.dir), id, request.id)
      if (fs.existsSync(files.request) || fs.existsSync(files.decision)) return
      // Not mkdir -p: it would follow a linked thread folder and make the folder wherever it points.
      const root = dataPaths(this.dir).root
      assertRealDirectories(root, files.dir, { create: true })
      writeFileAtomicSync(files.request, `${JSON.stringify(request, null, 2)}\n`, { fsync: this.durability === 'fsync', under: root })
    } catch (error) {
      this.report(error, id)
    }
  }

  private writeDecision(id: string, requestId: string | null, decision: Record<string, unknown>): void {
    if (this.options.store === 'memory' || requestId === null) return
    try {
      const files = approvalFiles(dataPaths(this.dir), id, requestId)
      if (!fs.existsSync(files.dir)) return
      writeFileAtomicSync(files.decision, `${JSON.stringify(decision, null, 2)}\n`, { fsync: this.durability === 'fsync', under: dataPaths(this.dir).root })
    } catch (error) {
      this.report(error, id)
    }
  }

  /** A suspended thread's stored state, read (not yet loaded) so that a request can be checked first. */
  private async readSuspended(id: string): Promise<{ snapshot: unknown; context: ThreadContext; intents: string[] }> {
    this.assertOpen()
    assertThreadId(id)
    const live = this.live.get(id)
    if (live && !live.stopped) {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} is ${live.status}, not suspended.`, { details: { threadId: id, status: live.status } })
    }
    // A thread that just suspended here is live until its checkpoint is durable.
    if (live) await live.done.catch(() => {})
    const record = this.registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir}. List threads with rt.list() or \`spindle ls\`.`, {
        details: { threadId: id },
      })
    }
    if (this.live.has(id)) {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} was just loaded by another request.`, { details: { threadId: id } })
    }
    const restored = this.readSnapshot(id, record.status)
    const status = statusOfValue((restored.snapshot as { value: never }).value)
    if (status !== 'suspended') {
      this.transcripts.close(id)
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} is ${status}, not suspended.`, { details: { threadId: id, status } })
    }
    return {
      snapshot: restored.snapshot,
      context: (restored.snapshot as { context: ThreadContext }).context,
      intents: restored.tail.filter((e) => e.type === 'tool_intent').map((e) => (e.data as { key: string }).key),
    }
  }

  /** Loads a suspended thread into a live actor and hands it `event`, synchronously. */
  private wake(id: string, stored: { snapshot: unknown; intents: string[] }, note: [string, unknown] | null, event: ThreadEvent): LiveThread {
    try {
      this.takeLease(id)
    } catch (error) {
      this.transcripts.close(id)
      throw error
    }
    this.suspended.delete(id)
    const thread = this.adopt(id, { intents: stored.intents })
    thread.start(threadMachine, { snapshot: stored.snapshot })
    this.supervise(id, this.registry.get(id)?.parentId ?? null)
    this.wakeWatchers(id)
    if (note) thread.note(note[0], note[1])
    if (!thread.deliver(event)) {
      throw new SpindleError('THREAD_NOT_SUSPENDED', `Thread ${id} did not accept ${event.type}.`, { details: { threadId: id } })
    }
    return thread
  }

  async approve(id: string, options: ApproveOptions = {}): Promise<ThreadHandle> {
    assertText(options.by, 'by')
    assertText(options.message, 'message')
    const stored = await this.readSuspended(id)
    const { context } = stored
    if (context.suspendReason === 'budget' && context.budgetHit) {
      if (context.budgetHit.amount === 'spend' || context.budgetHit.amount === 'tokens') return this.approveBudget(id, stored, options)
      // A governance budget (wall time, retries): approving carries the thread on; the next time
      // the budget is exceeded the next step of the degrade policy applies.
      const by = options.by ?? 'api'
      const at = this.clock.now()
      return this.wake(id, stored, ['approval_decided', { at, requestId: null, decision: 'approved', by, governance: context.budgetHit }], {
        type: 'RESUME',
        at,
        decision: 'approved',
        by,
      })
    }
    const hit = context.limitHit
    if (context.suspendReason !== 'limit' || !hit) {
      throw new SpindleError(
        'THREAD_NOT_SUSPENDED',
        `Thread ${id} is suspended for ${context.suspendReason ?? 'an unknown reason'}, not at a limit: carry it on with rt.resume(id), or deny it.`,
        { details: { threadId: id, suspendReason: context.suspendReason } },
      )
    }
    let limits: Partial<Limits>
    if (options.limits !== undefined) {
      const checked = LimitsSchema.partial().safeParse(options.limits)
      if (!checked.success) {
        const issue = checked.error.issues[0]!
        throw new SpindleError('INVALID_OPTIONS', `approve: limits.${issue.path.join('.')} ${midSentence(issue.message)}.`, {
          details: { field: `limits.${issue.path.join('.')}` },
        })
      }
      limits = checked.data
    } else if (hit.proposed !== null) {
      limits = { [hit.limit]: hit.proposed }
    } else {
      throw new SpindleError(
        'APPROVAL_NEEDS_LIMITS',
        `Thread ${id} hit its ${hit.limit} limit and its escalation policy proposes no new one: approve with explicit limits, e.g. { limits: { ${hit.limit}: ${hit.max * 2} } }.`,
        { details: { threadId: id, limit: hit.limit } },
      )
    }
    const still = exceeded({ ...context, limits: { ...context.limits, ...limits } })
    if (still) {
      throw new SpindleError(
        'LIMIT_STILL_EXCEEDED',
        `Approving thread ${id} with these limits would suspend it again at once: it has used ${still.used} of ${still.limit}, and the limit would be ${still.max}. Raise ${still.limit} above ${still.used}.`,
        { details: { threadId: id, ...still } },
      )
    }
    // The ledger keeps the same spend and token limits: raised first, so a refusal changes nothing.
    this.raiseBudget(id, limits, () => this.transcripts.close(id))
    const by = options.by ?? 'api'
    const at = this.clock.now()
    const thread = this.wake(
      id,
      stored,
      ['approval_decided', { at, requestId: hit.requestId, decision: 'approved', by, limits, ...(options.message ? { message: options.message } : {}) }],
      { type: 'RESUME', at, limits, decision: 'approved', by, ...(hit.requestId ? { requestId: hit.requestId } : {}) },
    )
    await this.commit.whenLogged()
    this.writeDecision(id, hit.requestId, { decision: 'approved', by, limits, at: new Date(at).toISOString(), message: options.message ?? null })
    return thread
  }

  /**
   * Approves more budget for a thread suspended for it: the ledger raises its account (a child's
   * raise is reserved from its parent, BUDGET_EXCEEDED when the parent cannot cover it), then the
   * same thread carries on.
   */
  private async approveBudget(id: string, stored: Awaited<ReturnType<RuntimeImpl['readSuspended']>>, options: ApproveOptions): Promise<ThreadHandle> {
    const { context } = stored
    const hit = context.budgetHit! as { amount: 'spend' | 'tokens'; used: number; max: number }
    const requested = options.limits?.[hit.amount]
    const proposed = requested !== undefined ? requested : proposeLimit(hit.max, context.policy.escalation[hit.amount])
    if (proposed === null || proposed === undefined || proposed <= hit.used) {
      throw new SpindleError(
        'APPROVAL_NEEDS_LIMITS',
        `Thread ${id} ran out of its ${hit.amount} budget (${hit.used} used of ${hit.max}): approve with a larger one, e.g. { limits: { ${hit.amount}: ${hit.max * 2} } }.`,
        { details: { threadId: id, amount: hit.amount } },
      )
    }
    const limits: Partial<Limits> = { ...options.limits, [hit.amount]: proposed }
    this.raiseBudget(id, limits, () => this.transcripts.close(id))
    const by = options.by ?? 'api'
    const at = this.clock.now()
    const thread = this.wake(
      id,
      stored,
      ['approval_decided', { at, requestId: null, decision: 'approved', by, limits, budget: true, ...(options.message ? { message: options.message } : {}) }],
      { type: 'RESUME', at, limits, decision: 'approved', by },
    )
    await this.commit.whenLogged()
    return thread
  }

  async deny(id: string, reason?: string, options: { by?: string } = {}): Promise<ThreadOutcome> {
    assertText(reason, 'reason')
    assertText(options.by, 'by')
    const stored = await this.readSuspended(id)
    const requestId = stored.context.limitHit?.requestId ?? null
    const by = options.by ?? 'api'
    const at = this.clock.now()
    const thread = this.wake(
      id,
      stored,
      ['approval_decided', { at, requestId, decision: 'denied', by, ...(reason ? { message: reason } : {}) }],
      { type: 'CANCEL', at, reason: reason ? `denied: ${reason}` : 'denied', by, ...(this.openChildren(id).length > 0 ? { awaitChildren: true } : {}) },
    )
    const outcome = await thread.done
    this.writeDecision(id, requestId, { decision: 'denied', by, at: new Date(at).toISOString(), message: reason ?? null })
    return outcome
  }

  async settleOrphan(id: string, action: 'mark_error' | 'mark_cancelled', reason = 'settled by an operator as an orphan'): Promise<ThreadOutcome> {
    this.assertOpen()
    assertThreadId(id)
    if (this.live.has(id)) {
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} runs in this runtime: it is no orphan. Cancel it with rt.cancel.`, { details: { threadId: id } })
    }
    const record = this.registry.get(id)
    if (!record) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir}.`, { details: { threadId: id } })
    if (!isActive(record.status)) {
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is ${record.status}: only a created or running thread can be an orphan.`, { details: { threadId: id, status: record.status } })
    }
    this.takeLease(id)
    let snapshot: unknown
    let intents: string[]
    try {
      const read = this.readSnapshot(id, record.status)
      snapshot = read.snapshot
      intents = read.tail.filter((e) => e.type === 'tool_intent').map((e) => (e.data as { key: string }).key)
    } catch (error) {
      this.releaseLease(id)
      throw error
    }
    const thread = this.adopt(id, { intents })
    thread.noteBeforeNext('orphan_settled', { at: this.clock.now(), action, reason, pid: process.pid })
    thread.start(threadMachine, { snapshot })
    // Decided before any effect of the restored state can act: effects wait for the checkpoint.
    const at = this.clock.now()
    const event: ThreadEvent =
      action === 'mark_error'
        ? { type: 'FAIL', at, error: { code: 'ORPHAN_MARKED', message: `${reason}.` } }
        : { type: 'CANCEL', at, reason, by: 'operator', ...(this.openChildren(id).length > 0 ? { awaitChildren: true } : {}) }
    if (!thread.deliver(event)) {
      thread.detach(new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} did not accept ${event.type}.`))
      throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} could not be settled from its state.`, { details: { threadId: id } })
    }
    return thread.done
  }

  async resume(id: string, options: { by?: string } = {}): Promise<ThreadHandle> {
    assertText(options.by, 'by')
    const stored = await this.readSuspended(id)
    if (stored.context.suspendReason === 'limit') {
      const hit = stored.context.limitHit
      throw new SpindleError(
        'APPROVAL_NEEDS_LIMITS',
        `Thread ${id} is suspended at its ${hit?.limit ?? ''} limit: approve it (rt.approve / spindle approve) to raise the limit, or deny it.`,
        { details: { threadId: id } },
      )
    }
    const by = options.by ?? 'api'
    // A person decided to try again: a thread quarantined for a crash loop starts a new count.
    this.crashLoop.reset(id)
    return this.wake(id, stored, null, { type: 'RESUME', at: this.clock.now(), decision: 'resumed', by })
  }

  async cancel(id: string, reason = 'cancelled by operator'): Promise<CancelResult> {
    this.assertOpen()
    assertThreadId(id)
    assertText(reason, 'reason')
    return this.cancelAs(id, reason, 'api')
  }

  private async cancelAs(id: string, reason: string, by: string): Promise<CancelResult> {
    const live = this.live.get(id)
    if (live && !live.stopped) {
      this.deliverCancel(live, reason, by)
      return { status: 'cancelled', outcome: await live.done }
    }
    if (live) await live.done.catch(() => {})
    const record = this.registry.get(id)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${this.dir}. List threads with rt.list() or \`spindle ls\`.`, {
        details: { threadId: id },
      })
    }
    if (record.status === 'suspended') {
      const stored = await this.readSuspended(id)
      const awaitChildren = this.openChildren(id).length > 0
      const thread = this.wake(id, stored, null, { type: 'CANCEL', at: this.clock.now(), reason, by, ...(awaitChildren ? { awaitChildren } : {}) })
      return { status: 'cancelled', outcome: await thread.done }
    }
    if (isActive(record.status) && this.options.store !== 'memory') {
      return { status: 'requested', file: requestCancel(this.dir, id, { reason, by }) }
    }
    throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is ${record.status}; only a running or suspended thread can be cancelled.`, {
      details: { threadId: id, status: record.status },
    })
  }

  // ── request files ──────────────────────────────────────────────────────────────────────────

  checkRequests(options: { sweep?: boolean } = {}): Promise<RequestsReport> {
    if (this.polling) return this.polling.then(() => this.checkRequests(options))
    const run = this.pollOnce(options.sweep ?? false).finally(() => {
      this.polling = null
    })
    this.polling = run
    return run
  }

  /** @internal */
  startPolling(): void {
    if (this.options.store === 'memory') return
    this.poller = setInterval(() => {
      this.polls++
      if (this.polling) return
      this.checkRequests({ sweep: this.polls % this.config.requests.sweepEvery === 0 }).catch((error: unknown) => this.report(error))
    }, this.config.requests.pollMs)
    this.poller.unref()
  }

  private async pollOnce(sweep: boolean): Promise<RequestsReport> {
    const report: RequestsReport = { honoured: [], refused: [] }
    if (this.options.store === 'memory' || this.closed) return report
    const paths = dataPaths(this.dir)
    if (sweep) this.sweep(paths, report)
    const rings = this.bell.read()
    const everywhere = sweep || rings.missed || this.live.size + this.suspended.size <= this.config.requests.scanPerPoll
    const look = everywhere ? null : this.lookIn(rings.ids)
    const liveIds = look ? [...look].filter((id) => this.live.has(id)) : [...this.live.keys()]
    const suspendedIds = look ? [...look].filter((id) => this.suspended.has(id)) : [...this.suspended.keys()]
    // Threads recovery just took on: the read-ahead worker already looked for their cancel files
    // (on the other core). A request written through spindle since then rang the bell; one written
    // by hand is found by the scan in turn, as at any other poll.
    const lookedAt = this.noCancelAtRecovery
    this.noCancelAtRecovery = new Set()
    for (const id of liveIds) {
      const thread = this.live.get(id)
      if (!thread || thread.stopped) continue
      if (lookedAt.has(id) && !rings.ids.has(id)) continue
      if (fs.existsSync(cancelFile(paths, id))) await this.handleCancelFile(paths, id, report)
    }
    for (const id of suspendedIds) {
      if (this.closed) break
      if (!this.suspended.has(id)) continue
      const requestId = this.suspended.get(id) ?? null
      if (fs.existsSync(cancelFile(paths, id))) {
        await this.handleCancelFile(paths, id, report)
        continue
      }
      if (fs.existsSync(resumeFile(paths, id))) {
        await this.handleResumeFile(paths, id, report)
        continue
      }
      if (requestId && fs.existsSync(approvalFiles(paths, id, requestId).response)) await this.handleResponse(paths, id, requestId, report)
    }
    return report
  }

  /**
   * The threads one poll looks in when it does not look in all: those the bell rang for, and the
   * next `requests.scanPerPoll` in turn, so that a request file written by hand is found too.
   */
  private lookIn(rung: Set<string>): Set<string> {
    const look = new Set(rung)
    let refilled = false
    for (let n = this.config.requests.scanPerPoll; n > 0; n--) {
      if (this.scanQueue.length === 0) {
        if (refilled) break
        this.scanQueue = [...this.live.keys(), ...this.suspended.keys()]
        refilled = true
      }
      const id = this.scanQueue.pop()
      if (id !== undefined) look.add(id)
    }
    return look
  }

  /** Folders refused by `requestFolderIsReal` and reported: said once, not at every poll. */
  private forgedFolders = new Set<string>()

  /**
   * Whether the request files in `dir` (a thread folder or its approvals/) may be claimed and read:
   * `dir` and every folder above it inside the data directory are real directories. A symlink put
   * there after the thread's files were opened would have this runtime rename and read files
   * wherever it points; so nothing there is touched, and the link is reported as forged input,
   * once. Checked only where a request file was seen: a poll with none costs nothing more.
   */
  private requestFolderIsReal(root: string, dir: string, id: string | null): boolean {
    try {
      assertRealDirectories(root, dir)
    } catch (error) {
      const at = isSpindleError(error) && typeof error.details.path === 'string' ? error.details.path : dir
      if (!this.forgedFolders.has(at)) {
        this.forgedFolders.add(at)
        this.report(
          new SpindleError('DATA_DIR_INVALID', `Did not claim or read the request files in ${dir}: ${describeError(error).message}`, {
            details: { ...(isSpindleError(error) ? error.details : {}), threadId: id, dir },
          }),
          id ?? undefined,
        )
      }
      return false
    }
    if (this.forgedFolders.size > 0) for (const at of this.forgedFolders) if (dir === at || dir.startsWith(at + path.sep)) this.forgedFolders.delete(at)
    return true
  }

  /** Every thread directory: stray cancel files, suspended threads other processes left, missing approval requests. */
  private sweep(paths: ReturnType<typeof dataPaths>, report: RequestsReport): void {
    for (const record of this.registry.list({ status: 'suspended' })) {
      if (this.suspended.has(record.id) || this.live.has(record.id)) continue
      const context = this.storedContext(record.id)
      if (!context) continue
      this.watchSuspended(paths, record.id, context)
    }
    // Not while the directory is being opened: one readdir per suspended thread would slow every
    // open of many of them, and the first periodic sweep comes soon enough for a stray file.
    if (this.opened) for (const [id, requestId] of this.suspended) this.refuseStrayResponses(paths, id, requestId, report)
    let names: string[]
    try {
      names = fs.readdirSync(paths.threads)
    } catch {
      return
    }
    for (const name of names) {
      if (this.live.has(name) || this.suspended.has(name)) continue
      const file = path.join(paths.threads, name, CANCEL_FILE)
      if (!fs.existsSync(file) || !this.requestFolderIsReal(paths.root, path.join(paths.threads, name), null)) continue
      let record: ReturnType<Registry['get']> = null
      try {
        assertThreadId(name)
        record = this.registry.get(name)
      } catch {}
      // A running thread not live here belongs to another process: its cancel file is its owner's.
      if (record && isActive(record.status)) continue
      const reason = record ? `the thread is ${record.status}; only a running or suspended thread can be cancelled` : 'no such thread in the registry'
      this.refuseCancel(paths, record ? record.id : null, file, reason, report)
    }
  }

  /**
   * Response files of a suspended thread that answer no open request of it (a request id mistyped
   * by hand, or one already decided): set aside and reported, so the person who wrote one learns
   * it was not taken instead of waiting on it.
   */
  private refuseStrayResponses(paths: ReturnType<typeof dataPaths>, id: string, requestId: string | null, report: RequestsReport): void {
    const dir = path.join(threadDir(paths, id), APPROVALS_DIR)
    let names: string[]
    try {
      names = fs.readdirSync(dir)
    } catch {
      return
    }
    for (const name of names) {
      if (!name.endsWith('.response.json')) continue
      const rid = name.slice(0, -'.response.json'.length)
      if (rid === requestId) continue
      const file = path.join(dir, name)
      const decided = fs.existsSync(path.join(dir, `${rid}.decision.json`))
      // An open request this runtime does not know of (another runtime on the directory woke the
      // thread and it suspended again there): the answer is that runtime's to act on.
      if (!decided && fs.existsSync(path.join(dir, `${rid}.request.json`))) continue
      const open = requestId ? ` Its open request is ${path.join(dir, `${requestId}.request.json`)}.` : ' It has no open approval request.'
      const reason = decided ? `request ${rid} was already decided` : `thread ${id} has no approval request ${rid}`
      // Checked before the first file is moved, not per sweep: the listing costs one readdir as before.
      if (!this.requestFolderIsReal(paths.root, dir, id)) return
      const keptAs = setAside(file, path.join(dir, `${rid}.response.rejected.json`))
      report.refused.push({ threadId: id, kind: 'approval', file, reason })
      this.logRequest(paths.root, { at: new Date(this.clock.now()).toISOString(), kind: 'approval', threadId: id, file, outcome: 'refused', reason })
      this.report(new SpindleError('REQUEST_INVALID', `Rejected ${file}${keptAs ? ` (kept as ${keptAs})` : ''}: ${reason}.${open}`, { details: { threadId: id, file } }), id)
    }
  }

  /** `current` is where the request lies now (claimed, or where it was written): `file` names it. */
  private refuseCancel(paths: ReturnType<typeof dataPaths>, id: string | null, file: string, reason: string, report: RequestsReport, current = file): void {
    const keptAs = setAside(current, path.join(path.dirname(file), 'cancel.refused.json'))
    report.refused.push({ threadId: id, kind: 'cancel', file, reason })
    this.logRequest(paths.root, { at: new Date(this.clock.now()).toISOString(), kind: 'cancel', threadId: id, file, outcome: 'refused', reason })
    const live = id ? this.live.get(id) : undefined
    live?.note('cancel_refused', { at: this.clock.now(), file, reason })
    const kept = keptAs ? ` (kept as ${keptAs})` : ''
    this.report(new SpindleError('CANCEL_REFUSED', `Refused the cancel request ${file}${kept}: ${reason}.`, { details: { threadId: id, file, keptAs } }), id ?? undefined)
  }

  /**
   * Claims a request file carrying a thread's nonce (cancel, resume) so no other process acts on it
   * too, and reads it. `refusal` says why it must be refused (unreadable, or `check` failed).
   */
  private claimNonceRequest(
    file: string,
    check: (request: CancelRequest) => string | null,
  ): { claimed: string; refusal: string } | { claimed: string; refusal: null; request: CancelRequest } | null {
    const claimed = `${file}.${process.pid}.claimed`
    if (!claim(file, claimed)) return null
    const read = readRequestFile<CancelRequest>(claimed, CancelRequestSchema)
    if (!read.ok) return { claimed, refusal: read.problem.replace(claimed, file) }
    const refusal = check(read.value)
    return refusal === null ? { claimed, refusal, request: read.value } : { claimed, refusal }
  }

  /** A claimed request that was honoured: its file goes, the report and the request log say so. */
  private honourRequest(paths: ReturnType<typeof dataPaths>, kind: 'cancel' | 'resume', id: string, file: string, claimed: string, reason: string, report: RequestsReport): void {
    fs.rmSync(claimed, { force: true })
    report.honoured.push({ threadId: id, kind, file })
    this.logRequest(paths.root, { at: new Date(this.clock.now()).toISOString(), kind, threadId: id, file, outcome: 'honoured', reason })
  }

  /** A log line that could not be written leaves the request as it was: the host hears why. */
  private logRequest(root: string, entry: RequestLogEntry): void {
    const skipped = logRequest(root, entry)
    if (skipped) this.report(skipped, entry.threadId ?? undefined)
  }

  private async handleCancelFile(paths: ReturnType<typeof dataPaths>, id: string, report: RequestsReport): Promise<void> {
    const file = cancelFile(paths, id)
    if (!this.requestFolderIsReal(paths.root, path.dirname(file), id)) return
    const claimed = this.claimNonceRequest(file, (request) => cancelRefusal(this.registry.get(id), request))
    if (!claimed) return
    if (claimed.refusal !== null) {
      this.refuseCancel(paths, id, file, claimed.refusal, report, claimed.claimed)
      return
    }
    const reason = claimed.request.reason ?? 'cancelled by request file'
    this.honourRequest(paths, 'cancel', id, file, claimed.claimed, reason, report)
    try {
      await this.cancelAs(id, reason, claimed.request.by ?? `file ${path.relative(paths.root, file)}`)
    } catch (error) {
      this.report(error, id)
    }
  }

  /** A resume request from another process: nonce-checked, then `resume`. */
  private async handleResumeFile(paths: ReturnType<typeof dataPaths>, id: string, report: RequestsReport): Promise<void> {
    const file = resumeFile(paths, id)
    if (!this.requestFolderIsReal(paths.root, path.dirname(file), id)) return
    const claimed = this.claimNonceRequest(file, (request) => (this.registry.get(id)?.nonce === request.nonce ? null : "the nonce does not match the thread's nonce"))
    if (!claimed) return
    let refusal = claimed.refusal
    if (claimed.refusal === null) {
      try {
        await this.resume(id, { by: claimed.request.by ?? `file ${path.relative(paths.root, file)}` })
      } catch (error) {
        refusal = describeError(error).message
      }
    }
    if (refusal !== null) {
      try {
        setAside(claimed.claimed, path.join(path.dirname(file), 'resume.refused.json'))
      } catch {}
      report.refused.push({ threadId: id, kind: 'resume', file, reason: refusal })
      this.logRequest(paths.root, { at: new Date(this.clock.now()).toISOString(), kind: 'resume', threadId: id, file, outcome: 'refused', reason: refusal })
      this.report(new SpindleError('REQUEST_INVALID', `Refused the resume request ${file}: ${refusal}.`, { details: { threadId: id, file } }), id)
      return
    }
    this.honourRequest(paths, 'resume', id, file, claimed.claimed, 'resumed', report)
  }

  private async handleResponse(paths: ReturnType<typeof dataPaths>, id: string, requestId: string, report: RequestsReport): Promise<void> {
    const files = approvalFiles(paths, id, requestId)
    if (!this.requestFolderIsReal(paths.root, files.dir, id) || !claim(files.response, files.taken)) return
    const read = readRequestFile(files.taken, ApprovalResponseSchema)
    const reject = (reason: string): void => {
      try {
        setAside(files.taken, files.rejected)
      } catch {}
      report.refused.push({ threadId: id, kind: 'approval', file: files.response, reason })
      this.logRequest(paths.root, { at: new Date(this.clock.now()).toISOString(), kind: 'approval', threadId: id, file: files.response, outcome: 'refused', reason })
      this.report(new SpindleError('REQUEST_INVALID', `Rejected ${files.response}: ${reason}. The approval request stays open; write a corrected response.`, { details: { threadId: id, file: files.response } }), id)
    }
    if (!read.ok) return reject(read.problem.replace(files.taken, files.response))
    const response = read.value
    const by = response.by ?? `file ${path.relative(paths.root, files.response)}`
    try {
      if (response.approved) await this.approve(id, { ...(response.limits ? { limits: response.limits } : {}), by, ...(response.message ? { message: response.message } : {}) })
      else await this.deny(id, response.message, { by })
    } catch (error) {
      return reject(describeError(error).message)
    }
    fs.rmSync(files.taken, { force: true })
    report.honoured.push({ threadId: id, kind: 'approval', file: files.response })
    this.logRequest(paths.root, {
      at: new Date(this.clock.now()).toISOString(),
      kind: 'approval',
      threadId: id,
      file: files.response,
      outcome: 'honoured',
      reason: response.approved ? 'approved' : 'denied',
    })
  }

  /**
   * A thread's snapshot from state.json plus its transcript tail, or rebuilt from the whole
   * transcript when state.json is missing or damaged. Opens the thread's transcript.
   */
  private readSnapshot(
    id: string,
    registeredAs: ThreadStatus,
    report?: RecoveryReport,
    read?: PrefetchedThread,
  ): { snapshot: unknown; tail: TranscriptEntry[] } {
    let envelope: StateEnvelope | null = null
    /** Reported once state.json has been rebuilt from the transcript: why it was. */
    let rebuiltNotice: SpindleError | null = null
    try {
      envelope = this.checkpoints.load(id, read?.state)
    } catch (error) {
      if (!isSpindleError(error) || (error.code !== 'STATE_CORRUPT' && error.code !== 'STATE_VERSION_UNSUPPORTED')) {
        // The transcript store never got the prefetched descriptor: it is ours to close.
        if (read?.transcript && 'fd' in read.transcript) fs.closeSync(read.transcript.fd)
        throw error
      }
      rebuiltNotice = new SpindleError('STATE_CORRUPT', `state.json of ${id} was rebuilt from its transcript; the thread goes on from there.`, { details: { threadId: id } })
      this.report(error, id)
    }
    // From here the transcript store owns a prefetched descriptor (open takes it, or closes it).
    let prefetched = read?.transcript
    if (envelope) {
      let opened: TranscriptOpenResult | null = null
      try {
        opened = this.transcripts.open(id, envelope.transcript, prefetched)
      } catch (error) {
        // state.json points at a line the transcript no longer holds there, but that was set aside
        // whole: by a compaction killed between its two writes, or as a stale writer's line (a
        // process that lost the thread renamed its state.json over the new owner's). The
        // transcript replays to the thread's state without it.
        const setAside =
          isSpindleError(error) && (error.code === 'TRANSCRIPT_CORRUPT' || error.code === 'TRANSCRIPT_CHAIN_BROKEN') && this.options.store !== 'memory'
            ? anchorSetAside(dataPaths(this.dir), id, envelope.transcript, Date.parse(envelope.savedAt))
            : null
        if (!setAside) throw error
        rebuiltNotice = new SpindleError(
          'STATE_CORRUPT',
          setAside.why === 'compaction'
            ? `state.json of ${id} points into the transcript a compaction replaced (kept as ${setAside.keptAs}): the compaction was stopped before ` +
                `it rewrote state.json. It was rebuilt from the compacted transcript, which replays to the same state; the thread goes on from there.`
            : `state.json of ${id} points at a line a process wrote after it had lost the thread (found in ${setAside.keptAs}, outside the ` +
                `thread's chain): that process renamed its state.json over the new owner's. It was rebuilt from the transcript; the thread goes on from there.`,
          { details: { threadId: id, keptAs: setAside.keptAs, why: setAside.why } },
        )
        // open closed the prefetched descriptor: the replay below reads the file again.
        prefetched = undefined
      }
      if (opened) {
        if (opened.restored) report?.restored.push(id)
        if (opened.stale) this.reportStale(id, opened.stale)
        const tail = opened.tail
        const snapshot = tail.some(isMachineEventEntry) ? replayTranscript(tail, { from: envelope.snapshot }).snapshot : envelope.snapshot
        return { snapshot, tail }
      }
    }
    // No usable state.json: the transcript is the source of truth, replay it whole.
    const exists = prefetched ? 'fd' in prefetched : this.transcriptExists(id)
    const opened = exists ? this.transcripts.open(id, undefined, prefetched) : null
    if (opened?.restored) report?.restored.push(id)
    if (opened?.stale) this.reportStale(id, opened.stale)
    if (!opened || opened.tail.length === 0) {
      // A kill between registering a thread and its first transcript line: spawn never returned.
      throw new SpindleError(
        'FILES_MISSING',
        `Thread ${id} is registered as ${registeredAs} but has no state.json and ` +
          `${opened ? 'an empty transcript.jsonl' : 'no transcript.jsonl'} in ${this.threadPath(id)}. It was registered ` +
          'but never checkpointed, so no step of it was acknowledged; it is marked error.',
        { details: { threadId: id, dir: this.threadPath(id) } },
      )
    }
    report?.rebuilt.push(id)
    if (rebuiltNotice) this.report(rebuiltNotice, id)
    return { snapshot: replayTranscript(opened.tail).snapshot, tail: opened.tail }
  }

  private reportStale(id: string, stale: NonNullable<TranscriptOpenResult['stale']>): void {
    this.report(new SpindleError('TRANSCRIPT_STALE_LINES', staleLinesMessage(id, stale), { details: { threadId: id, lines: stale } }), id)
  }

  /** Carries one thread on from its checkpoint (or settles it); returns what it has spent. */
  private rehydrate(record: { id: string; status: ThreadStatus; parentId?: string | null }, report: RecoveryReport, read?: PrefetchedThread): number {
    const id = record.id
    const { snapshot, tail } = this.readSnapshot(id, record.status, report, read)
    const value = (snapshot as { value: unknown }).value
    const status = statusOfValue(value)
    const context = (snapshot as { context: ThreadContext }).context
    // A crash between a reply and its ledger entry: the transcript says what was spent.
    this.recordUsage(id, context.usage, context.previousThreadId != null)
    if (!isActive(status)) {
      this.releaseLease(id)
      if (status !== 'suspended' && status !== 'continued') this.releaseBudget(id, context.previousThreadId != null)
      // The checkpoint (or transcript) is ahead of the registry: bring the registry in line.
      this.checkpoints.stage(id, makeEnvelope(id, status, this.transcripts.position(id), snapshot, this.clock.now()))
      this.commit.noteCheckpoint(id)
      this.commit.stageRegistry(id, {
        status,
        at: this.clock.now(),
        cost: { ...context.usage },
        outcome: { result: context.result ?? undefined, error: context.error },
      })
      this.transcripts.close(id)
      report.settled.push(id)
      if (status === 'suspended') {
        this.suspended.set(id, context.limitHit?.requestId ?? null)
        if (context.suspendReason === 'limit' && context.limitHit?.requestId) {
          const request = this.approvalRequest(id, context)
          this.commit.whenDurable().then(() => this.writeApprovalRequest(id, request), () => {})
        }
      }
      return context.usage.spend
    }
    if (record.status !== status) this.commit.stageRegistry(id, { status, at: this.clock.now() })
    // Before the actor starts: its effects ask at once whether they are held back.
    const verdict = this.crashLoop.assess(id, { value, context }, tail, this.transcripts.position(id).seq)
    const intents = tail.filter((e) => e.type === 'tool_intent').map((e) => (e.data as { key: string }).key)
    const thread = this.adopt(id, { intents })
    thread.noteBeforeNext('thread_recovered', { at: this.clock.now(), state: value, pid: process.pid })
    // `snapshot` is private to this call: freshly parsed from state.json or rebuilt by replay.
    thread.start(threadMachine, { snapshot })
    this.supervise(id, record.parentId ?? null)
    if (verdict.action === 'quarantine') {
      // Decided before any effect of the restored state can act: effects wait for the checkpoint.
      const at = this.clock.now()
      thread.deliver({ type: 'QUARANTINED', at, recoveries: verdict.recoveries, seq: verdict.seq, message: verdict.message })
      report.quarantined.push(id)
      this.report(crashLoopError(id, verdict), id)
      this.emitLifecycle({ type: 'thread_quarantined', at, threadId: id, recoveries: verdict.recoveries, seq: verdict.seq, error: { code: 'CRASH_LOOP', message: verdict.message } })
      return context.usage.spend
    }
    if (status === 'created') thread.deliver({ type: 'START', at: this.clock.now() })
    else thread.deliverBeforeNext({ type: 'RECOVERED', at: this.clock.now() })
    report.resumed.push(id)
    this.emitLifecycle({ type: 'thread_recovered', at: this.clock.now(), threadId: id, state: value })
    return context.usage.spend
  }

  private markUnrecoverable(id: string, error: unknown, report: RecoveryReport): void {
    this.releaseLease(id)
    // Its reservation goes back to its parent, as for any thread that ends in error.
    this.releaseBudget(id, this.registry.get(id)?.previousThreadId != null)
    const { code, message } = describeError(error)
    report.failed.push({ threadId: id, code, message })
    this.report(error, id)
    this.transcripts.close(id)
    this.commit.stageRegistry(id, { status: 'error', at: this.clock.now(), outcome: { error: { code, message } } })
  }

  /**
   * Forgets the ledger caches of a thread that is no longer live here (rebuilt from the stores if
   * it is loaded again), and the account key it spent from when that is another thread's — a
   * continuation's chain head, stopped before it — so a host running for months holds nothing for
   * threads that ended.
   */
  private dropBudgetCaches(id: string): void {
    const key = this.budgetKeys.get(id)
    this.budgetKeys.delete(id)
    this.accountKnown.delete(id)
    this.recordedTurns.delete(id)
    if (key !== undefined && key !== id && !this.live.has(key)) this.accountKnown.delete(key)
  }

  /** What every live thread of this runtime is lent: one object, not one per thread. */
  private threadServices: ThreadServices | null = null

  private adopt(id: string, options: ConstructorParameters<typeof LiveThread>[2]): LiveThread {
    this.threadServices ??= {
      effects: this.effects,
      transcripts: this.transcripts,
      checkpoints: this.checkpoints,
      commit: this.commit,
      now: () => this.clock.now(),
      report: (error, threadId) => this.report(error, threadId),
      forget: (thread) => {
        const threadId = thread.id
        if (this.live.get(threadId) === thread) {
          this.live.delete(threadId)
          this.groups.delete(threadId)
          this.startSeq.delete(threadId)
          this.releaseLease(threadId)
          this.dropBudgetCaches(threadId)
          this.crashLoop.stopped(threadId)
          this.storageToldAt.delete(threadId)
          const episode = this.parkedThreads.get(threadId)
          if (episode) {
            if (episode.timer !== null) this.clock.clearTimeout(episode.timer)
            this.parkedThreads.delete(threadId)
          }
        }
        this.threadHooks.delete(threadId)
      },
      observe: (live, snapshot, previous) => this.observe(live, snapshot, previous),
      fenced: () => this.fenced(),
      // Forgetting the thread gave its lease up if it was still this process's: then it is an
      // orphan now (the lines ahead are a stopped process's), taken over on the next turn.
      writtenAhead: () => {
        setImmediate(() => this.takeOrphans(Date.now()))
      },
      storageFailed: (thread, error) => this.storageFailed(thread, error),
      ...(this.options.inspect ? { inspect: this.options.inspect } : {}),
    }
    const thread = new LiveThread(id, this.threadServices, options)
    this.live.set(id, thread)
    return thread
  }

  private liveThread(id: string): LiveThread {
    const thread = this.live.get(id)
    if (!thread) throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is not running in this runtime.`)
    return thread
  }

  private threadPath(id: string): string {
    return this.options.store === 'memory' ? `(memory)/${id}` : threadDir(dataPaths(this.dir), id)
  }

  private transcriptExists(id: string): boolean {
    if (this.options.store === 'memory') return false
    return fs.existsSync(`${this.threadPath(id)}/transcript.jsonl`)
  }

  /** @internal A problem a store found (no thread of its own): to `onProblem`. */
  reportProblem(error: unknown, threadId?: string): void {
    this.report(error, threadId)
  }

  /**
   * @internal A thread's folder was no real directory when its checkpoint was written (a link
   * swapped in while it ran): nothing was written through it. The thread ends in `error` with
   * DATA_DIR_INVALID, its files left as they are for a person to look at; the others go on.
   */
  folderInvalid(threadId: string, error: SpindleError): void {
    this.report(error, threadId)
    // Not inside the store's round: abandoning stages the registry change for the next one.
    queueMicrotask(() => {
      const thread = this.live.get(threadId)
      if (thread && !thread.stopped) this.endDamaged(threadId, thread, error)
    })
  }

  /** Ends a thread whose own files are damaged in `error`, as any thread in error ends, without a transition. */
  private endDamaged(id: string, thread: LiveThread, error: SpindleError): void {
    const context: ThreadContext = { ...thread.context(), error: { code: error.code, message: error.message } }
    thread.abandon(error)
    // What the end of any thread in error does (observe), without a transition to observe.
    this.fireHook(thread, 'after_complete', context, { outcome: { status: 'error', result: context.result } })
    this.childFailed(id, context)
    if (this.config.recovery.enabled) this.recoverTask(id, context)
    this.releaseBudget(id, context.previousThreadId != null)
  }

  private report(error: unknown, threadId?: string): void {
    const { code, message } = describeError(error)
    const problem: Problem = { code, message, ...(threadId ? { threadId } : {}) }
    try {
      this.options.onProblem?.(problem)
    } catch {
      // A failing problem handler must not turn one thread's problem into everyone's.
    }
  }

  private assertOpen(): void {
    if (this.closed) throw new SpindleError('RUNTIME_CLOSED', 'This runtime is closed. Open a new one with createRuntime().')
  }
}
