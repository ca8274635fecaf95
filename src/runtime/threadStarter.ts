/**
 * Starting a new thread once its policy, limits and budget are settled: its lease, its first
 * transcript entry, its actor, its registry row — resolving once all of that is durable. Spawns,
 * hand-offs and recovery attempts all start threads here.
 */
import type { Clock } from '../base/clock.js'
import { SpindleError, describeError, isSpindleError } from '../base/errors.js'
import { newNonce } from '../base/ids.js'
import type { Message } from '../../actors/model.js'
import type { ThreadInput } from '../../machines/threadContext.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import { descriptorAdvice, isDescriptorShortage } from '../../persistence/storageFailure.js'
import type { TranscriptStore } from '../../persistence/types.js'
import type { LiveThread } from '../thread/liveThread.js'
import type { CompiledHooks } from '../policies/hooks.js'
import { SPAWN_ENTRY } from '../thread/replay.js'
import type { Leases } from './leases.js'
import type { PolicyDesk } from './policyDesk.js'
import type { Supervisor } from './supervisor.js'
import type { ThreadTable } from './threadTable.js'
import type { Tracing } from './tracing.js'
import type { EventStream } from './eventStream.js'

/** A spawn that failed for want of storage: nothing of the thread runs, and the caller may spawn again. */
export function notCreated(id: string, error: unknown): SpindleError {
  if (isSpindleError(error) && (error.code === 'STORAGE_FAILED' || error.code === 'DESCRIPTORS_EXHAUSTED')) return error
  if (isDescriptorShortage(error)) {
    return new SpindleError(
      'DESCRIPTORS_EXHAUSTED',
      `Thread ${id} was not created: ${describeError(error).message.replace(/\.?$/, '.')} The process has no file descriptors left: ${descriptorAdvice()}. ` +
        'Nothing of the thread runs; spawn it again once descriptors are free.',
      { cause: error, details: { threadId: id } },
    )
  }
  return new SpindleError(
    'STORAGE_FAILED',
    `Thread ${id} was not created: ${describeError(error).message.replace(/\.?$/, '.')} Nothing of it runs; spawn it again once the disk of the data directory takes writes.`,
    { cause: error, details: { threadId: id } },
  )
}

export interface StarterDeps {
  table: ThreadTable
  transcripts: TranscriptStore
  commit: GroupCommit
  leases: Pick<Leases, 'take'>
  policies: Pick<PolicyDesk, 'remember'>
  supervisor: Pick<Supervisor, 'supervise'>
  clock: Clock
  /** Starts the thread's first run span; the traceparent it returns is kept in the spawn entry. */
  tracing?: Pick<Tracing, 'spawned' | 'forgotten'> | null
  /** The thread event stream, told of the spawn with the registration. */
  events?: Pick<EventStream, 'spawned'>
  /** A new thread was left durable for a worker (`ThreadStart.handOff`): workers are told. */
  handedOff?(id: string): void
}

export interface ThreadStart {
  input: ThreadInput
  hooks: CompiledHooks
  parentId: string | null
  previousThreadId: string | null
  /** A continuation's rebuilt history (recorded in its spawn entry); null: the directive prompt. */
  messages: Message[] | null
  /** Written durably and left for a worker to run rather than started here (this process is full). */
  handOff?: boolean
  /** The id was made up for this spawn: no store holds anything of it yet. */
  fresh?: boolean
}

/** What a made-up id's transcript holds: no lines (a database need not be asked). */
const NO_LINES = { from: 0, rows: [] }

export class ThreadStarter {
  constructor(private readonly deps: StarterDeps) {}

  /**
   * Writes a new thread's first transcript entry, starts its actor and registers it; resolves once
   * all of that is durable. START follows on the next turn of the event loop.
   */
  async start(init: ThreadStart): Promise<LiveThread> {
    const { table, transcripts, commit, clock } = this.deps
    // Threads started from now on keep their last model error (see ThreadInput.keepsLastError).
    const input: ThreadInput = { ...init.input, keepsLastError: true }
    const id = input.threadId
    // Before anything is written: a second spawn entry would end the live thread's replay.
    table.assertVacant(id)
    this.deps.leases.take(id)
    this.deps.policies.remember(id, init.hooks)
    transcripts.open(id, undefined, init.fresh ? NO_LINES : undefined)
    // Outside the input (so the machine's context, which replay checks, never holds it): the trace
    // that every later run of the thread, in any process, continues.
    const traceparent = this.deps.tracing?.spawned(id, input.directive.name, init.parentId, init.previousThreadId) ?? null
    try {
      transcripts.append(id, SPAWN_ENTRY, {
        input,
        parentId: init.parentId,
        ...(init.previousThreadId ? { previousThreadId: init.previousThreadId } : {}),
        ...(init.messages ? { messages: init.messages } : {}),
        ...(traceparent ? { traceparent } : {}),
      })
    } catch (error) {
      this.deps.tracing?.forgotten(id)
      throw error
    }
    const thread = table.adopt(id, {
      messages: init.messages ? [...init.messages] : [{ role: 'user', content: input.directive.prompt }],
      seeded: init.messages !== null,
    })
    thread.start(threadMachine, { input })
    this.deps.supervisor.supervise(id, init.parentId)
    // The row commits in the round that makes the first state.json durable: a thread exists once
    // it is registered, and a registered thread always has files. Files without a row are a spawn
    // that never returned; recovery leaves them alone.
    commit.stageRegistration({
      id,
      directiveName: input.directive.name,
      directive: input.directive,
      parentId: init.parentId,
      previousThreadId: init.previousThreadId,
      nonce: newNonce(),
      createdAt: clock.now(),
    })
    this.deps.events?.spawned(id, { directive: input.directive.name, parentId: init.parentId ?? null, previousThreadId: init.previousThreadId ?? null })
    try {
      await commit.whenDurable()
    } catch (error) {
      // Not created after all (a full disk, say): the caller is told so, so its row is withdrawn
      // before a later round could write it, and it stops here. Files it left are a spawn that
      // never returned, which recovery leaves alone and `spindle doctor` lists.
      commit.withdrawRegistration(id)
      commit.discard(id)
      thread.detach(isSpindleError(error) ? error : notCreated(id, error))
      throw error
    }
    if (init.handOff) {
      // Durable as `created`, and left for a worker: this process runs no more threads. Letting
      // go gives its lease up, so the thread is an orphan every worker sees, and told of at once.
      thread.detach(new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} was handed to a worker: this runtime runs no more threads (maxThreads).`, { details: { threadId: id } }))
      this.deps.handedOff?.(id)
      return thread
    }
    // START comes on the next turn of the event loop, after the caller's `await spawn(...)`
    // continuation has run: a subscriber attached right away sees every transition. A crash before
    // it leaves a durable `created` thread, which recovery starts.
    setImmediate(() => startThread(thread, clock.now()))
    return thread
  }
}

/**
 * Delivers a new thread's START. Its line may not be writable (a database gone a moment after the
 * spawn, a full disk): the thread is parked then, and started when it can write again (Parking);
 * a lease lost meanwhile has stopped it. Nothing thrown here may reach the event loop, where it
 * would end the host process.
 */
export function startThread(thread: LiveThread, at: number): void {
  try {
    thread.deliver({ type: 'START', at })
  } catch (error) {
    if (!thread.parked && !thread.stopped) thread.crash(error)
  }
}
