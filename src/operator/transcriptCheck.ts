/**
 * What `spindle rebuild` checks in a transcript besides its hash chain (design 003 §3): entry
 * types spindle does not write, duplicate tool-call ids in one reply, inputs the machine would not
 * accept where they stand, and entries that name threads the registry does not have.
 */
import type { TranscriptEntry } from '../../persistence/types.js'
import { describeError, isSpindleError } from '../base/errors.js'
import { TOOL_ABORTED_AT_SHUTDOWN } from '../runtime/shutdown.js'
import { TOOL_CALLS_REPAIRED } from '../thread/messages.js'
import { SPAWN_ENTRY, isMachineEventEntry, replayTranscript } from '../thread/replay.js'

/** Every entry type spindle writes besides the machine inputs. */
export const NOTE_TYPES: ReadonlySet<string> = new Set([
  SPAWN_ENTRY,
  TOOL_CALLS_REPAIRED,
  'tool_intent',
  TOOL_ABORTED_AT_SHUTDOWN,
  'retry_succeeded',
  'error_classified',
  'limit_escalation_requested',
  'approval_decided',
  'hook_decided',
  'cancel_refused',
  'thread_recovered',
  'thread_crashed',
  'thread_restarted',
  'storage_resumed',
  'thread_continued',
  'child_thread_failed',
  'child_budget_exhausted',
  'budget_exhausted',
  'governance_applied',
  'orphan_settled',
])

export interface TranscriptFinding {
  seq: number
  type: string
  kind: 'unknown_type' | 'duplicate_tool_call_id' | 'invalid_transition' | 'unknown_thread'
  message: string
}

/** Findings in a transcript whose chain already verified; `knownThread` answers from the registry. */
export function checkTranscript(entries: readonly TranscriptEntry[], knownThread: (id: string) => boolean): TranscriptFinding[] {
  const findings: TranscriptFinding[] = []
  for (const entry of entries) {
    const { seq, type } = entry
    if (!isMachineEventEntry(entry) && !NOTE_TYPES.has(type)) {
      findings.push({ seq, type, kind: 'unknown_type', message: `entry ${seq} has a type spindle does not write ("${type}"); replay ignores it` })
    }
    if (type === 'MODEL_REPLIED') {
      const ids = ((entry.data as { toolCalls?: Array<{ id: string }> }).toolCalls ?? []).map((c) => c.id)
      const repeated = ids.filter((id, i) => ids.indexOf(id) !== i)
      if (repeated.length) findings.push({ seq, type, kind: 'duplicate_tool_call_id', message: `the reply at entry ${seq} repeats ${new Set(repeated).size === 1 ? 'the tool call id' : 'tool call ids'} ${[...new Set(repeated)].join(', ')}: one of each gets no result` })
    }
    const data = entry.data as Record<string, unknown> | null
    for (const key of ['childId', 'nextThreadId'] as const) {
      const named = data && typeof data[key] === 'string' ? (data[key] as string) : null
      if (named && !knownThread(named)) findings.push({ seq, type, kind: 'unknown_thread', message: `entry ${seq} (${type}) names thread ${named}, which the registry does not have` })
    }
  }
  try {
    replayTranscript(entries)
  } catch (error) {
    if (!isSpindleError(error) || error.code !== 'REPLAY_DIVERGED') throw error
    const details = error.details as { seq?: number; type?: string }
    findings.push({ seq: details.seq ?? 0, type: details.type ?? '?', kind: 'invalid_transition', message: describeError(error).message })
  }
  return findings
}
