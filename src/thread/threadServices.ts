/**
 * What a live thread (liveThread.ts) needs from its runtime, wired by the runtime's thread table.
 */
import type { InspectionEvent, StateValue } from 'xstate'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import type { ThreadEffects } from '../../actors/threadEffects.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { CheckpointStore, ThreadStatus, TranscriptStore } from '../../persistence/types.js'
import type { SpindleError } from '../base/errors.js'
import type { ReplyDelta } from '../../actors/replyDelta.js'

/** @internal What a live thread needs from its runtime. */
/** `Thread` is the live thread (LiveThread), named by its user so that this module imports none. */
export interface ThreadServices<Thread> {
  /** The effects a thread's states ask for (model calls, tool calls, waits). */
  effects: ThreadEffects
  transcripts: TranscriptStore
  checkpoints: CheckpointStore
  commit: GroupCommit
  now(): number
  report(error: unknown, threadId: string): void
  /** `thread` stopped here; its id's runtime state goes unless another object holds the id now. */
  forget(thread: Thread): void
  /** Sees every checkpointed transition after it is staged (hooks, approval requests). */
  observe?(thread: Thread, snapshot: { value: StateValue; context: ThreadContext }, previous: { status: ThreadStatus | null; value: StateValue | null }): void
  /**
   * Why this process may no longer write for the thread (its lease ran out by its own clock), or
   * null. Checked before every transcript append: a process that lost a thread stops writing it.
   */
  fenced?(threadId: string): SpindleError | null
  /**
   * The thread's transcript goes on past its last line, written by another process: this one
   * stopped it (and gave its lease up, if it still held it). The lines may be those of a process
   * that had lost the thread, written in the moment between its check and its write; then nobody
   * runs it now, and the runtime takes it over again at once instead of at its next heartbeat.
   */
  writtenAhead?(threadId: string): void
  /**
   * A write of the thread's failed for want of storage (a full disk, an I/O error): the thread is
   * parked (`park`), and the runtime tries it again later (`unpark`).
   */
  storageFailed?(thread: Thread, error: unknown): void
  /**
   * The outcome `done` resolves with: a valid structured answer as the host's zod schema parses it,
   * where this process spawned the thread with one.
   */
  outputOf?(threadId: string, outcome: ThreadOutcome): ThreadOutcome
  /** The thread's streamed replies, as `handle.replies()` gives them (src/runtime/replyStream.ts). */
  replies(thread: Thread): AsyncIterableIterator<ReplyDelta>
  /** XState inspection (e.g. @statelyai/inspect's `inspector.inspect`): every actor event, snapshot and transition. */
  inspect?: (event: InspectionEvent) => void
}
