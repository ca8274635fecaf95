/**
 * Rebuilding a thread's snapshot from its transcript. The transcript is the source of truth:
 * replaying its recorded inputs through the (inert) thread machine reproduces state.json.
 */
import { createActor } from 'xstate'
import type { AnyStateMachine } from 'xstate'
import { THREAD_EVENT_TYPES } from '../../machines/threadEvents.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { ThreadInput } from '../../machines/threadContext.js'
import type { ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import { upgradeInputV1toV2 } from '../../persistence/upgrade.js'
import { SpindleError } from '../base/errors.js'
import { statusOfValue } from './threadStatus.js'

const EVENT_TYPES = new Set<string>(THREAD_EVENT_TYPES)

/** Transcript entry type that opens every transcript; its data holds the machine input. */
export const SPAWN_ENTRY = 'thread_spawned'

export function isMachineEventEntry(entry: Pick<TranscriptEntry, 'type'>): boolean {
  return EVENT_TYPES.has(entry.type)
}

export function eventOfEntry(entry: TranscriptEntry): ThreadEvent {
  return { ...(entry.data as object), type: entry.type } as ThreadEvent
}

export interface ReplayOptions {
  /** The machine to replay through (default: spindle's thread machine). Its effects are not run. */
  machine?: AnyStateMachine
  /** Start from this persisted snapshot instead of the transcript's beginning. */
  from?: unknown
}

export interface ReplayResult {
  /** The rebuilt persisted snapshot, as state.json would hold it. */
  snapshot: unknown
  status: ThreadStatus
  /** seq of the last machine input applied (0 if none). */
  appliedSeq: number
  /** How many machine inputs were applied. */
  applied: number
}

/**
 * Replays recorded inputs through the thread machine with its effects inert.
 * Throws REPLAY_DIVERGED naming the first entry the machine would not accept, and
 * TRANSCRIPT_CORRUPT when a full replay does not start with a `thread_spawned` entry.
 *
 * @example
 * const { entries } = store.read(threadId)
 * expect(replayTranscript(entries).snapshot).toEqual(stateJson.snapshot)
 */
export function replayTranscript(entries: readonly TranscriptEntry[], options: ReplayOptions = {}): ReplayResult {
  const machine = options.machine ?? threadMachine
  let actor
  let from = 0
  if (options.from !== undefined) {
    // createActor mutates the snapshot it is given: restore from a private copy.
    actor = createActor(machine, { snapshot: structuredClone(options.from) as never })
  } else {
    const first = entries[0]
    if (!first || first.type !== SPAWN_ENTRY) {
      throw new SpindleError(
        'TRANSCRIPT_CORRUPT',
        `A full replay needs the transcript to start with a "${SPAWN_ENTRY}" entry, but it starts with ` +
          `${first ? `"${first.type}" (seq ${first.seq})` : 'nothing'}.`,
        { details: { seq: first?.seq ?? 0 } },
      )
    }
    // A spawn killed before it returned leaves its first entry, and spawning the same id again
    // (spawn_thread re-run) appends another: the thread is the last spawn's.
    from = entries.findLastIndex((e) => e.type === SPAWN_ENTRY)
    const input = upgradeInputV1toV2((entries[from]!.data as { input: Record<string, unknown> }).input) as unknown as ThreadInput
    actor = createActor(machine, { input })
  }
  actor.start()
  let appliedSeq = 0
  let applied = 0
  try {
    for (const entry of from === 0 ? entries : entries.slice(from)) {
      if (!isMachineEventEntry(entry)) continue
      const event = eventOfEntry(entry)
      const before = actor.getSnapshot()
      if (before.status !== 'active' || !before.can(event)) {
        throw new SpindleError(
          'REPLAY_DIVERGED',
          `Replay diverged at seq ${entry.seq}: the machine in state ${JSON.stringify(before.value)} does not accept ` +
            `${entry.type}. The transcript was recorded by a different machine version or was edited.`,
          { details: { seq: entry.seq, type: entry.type, state: before.value } },
        )
      }
      actor.send(event)
      appliedSeq = entry.seq
      applied++
    }
    const snapshot = actor.getPersistedSnapshot()
    return {
      snapshot: JSON.parse(JSON.stringify(snapshot)),
      status: statusOfValue(actor.getSnapshot().value),
      appliedSeq,
      applied,
    }
  } finally {
    actor.stop()
  }
}
