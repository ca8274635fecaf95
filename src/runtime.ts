/**
 * The runtime host programs use: spawn threads, find them, and carry every unfinished thread on
 * after a crash.
 */
import fs from 'node:fs'
import type { AnyStateMachine } from 'xstate'
import type { ModelAdapter } from '../actors/model.js'
import type { Clock, EffectHost } from '../actors/threadEffects.js'
import { createThreadEffects, systemClock } from '../actors/threadEffects.js'
import type { Tool } from '../actors/tools.js'
import { toolDefinition } from '../actors/tools.js'
import type { Limits, ThreadContext, ThreadInput, ThreadOutcome } from '../machines/thread.machine.js'
import { outcomeOf, threadMachine } from '../machines/thread.machine.js'
import { createFileCheckpointStore } from '../persistence/fileCheckpointStore.js'
import { makeEnvelope } from '../persistence/envelope.js'
import { GroupCommit } from '../persistence/groupCommit.js'
import type { CommitStats } from '../persistence/groupCommit.js'
import { createJsonlTranscriptStore } from '../persistence/jsonlTranscript.js'
import { createMemoryCheckpointStore } from '../persistence/memoryCheckpointStore.js'
import { createMemoryTranscriptStore } from '../persistence/memoryTranscript.js'
import { dataPaths, threadDir } from '../persistence/paths.js'
import { openSqliteRegistry } from '../persistence/sqliteRegistry.js'
import type {
  CheckpointStore,
  Durability,
  Registry,
  StateEnvelope,
  ThreadRecord,
  ThreadStatus,
  TranscriptEntry,
  TranscriptStore,
} from '../persistence/types.js'
import { SpindleError, describeError, isSpindleError } from './errors.js'
import { assertThreadId, newNonce, newThreadId } from './ids.js'
import type { ThreadHandle, ThreadView } from './liveThread.js'
import { LiveThread, viewOf } from './liveThread.js'
import type { RetryPolicy } from './policies/classifyError.js'
import { classifyError, retryDelayMs } from './policies/classifyError.js'
import { mergeConfig, systemDefaults } from '../config/load.js'
import { ConfigLayerSchema } from '../config/schema.js'
import type { Config, ConfigLayer } from '../config/schema.js'
import { SPAWN_ENTRY, isMachineEventEntry, replayTranscript } from './replay.js'
import { isActive, statusOfValue } from './threadStatus.js'

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
}

export interface Problem {
  threadId?: string
  code: string
  message: string
}

export interface SpawnOptions {
  directive: { name: string; prompt: string }
  limits?: Partial<Limits>
  parentId?: string
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
  /** Stops every live thread where it is (its checkpoint stays) and closes the stores. */
  close(): Promise<void>
}

