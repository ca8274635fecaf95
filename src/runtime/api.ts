/**
 * The runtime's public types: the options it opens with, the calls a host makes, and what it
 * reports back. Types only; `createRuntime` (createRuntime.ts) implements them.
 */
import type { Clock } from '../base/clock.js'
import type { ModelAdapter } from '../../actors/model.js'
import type { Tool } from '../../actors/tools.js'
import type { Limits, RetryPolicy } from '../../machines/threadPolicy.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import type { RestartType, SupervisionStrategy } from '../../machines/orchestrator.machine.js'
import type { Config, ConfigLayer } from '../../config/schema.js'
import type { CommitStats } from '../../persistence/groupCommit.js'
import type { Durability, ThreadRecord, ThreadStatus } from '../../persistence/types.js'
import type { CodeHook, HookSpec } from '../policies/hooks.js'
import type { RecoveryDecision } from '../policies/recovery.js'
import type { ThreadHandle } from '../thread/threadView.js'
import type { BudgetView, ChildSummary } from './budgetView.js'
import type { EventsOptions, ThreadStreamEvent, ThreadStreamEventType } from './streamEvents.js'
import type { WaitOptions, WaitReport } from '../thread/waits.js'
import type { ReplyDelta } from '../../actors/replyDelta.js'
import type { RepliesOptions } from './replyStream.js'
import type { TelemetryOptions } from './telemetryOptions.js'
import type { InspectionEvent } from 'xstate'
import type { z } from 'zod'

export interface RuntimeOptions {
  /**
   * Data directory: `registry.db` and `threads/<id>/{state.json,transcript.jsonl}`. With
   * `database`, only where the project layer `config.yaml` is read from (optional).
   */
  dir?: string
  /**
   * A PostgreSQL database to keep every thread in, instead of the data directory: a URL
   * (`postgres://user:password@host:5432/db`) or `{ url, schema, connections }`. Default: the
   * environment variable SPINDLE_DATABASE_URL when set. Every runtime process on every host that
   * opens the same database shares its threads (see docs/postgres.md). `connections` (1–16,
   * default 3): the most connections this process holds.
   */
  database?: string | { url: string; schema?: string; connections?: number }
  /** The model threads run on; the same as `models: { default: model }`. */
  model?: ModelAdapter
  /**
   * Several models by name, e.g. `{ default, fast, smart }`: a directive, a spawn or a
   * `spawn_thread` call names the one its thread runs on (a child inherits its parent's unless it
   * names its own); `default` runs threads that name none. Give `model` or `models`, not both.
   */
  models?: Record<string, ModelAdapter>
  tools?: Tool<any>[]
  /**
   * 'fsync' (default): an acknowledged step survives power loss — every effect waits until the
   * checkpoint that starts it has been fsynced. 'process': it survives a crash of this process
   * (the OS has the bytes), not a power loss or kernel crash.
   */
  durability?: Durability
  /** 'file' (default) or 'memory': nothing on disk, for tests and benchmarks. */
  store?: 'file' | 'memory'
  /**
   * Most transcript files kept open at once (default: a quarter of the process's descriptor limit,
   * from 16 to 4096). A live thread's file is opened again when it writes after its descriptor was
   * given up (the least recently written go first), so this bounds descriptors, not threads; files
   * given up are closed once their lines are fdatasynced (at most as many again meanwhile).
   */
  maxOpenTranscripts?: number
  /**
   * The most threads this process runs at once (default: no limit). Recovery and orphan takeover
   * take no more than there is room for; a spawn beyond it is written durably and left for a
   * worker with room — a runtime on a database with `maxThreads: 0` only spawns and watches (a web
   * server), and its handles' `done` settles when the thread ends on whichever worker ran it.
   * Children run with their parent whatever the room (they count against it for other threads):
   * those it spawns (`spawn_thread`) and those taken over with it, since it waits for them.
   */
  maxThreads?: number
  /** Carry unfinished threads on when the runtime opens (default true). */
  recover?: boolean
  /** Limits for threads that do not set their own, over config/defaults.yaml's `limits`. null is unlimited. */
  defaultLimits?: Partial<Limits>
  /** Over config/defaults.yaml's `retry`. */
  retry?: Partial<RetryPolicy>
  /**
   * Over config/defaults.yaml's `timeouts`: `modelMs` abandons a model call (classified transient),
   * `toolMs` is the default tool timeout, `shutdownGraceMs` how long `close()` lets the tool calls
   * under way finish.
   */
  timeouts?: Partial<Config['timeouts']>
  /**
   * Process signals on which the runtime closes by itself, as `close()` does (default
   * `['SIGINT', 'SIGTERM']`): a deploy, `docker stop` or Ctrl-C then stops its threads cleanly
   * instead of killing them mid-step. Once it has closed, a host that listens for the signal too
   * decides what the process does; otherwise the signal is raised again and ends the process as
   * usual. `[]`: the runtime installs no listener, and the host closes it.
   */
  shutdownSignals?: NodeJS.Signals[]
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
   * XState inspection of every thread actor and the orchestrator: it sees every event and snapshot
   * (prompts, replies, tool results). `inspector.inspect` of @statelyai/inspect's sky inspector
   * shows them in the Stately inspector by sending them to its relay on the internet
   * (`spindle demo --inspect-stately`).
   */
  inspect?: (event: InspectionEvent) => void
  /**
   * OpenTelemetry traces (docs/tracing.md): with `@opentelemetry/api` installed and a tracer
   * provider registered (or given here), a span per thread run, turn, model call and tool call.
   * Prompts, replies and tool inputs and outputs go on them only with `recordContent: true`.
   * `false`: no spans, and the API is not even loaded.
   */
  telemetry?: TelemetryOptions | false
}

