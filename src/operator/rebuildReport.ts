/**
 * `spindle rebuild`'s comparison, the same on a data directory (operator.ts) and on a database
 * (databaseRebuild.ts): the thread's transcript replayed, and what its stored checkpoint says
 * against it; and, with --apply, the registry row brought in line with the replay.
 */
import { isDeepStrictEqual } from 'node:util'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { Registry, StateEnvelope, ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import { describeError, isSpindleError } from '../base/errors.js'
import { replayTranscript } from '../thread/replay.js'
import { isActive } from '../thread/threadStatus.js'
import { checkTranscript } from './transcriptCheck.js'
import type { TranscriptFinding } from './transcriptCheck.js'

export interface RebuildReport {
  threadId: string
  /** What the rebuilt snapshot says. */
  rebuilt: { status: ThreadStatus; value: unknown; appliedSeq: number }
  /** What the checkpoint (state.json) said, or why it could not be read. */
  stored: { status: ThreadStatus; value: unknown; transcriptSeq: number } | { problem: { code: string; message: string } } | null
  /** Whether the checkpoint equals the replay of the transcript up to the position it records. */
  matches: boolean
  /** Transcript entries after the position the checkpoint records (a crash leaves some; recovery replays them). */
  behind: number
  applied: boolean
  /** What the transcript check found besides the chain: unknown types, invalid transitions, unknown threads. */
  findings: TranscriptFinding[]
  /**
   * Approval requests the thread no longer waits at whose decision is not stored, with the
   * decision the transcript holds: `written` once `--apply` stored it.
   */
  decisions: Array<{ requestId: string; decision: string; written: boolean }>
}

export type Replayed = ReturnType<typeof replayTranscript>

/**
 * The report of thread `id` with its `entries` (verified) and its checkpoint as `load` reads it;
 * `known` says whether a thread the transcript names exists. `full` is null when the transcript
 * holds a transition its machine does not allow: there is nothing to rebuild from.
 */
export function compareWithTranscript(
  id: string,
  entries: readonly TranscriptEntry[],
  load: () => StateEnvelope | null,
  known: (threadId: string) => boolean,
): { report: RebuildReport; full: Replayed | null } {
  let envelope: StateEnvelope | null = null
  let stored: RebuildReport['stored'] = null
  try {
    envelope = load()
    if (envelope) stored = { status: envelope.status, value: (envelope.snapshot as { value: unknown }).value, transcriptSeq: envelope.transcript.seq }
  } catch (error) {
    if (!isSpindleError(error)) throw error
    stored = { problem: describeError(error) }
  }
  const findings = checkTranscript([...entries], known)
  if (findings.some((f) => f.kind === 'invalid_transition')) {
    const status = stored && 'status' in stored ? stored.status : 'error'
    return { report: { threadId: id, rebuilt: { status, value: null, appliedSeq: 0 }, stored, matches: false, behind: 0, applied: false, findings, decisions: [] }, full: null }
  }
  const full = replayTranscript([...entries])
  const upTo = envelope?.transcript.seq ?? Number.POSITIVE_INFINITY
  const comparable = envelope ? replayTranscript(entries.filter((e) => e.seq <= upTo)).snapshot : null
  const report: RebuildReport = {
    threadId: id,
    rebuilt: { status: full.status, value: (full.snapshot as { value: unknown }).value, appliedSeq: full.appliedSeq },
    stored,
    matches: envelope !== null && isDeepStrictEqual(comparable, envelope.snapshot),
    behind: envelope ? entries.filter((e) => e.seq > upTo).length : entries.length,
    applied: false,
    findings,
    decisions: [],
  }
  return { report, full }
}

/** The registry row of thread `id` as the replay says: its cost, its outcome once it stopped, its status. */
export function bringRegistryInLine(registry: Registry, id: string, full: Replayed, at: number): void {
  const context = (full.snapshot as { context: ThreadContext }).context
  registry.transaction(() => {
    registry.updateCostSnapshot(id, context.usage)
    if (!isActive(full.status)) registry.setResult(id, { result: context.result ?? undefined, error: context.error })
    registry.updateStatus(id, full.status, at, context.suspendReason)
  })
}