/** Validates a layer of options against the configuration schema, naming the field that is wrong. */
function validateLayer(layer: ConfigLayer, where: string): ConfigLayer {
  const result = ConfigLayerSchema.safeParse(layer)
  if (result.success) return result.data
  const issue = result.error.issues[0]!
  const field = issue.path.join('.')
  throw new SpindleError('INVALID_OPTIONS', `${where}: ${field} ${issue.message.toLowerCase()} (got ${JSON.stringify(fieldValue(layer, issue.path))}).`, {
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
  if (memory) {
    transcripts = createMemoryTranscriptStore()
    checkpoints = createMemoryCheckpointStore()
    registry = openSqliteRegistry({ path: ':memory:', durability })
  } else {
    fs.mkdirSync(paths.threads, { recursive: true })
    transcripts = createJsonlTranscriptStore({ paths, durability })
    checkpoints = createFileCheckpointStore({ paths, durability })
    registry = openSqliteRegistry({ path: paths.registry, durability })
  }
  let runtime: RuntimeImpl
  try {
    runtime = new RuntimeImpl(options, durability, paths.root, transcripts, checkpoints, registry)
  } catch (error) {
    transcripts.closeAll()
    registry.close()
    throw error
  }
  if (options.recover !== false) await runtime.recover()
  return runtime
}

class RuntimeImpl implements Runtime {
  readonly dir: string
  lastRecovery: RecoveryReport = { resumed: [], settled: [], rebuilt: [], failed: [] }
  private readonly live = new Map<string, LiveThread>()
  private readonly commit: GroupCommit
  private readonly machine: AnyStateMachine
  private readonly clock: Clock
  private readonly retry: RetryPolicy
  private readonly config: Config
  private closed = false

  constructor(
    private readonly options: RuntimeOptions,
    readonly durability: Durability,
    root: string,
    private readonly transcripts: TranscriptStore,
    private readonly checkpoints: CheckpointStore,
    private readonly registry: Registry,
  ) {
    this.dir = root
    this.clock = options.clock ?? systemClock
    this.config = mergeConfig(
      systemDefaults(),
      validateLayer({ limits: options.defaultLimits, retry: options.retry, timeouts: options.timeouts }, 'createRuntime options'),
    )
    this.retry = this.config.retry
    this.commit = new GroupCommit(
      { transcripts, checkpoints, registry },
      (threadId, error) => this.report(error, threadId),
      (error) => this.report(error),
    )
    const tools = new Map<string, Tool>()
    for (const tool of options.tools ?? []) {
      if (tools.has(tool.name)) {
        throw new SpindleError('INVALID_OPTIONS', `Two tools are named "${tool.name}"; tool names must be unique.`, {
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
      modelTimeoutMs: this.config.timeouts.modelMs,
      toolTimeoutMs: this.config.timeouts.toolMs,
      checkpointed: () => this.commit.whenLogged(),
      deliver: (id, event) => this.live.get(id)?.deliver(event) ?? false,
      messages: (id) => this.liveThread(id).messages(),
      directiveName: (id) => this.liveThread(id).directiveName(),
      classifyModelFailure: (error, attempt) => {
        const classified = classifyError(error, this.clock.now())
        return { failure: classified.failure, retryInMs: retryDelayMs(classified, attempt, this.retry) }
      },
      hasToolIntent: (id, key) => this.live.get(id)?.hasToolIntent(key) ?? false,
      recordToolIntent: async (id, key, call) => {
        this.liveThread(id).recordToolIntent(key, call)
        await this.commit.whenLogged()
      },
      crash: (id, error) => this.live.get(id)?.crash(error),
    }
    this.machine = threadMachine.provide({ actors: createThreadEffects(host) })
  }

  async spawn(options: SpawnOptions): Promise<ThreadHandle> {
    this.assertOpen()
    validateSpawn(options)
    const limits = mergeConfig(this.config, validateLayer({ limits: options.limits }, 'spawn')).limits
    if (options.parentId !== undefined) assertThreadId(options.parentId)
    const directive = { name: options.directive.name, prompt: options.directive.prompt }
    const id = newThreadId(directive.name)
    const input: ThreadInput = { threadId: id, directive, limits, maxRetries: this.retry.maxRetries }
    this.transcripts.open(id)
    this.transcripts.append(id, SPAWN_ENTRY, { input, parentId: options.parentId ?? null })
    const thread = this.adopt(id, { messages: [{ role: 'user', content: directive.prompt }] })
    thread.start(this.machine, { input })
    // The row commits in the round that makes the first state.json durable: a thread exists once
    // it is registered, and a registered thread always has files. Files without a row are a spawn
    // that never returned; recovery leaves them alone.
    this.commit.stageRegistration({
      id,
      directiveName: directive.name,
      directive,
      parentId: options.parentId ?? null,
      nonce: newNonce(),
      createdAt: this.clock.now(),
    })
    await this.commit.whenDurable()
    // START comes on the next turn of the event loop, after the caller's `await spawn(...)`
    // continuation has run: a subscriber attached right away sees every transition. A crash before
    // it leaves a durable `created` thread, which recovery starts.
    setImmediate(() => thread.deliver({ type: 'START', at: this.clock.now() }))
    return thread
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
    const report: RecoveryReport = { resumed: [], settled: [], rebuilt: [], failed: [] }
    for (const record of this.registry.activeStatuses()) {
      if (this.live.has(record.id)) continue
      try {
        this.rehydrate(record, report)
      } catch (error) {
        this.markUnrecoverable(record.id, error, report)
      }
    }
    // Settled and failed threads changed stored status: make that durable before reporting it.
    // Resumed threads need no wait here; their first effect waits for their transcript anyway.
    if (report.settled.length + report.failed.length + report.rebuilt.length > 0) await this.commit.whenDurable()
    this.lastRecovery = report
    return report
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    const reason = new SpindleError('RUNTIME_CLOSED', 'The runtime was closed; the thread stays checkpointed and resumes when a runtime opens this directory again.')
    for (const thread of [...this.live.values()]) thread.detach(reason)
    try {
      await this.commit.close()
    } finally {
      this.transcripts.closeAll()
      this.registry.close()
    }
  }

  private rehydrate(record: { id: string; status: ThreadStatus }, report: RecoveryReport): void {
    const id = record.id
    let envelope: StateEnvelope | null = null
    let damaged: unknown = null
    try {
      envelope = this.checkpoints.load(id)
    } catch (error) {
      if (!isSpindleError(error) || (error.code !== 'STATE_CORRUPT' && error.code !== 'STATE_VERSION_UNSUPPORTED')) throw error
      damaged = error
      this.report(error, id)
    }
    let snapshot: unknown
    let tail: TranscriptEntry[]
    if (envelope) {
      const opened = this.transcripts.open(id, envelope.transcript)
      tail = opened.tail
      snapshot = tail.some(isMachineEventEntry)
        ? replayTranscript(tail, { from: envelope.snapshot }).snapshot
        : envelope.snapshot
    } else {
      // No usable state.json: the transcript is the source of truth, replay it whole.
      const opened = this.transcriptExists(id) ? this.transcripts.open(id) : null
      if (!opened || opened.tail.length === 0) {
        // A kill between registering a thread and its first transcript line: spawn never returned.
        throw new SpindleError(
          'FILES_MISSING',
          `Thread ${id} is registered as ${record.status} but has no state.json and ` +
            `${opened ? 'an empty transcript.jsonl' : 'no transcript.jsonl'} in ${this.threadPath(id)}. It was registered ` +
            'but never checkpointed, so no step of it was acknowledged; it is marked error.',
          { details: { threadId: id, dir: this.threadPath(id) } },
        )
      }
      tail = opened.tail
      snapshot = replayTranscript(tail).snapshot
      report.rebuilt.push(id)
      if (damaged) this.report(new Error(`state.json of ${id} was rebuilt from its transcript`), id)
    }
    const value = (snapshot as { value: unknown }).value
    const status = statusOfValue(value)
    const context = (snapshot as { context: ThreadContext }).context
    if (!isActive(status)) {
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
      return
    }
    if (record.status !== status) this.commit.stageRegistry(id, { status, at: this.clock.now() })
    const intents = tail.filter((e) => e.type === 'tool_intent').map((e) => (e.data as { key: string }).key)
    const thread = this.adopt(id, { intents })
    thread.noteBeforeNext('thread_recovered', { at: this.clock.now(), state: value, pid: process.pid })
    // `snapshot` is private to this call: freshly parsed from state.json or rebuilt by replay.
    thread.start(this.machine, { snapshot })
    if (status === 'created') thread.deliver({ type: 'START', at: this.clock.now() })
    report.resumed.push(id)
  }

  private markUnrecoverable(id: string, error: unknown, report: RecoveryReport): void {
    const { code, message } = describeError(error)
    report.failed.push({ threadId: id, code, message })
    this.report(error, id)
    this.transcripts.close(id)
    this.commit.stageRegistry(id, { status: 'error', at: this.clock.now(), outcome: { error: { code, message } } })
  }

  private adopt(id: string, options: ConstructorParameters<typeof LiveThread>[2]): LiveThread {
    const thread = new LiveThread(
      id,
      {
        transcripts: this.transcripts,
        checkpoints: this.checkpoints,
        commit: this.commit,
        now: () => this.clock.now(),
        report: (error, threadId) => this.report(error, threadId),
        forget: (threadId) => {
          if (this.live.get(threadId) === thread) this.live.delete(threadId)
        },
      },
      options,
    )
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