/** What the orchestrator tells host code, so a UI never shows a dead thread as alive. */
export type LifecycleEvent =
  | { type: 'runtime_ready'; at: number; recovery: RecoveryReport }
  | { type: 'thread_recovered'; at: number; threadId: string; state: unknown }
  | { type: 'thread_crashed'; at: number; threadId: string; error: { code: string; message: string } }
  | { type: 'thread_restarted'; at: number; threadId: string; crashed: string; restartsInWindow: number }
  /**
   * A write of the thread's failed for want of storage (a full disk, an I/O error: STORAGE_FAILED;
   * no file descriptors left: DESCRIPTORS_EXHAUSTED): it is parked at its last recorded input and
   * tried again by itself, backing off (`thread_unparked` when it goes on). Short of descriptors, it
   * stops trying after a minute (its `done` rejects with DESCRIPTORS_EXHAUSTED).
   */
  | { type: 'thread_parked'; at: number; threadId: string; error: { code: 'STORAGE_FAILED' | 'DESCRIPTORS_EXHAUSTED'; message: string } }
  /** A parked thread's disk took writes again: it goes on from where it was parked. */
  | { type: 'thread_unparked'; at: number; threadId: string; since: number; attempts: number }
  | { type: 'supervision_gave_up'; at: number; threadIds: string[]; crashed: string; report: string }
  /**
   * Recovery found the thread at the same point `recoveries` times in a row, each time after the
   * process running it died: it is suspended (CRASH_LOOP) instead of run again. `seq`: where it stuck.
   */
  | { type: 'thread_quarantined'; at: number; threadId: string; recoveries: number; seq: number; error: { code: 'CRASH_LOOP'; message: string } }
  /**
   * A thread suspended at a tool call that waits for a person: `kind` 'approval' (approve or deny
   * it: `rt.approve`, `rt.deny`) or 'wait' (answer it: `rt.answer`; `request` says what is asked).
   * Told by the process that ran the thread, once the suspension is recorded.
   */
  | { type: 'call_waiting'; at: number; threadId: string; kind: 'approval' | 'wait'; requestId: string; tool: string; callId: string; input: unknown; request: unknown; deadlineAt: number | null }
  | { type: 'thread_followed_up'; at: number; threadId: string; nextThreadId: string }
  | { type: 'thread_continued'; at: number; threadId: string; nextThreadId: string; cause: 'context_window_pressure' | 'context_length' | 'reduced_context' }
  | { type: 'child_thread_failed'; at: number; threadId: string; parentId: string; error: { code: string; message: string } }
  /** A thread's share of its tree's budget ran out: it suspended (reason `budget`). */
  | { type: 'budget_exhausted'; at: number; threadId: string; parentId: string | null; amount: 'spend' | 'tokens' | 'wallTimeMs' | 'retries'; used: number; max: number }
  /** Recovery escalation decided what follows a failed thread. */
  | { type: 'recovery_decided'; at: number; threadId: string; taskKey: string; decision: RecoveryDecision; message: string }
  /** A thread recovery escalation started to try a failed task again. */
  | { type: 'recovery_started'; at: number; threadId: string; taskKey: string; handler: string; attempt: number; retryOf: string }
  /**
   * Recovery at open (or `rt.recover()`) is under way: `done` of `total` unfinished threads looked
   * at, by outcome, and what the recovered ones had spent. Sent first with done 0, then at most
   * every 100 ms, and last with done = total.
   */
  | { type: 'recovery_progress'; at: number; done: number; total: number; resumed: number; settled: number; rebuilt: number; failed: number; elsewhere: number; spend: number }
  /** Budget governance acted on a thread. */
  | { type: 'governance_applied'; at: number; threadId: string; exceededKeys: string[]; action: string; degradeStep: number }

