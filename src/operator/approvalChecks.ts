/**
 * Doctor's checks of a thread's approvals folder against its transcript, and the repair
 * `spindle rebuild --apply` makes there. The transcript says which request the thread waits at
 * (if any) and how each other one was decided; the folder should agree: a decision file next to
 * every request the thread no longer waits at, and no answer left that nothing will act on.
 */
import path from 'node:path'
import type { ThreadContext } from '../../machines/threadContext.js'
import { writeFileAtomicSync } from '../../persistence/atomicFile.js'
import type { DataPaths } from '../../persistence/paths.js'
import type { ApprovalListing, RequestLogEntry } from '../../persistence/requestFiles.js'
import { approvalFiles, listApprovals } from '../../persistence/requestFiles.js'
import type { ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import { isActive } from '../thread/threadStatus.js'
import type { ApprovalDecision } from '../thread/approvalDecision.js'
import { decisionFromTranscript } from '../thread/approvalDecision.js'
import { describeAnswer, rejectedAnswers } from '../thread/approvalRecords.js'

/** What `doctor` found, with its repair. */
export interface Finding {
  threadId: string
  /**
   * damage: something is lost or wrong; lag: normal after a crash, fixed by recovery (or the repair
   * named); stray: files nothing uses; crash: a thread quarantined for a crash loop, or heading
   * there; answer: an answer to an approval request that a person should know of (rejected, or
   * that nothing will act on)
   */
  kind: 'damage' | 'lag' | 'stray' | 'crash' | 'answer'
  code: string
  message: string
  repair: string
}

/** What the transcript replays to: the thread's status and its snapshot. */
export interface Replayed {
  status: ThreadStatus
  snapshot: unknown
}

/** The approval request the replayed thread waits at, or null. */
function waitsAt(replayed: Replayed): string | null {
  const context = (replayed.snapshot as { context?: Partial<ThreadContext> }).context
  if (replayed.status !== 'suspended' || context?.suspendReason !== 'limit') return null
  return context.limitHit?.requestId ?? null
}

/** Requests the thread no longer waits at that have no decision file, with what the transcript says of each. */
function undecided(listing: ApprovalListing, entries: readonly TranscriptEntry[], replayed: Replayed): Array<{ requestId: string; decision: ApprovalDecision | null }> {
  const open = waitsAt(replayed)
  return listing.requests
    .filter((rid) => rid !== open && !listing.decided.has(rid))
    .map((requestId) => ({ requestId, decision: decisionFromTranscript(entries, requestId) }))
}

/**
 * Doctor's findings in thread `id`'s approvals folder. `status` is the registry's; `log` the
 * directory's request log (read once for all threads).
 */
export function approvalFindings(
  paths: DataPaths,
  id: string,
  status: ThreadStatus,
  entries: readonly TranscriptEntry[],
  replayed: Replayed,
  log: () => readonly RequestLogEntry[],
): Finding[] {
  const listing = listApprovals(paths, id)
  if (listing.requests.length + listing.waiting.length + listing.taken.length + listing.rejected.length === 0) return []
  const findings: Finding[] = []
  const open = waitsAt(replayed)
  const fileOf = (rid: string, which: 'request' | 'response' | 'taken') => approvalFiles(paths, id, rid)[which]
  for (const { requestId, decision } of undecided(listing, entries, replayed)) {
    if (decision) {
      // A runtime writes it when it takes the thread on (recovery) or sweeps it (suspended again);
      // a stopped thread is taken on by none.
      const byRuntime = isActive(status) || status === 'suspended'
      findings.push({
        threadId: id,
        kind: 'lag',
        code: 'DECISION_MISSING',
        message:
          `Approval request ${requestId} of ${id} has no decision file, but the thread no longer waits at it (it is ${replayed.status}): ` +
          `its transcript says it was ${decision.decision}${decision.by ? ` by ${decision.by}` : ''} at ${decision.at}. A process killed between recording the decision and writing its file leaves this; ` +
          'the request is not pending, and answers to it are not acted on.',
        repair: byRuntime
          ? `Open a runtime on this directory: it writes the decision from the transcript when it takes the thread on; or \`spindle rebuild ${id} --apply\` writes it now.`
          : `\`spindle rebuild ${id} --apply\` writes the decision file from the transcript.`,
      })
    } else {
      findings.push({
        threadId: id,
        kind: 'stray',
        code: 'DECISION_UNKNOWN',
        message: `Approval request ${requestId} of ${id} has no decision file, the thread no longer waits at it (it is ${replayed.status}), and its transcript does not say how it was decided.`,
        repair: `Nothing acts on ${fileOf(requestId, 'request')} any more: keep it as a record, or remove it.`,
      })
    }
  }
  for (const requestId of listing.waiting) {
    if (requestId === open) continue
    findings.push({
      threadId: id,
      kind: 'answer',
      code: 'ANSWER_UNREAD',
      message: `${fileOf(requestId, 'response')} answers approval request ${requestId}, at which ${id} does not wait (it is ${replayed.status}): no runtime will act on it.`,
      repair: `Remove it.${open ? ` The thread waits at ${open}: answer that with \`spindle approve ${id}\` or \`spindle deny ${id}\`.` : ''}`,
    })
  }
  for (const requestId of listing.taken) {
    if (requestId !== open) continue
    findings.push({
      threadId: id,
      kind: 'answer',
      code: 'ANSWER_CLAIMED',
      message: `${fileOf(requestId, 'taken')} is an answer to the open approval request ${requestId} that a runtime claimed and has not acted on yet.`,
      repair: `If it stays (the runtime that claimed it died before acting), answer again: \`spindle approve ${id} --replace\` or \`spindle deny ${id} --replace\`.`,
    })
  }
  for (const rejected of rejectedAnswers(paths, id, log())) {
    const stillOpen = rejected.requestId === open
    findings.push({
      threadId: id,
      kind: 'answer',
      code: 'ANSWER_REJECTED',
      message:
        `The answer ${rejected.file} to approval request ${rejected.requestId} (${rejected.answer ? describeAnswer(rejected.answer) : `unreadable: ${rejected.problem}`}) was rejected` +
        `${rejected.at ? ` at ${rejected.at}` : ''}: ${rejected.reason ?? `${path.basename(paths.root)}/requests.log.jsonl does not say why`}. ` +
        (stillOpen ? 'The request is still open: the thread waits for a valid answer.' : 'The request is closed now.'),
      repair: stillOpen
        ? `Answer again: \`spindle approve ${id}\` (with limits above what it has used) or \`spindle deny ${id}\`. The rejected file only shows what was refused: remove it once read.`
        : 'Nothing waits on it: remove it once read.',
    })
  }
  return findings
}

/**
 * Writes the decision files the transcript holds for requests the thread no longer waits at
 * (`spindle rebuild --apply`); without `apply`, only says which. Returns one line per request.
 */
export function settleDecisionFiles(
  paths: DataPaths,
  id: string,
  entries: readonly TranscriptEntry[],
  replayed: Replayed,
  apply: boolean,
): Array<{ requestId: string; decision: ApprovalDecision['decision']; written: boolean }> {
  const settled: Array<{ requestId: string; decision: ApprovalDecision['decision']; written: boolean }> = []
  for (const { requestId, decision } of undecided(listApprovals(paths, id), entries, replayed)) {
    if (!decision) continue
    if (apply) {
      const file = approvalFiles(paths, id, requestId).decision
      writeFileAtomicSync(file, `${JSON.stringify({ ...decision, recovered: true }, null, 2)}\n`, { fsync: true, under: paths.root })
    }
    settled.push({ requestId, decision: decision.decision, written: apply })
  }
  return settled
}