export type LifecycleEventType = LifecycleEvent['type']

export interface Problem {
  threadId?: string
  code: string
  message: string
}

/** An output schema: a zod schema, or a JSON Schema object. */
export type OutputSpec = z.ZodType | Record<string, unknown>

/** The value `done` gives for an output schema: a zod schema's output type; for a JSON Schema, unknown. */
export type OutputOf<Output> = Output extends z.ZodType ? z.output<Output> : unknown

/** What a thread is told to do, and the configuration that travels with it (the directive layer). */
export interface DirectiveSpec<Output extends OutputSpec = OutputSpec> {
  name: string
  /** The task: the conversation's first user message. */
  prompt: string
  /**
   * The system prompt: who the agent is and how it works, given to the model on every call (the
   * AI SDK adapter passes it as the system message). Kept with the thread: a thread carried on
   * after a crash, or resumed later, runs with the instructions it started with. A child spawned
   * with `spawn_thread` has only the instructions that call gives it.
   */
  instructions?: string
  /** The name of one of the runtime's `models` to run it on (default: its parent's, else `default`). */
  model?: string
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
  /**
   * Tool approvals over the configuration's: `tools` adds tools whose every call waits for a
   * person's approval; `timeoutSeconds` and `onTimeout` say how long a request waits and what it
   * becomes then.
   */
  approvals?: ConfigLayer['approvals']
  /**
   * What the final answer must be (structured results): a zod schema, or a JSON Schema object. The
   * answer is parsed as JSON (a ```json fence is allowed) and validated; one that fails goes back
   * to the model with the errors, up to config `output.maxTries` answers in all, then the thread
   * ends in `error` (OUTPUT_INVALID). `done` gives the valid value as `output`, typed by a zod
   * schema's output type. Kept with the thread as JSON Schema (a zod schema's input side; one that
   * has none, e.g. `z.date()`, is refused with OUTPUT_SCHEMA_INVALID): a process that carries the
   * thread on without the zod schema validates with it and gives the JSON the model wrote.
   */
  output?: Output
}

export interface SpawnOptions<Output extends OutputSpec = OutputSpec> {
  directive: DirectiveSpec<Output>
  /** The name of one of the runtime's `models`, over the directive's `model`. */
  model?: string
  /**
   * The thread's id, chosen by the caller (an order number, a chat id): spawning is then
   * idempotent. The same id with the same directive — `name`, `prompt` and `instructions` — and the
   * same `parentId` returns the thread of that id, from any process on the data directory, even
   * while the first spawn is still under way: live, its live handle; run by another process or
   * stopped, what `rt.get(id)` returns (a completed thread's `done` resolves with its outcome).
   * Another directive or parent under an existing id is refused (THREAD_ID_TAKEN). The other
   * options of a repeated spawn are not compared: the thread keeps those it was made with. 1 to 76
   * lower-case letters, digits, `-` and `_`, starting with a letter or digit (INVALID_THREAD_ID
   * otherwise). Absent: a new id, e.g. `research-3f9k2m1x0q7a`.
   */
  id?: string
  /** Per-spawn overrides, over the directive's. A child's limits are also capped by its parent's. */
  limits?: Partial<Limits>
  retry?: Partial<RetryPolicy>
  escalation?: ConfigLayer['escalation']
  hooks?: HookSpec[]
  /** Tool approvals over the directive's (tools add up). */
  approvals?: ConfigLayer['approvals']
  parentId?: string
  /** How the supervisor treats this thread after a crash (default: config `supervision.restart`). */
  restart?: RestartType
  /** The restart strategy for this thread's own children (default: config `supervision.strategy`). */
  childStrategy?: SupervisionStrategy
}

export interface FollowUpOptions {
  /** Limits over the conversation's so far: they count its whole usage, not this exchange's alone. */
  limits?: Partial<Limits>
}

export interface ApproveOptions {
  /** At a limit: the new limits; default: the proposal of the approval request. */
  limits?: Partial<Limits>
  /**
   * At a tool approval: the input to run the call with instead of the model's, checked by the
   * tool's schema (TOOL_INPUT_INVALID, and nothing decided, when it fails).
   */
  input?: unknown
  /**
   * The request being decided, as the caller saw it (`rt.pending`, the request file): refused
   * with NO_PENDING_APPROVAL when the thread has moved on to another one meanwhile.
   */
  requestId?: string
  /** Who approved, recorded in the transcript (default 'api'). */
  by?: string
  message?: string
}

export interface AnswerOptions {
  /** Who answered, recorded in the transcript (default 'api'). */
  by?: string
  /** The request being answered, as the caller saw it: refused when the thread waits at another. */
  requestId?: string
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
  /** Starts a thread; with a zod output schema, its handle's `done` is typed by the schema's output. */
  spawn<Output extends OutputSpec = OutputSpec>(options: SpawnOptions<Output>): Promise<ThreadHandle<OutputOf<Output>>>
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
  /**
   * Denies what a suspended thread waits at. At a limit it ends `cancelled` with its partial
   * result. At a tool approval the call does not run: the model gets the denial and `reason` as the
   * call's result, and the thread goes on; the promise resolves when the thread ends (its handle:
   * `rt.get(id)`).
   */
  deny(id: string, reason?: string, options?: { by?: string; requestId?: string }): Promise<ThreadOutcome>
  /**
   * Answers the call a thread waits at (the built-in `ask_human`, or a tool that returned
   * `waitForAnswer`): `answer` (any JSON value) becomes the call's result and the thread goes on,
   * from whichever process holds the thread. Resolves with its handle once the answer is recorded.
   */
  answer(id: string, answer: unknown, options?: AnswerOptions): Promise<ThreadHandle>
  /** Carries on a thread suspended for a reason other than a limit (an error that outlasted its retries). */
  resume(id: string, options?: { by?: string }): Promise<ThreadHandle>
  /**
   * The next user message of a conversation: starts the successor of a completed thread spawned by
   * host code, with the whole conversation so far, its directive, limits and usage carried on, and
   * the message as the last user turn. Resolves with the successor's handle once it is durable.
   * FOLLOW_UP_REFUSED for a thread not completed, a child, or one already followed up (the message
   * names the conversation's latest thread).
   */
  followUp(id: string, message: string, options?: FollowUpOptions): Promise<ThreadHandle>
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
  /**
   * Thread `id`'s budget from the ledger: its limit, what it spent (`own`, itself alone; `total`,
   * with its descendants), what its open children hold reserved, and what is available (limit −
   * total − reserved). A continuation shows its chain's one budget (`accountId`: the chain's first
   * thread). A thread with no account (an unlimited root that never spawned) shows null limits
   * and its own spend. The same figures for a thread another process runs on the directory.
   * THREAD_NOT_FOUND for an unknown thread.
   */
  budget(id: string): BudgetView
  /** The threads `id` spawned (its direct children, with their continuations), in spawn order. THREAD_NOT_FOUND for an unknown thread. */
  children(id: string): ChildSummary[]
  /**
   * Model replies as they stream, every thread's (or `threadId`'s): text and tool-call deltas of
   * each call made while the iterator is open, each call closed by `reply_recorded` (durable) or
   * `reply_discarded` (a failed, cancelled, timed-out or closed attempt: none of it counts; a retry
   * streams again as the next attempt). Ends on `signal`, on `return()` (a `break` out of
   * `for await`) or when the runtime closes. Nothing streamed is recorded; a call nobody listens to
   * streams nothing. A consumer that falls behind gets text pieces joined, and past 1000 waiting
   * deltas loses the oldest. See docs/streaming.md.
   */
  replies(options?: RepliesOptions): AsyncIterableIterator<ReplyDelta>
  /**
   * Calls `listener` with every streamed delta of every thread, synchronously as it arrives (no
   * buffering: a listener must be quick). Returns the unsubscribe function. A listener that throws
   * is reported to `onProblem`; the thread streams on.
   */
  onReply(listener: (delta: ReplyDelta) => void): () => void
  /** Listens for one lifecycle event type (or '*' for all); returns the unsubscribe function. */
  on<T extends LifecycleEventType | '*'>(type: T, listener: (event: T extends '*' ? LifecycleEvent : Extract<LifecycleEvent, { type: T }>) => void): () => void
  /**
   * Listens for one type of the thread event stream (or 'thread.*' for all of them), from now on:
   * the changes of every thread of the data directory, made in this process or another (told
   * within `events.pollMs`). '*' above is the lifecycle events of this process only. Returns the
   * unsubscribe function. See docs/events.md.
   */
  on<T extends ThreadStreamEventType | 'thread.*'>(type: T, listener: (event: T extends 'thread.*' ? ThreadStreamEvent : Extract<ThreadStreamEvent, { type: T }>) => void): () => void
  /**
   * The thread event stream: every lifecycle change of every thread of the data directory
   * (spawned, started, suspended, approval or question pending, approved, denied, answered,
   * resumed, retrying, cancelled, completed, error, continued, taken over), from whichever process
   * made it, in the order they were committed. Each event has a `cursor`: `events({ after })`
   * resumes right after it, none missed, none twice (within `events.retentionDays`). Without
   * `after` it starts with the next event. Ends when `signal` aborts, on `return()`, or when the
   * runtime closes. See docs/events.md.
   */
  events(options?: EventsOptions): AsyncIterableIterator<ThreadStreamEvent>
  /**
   * Ends an orphan — a created or running thread no live process holds — without running it:
   * `error` (ORPHAN_MARKED) or `cancelled`. Takes its lease first; a thread a live process holds is refused.
   */
  settleOrphan(id: string, action: 'mark_error' | 'mark_cancelled', reason?: string): Promise<ThreadOutcome>
  /** The merged configuration this runtime runs with. */
  readonly config: Config
  /**
   * Stops every live thread where it is (its checkpoint stays) and closes the stores. Nothing new
   * starts from the moment it is called; tool calls under way get `timeouts.shutdownGraceMs` to
   * finish and have their results recorded, then what is left is aborted. Resolves once all is
   * written; a second call returns the same promise.
   */
  close(): Promise<void>
}

/** A recovery report with nothing in it yet. */
export function emptyRecoveryReport(): RecoveryReport {
  return { resumed: [], settled: [], rebuilt: [], failed: [], elsewhere: [], restored: [], quarantined: [] }
}
