/**
 * The check after `spindle migrate` has copied (and before, on a target that holds threads): the
 * target read back through its own stores must hold exactly what the survey found in the source —
 * every registry row, every transcript ending at the same seq, hash and byte position (so every
 * entry before it is the same, by the chain), every checkpoint replaying against its transcript,
 * and the same inbox documents, budget accounts, recovery decisions and events.
 */
import { isDeepStrictEqual } from 'node:util'
import type { StoredEvent } from '../../persistence/eventLog.js'
import type { RecoveryRecord } from '../../persistence/types.js'
import type { Stores } from '../runtime/openStores.js'
import { replayTranscript } from '../thread/replay.js'
import { checkReplay } from './inspectThread.js'
import { envelopeDigest, EVENT_PAGE, type SourceSurvey, type ThreadSurvey, type WaitingRequest } from './migrateSurvey.js'

/** Requests compared by what they ask, wherever each backend keeps them. */
function asked(requests: ReadonlyArray<Pick<WaitingRequest, 'kind' | 'requestId' | 'body'>>): unknown[] {
  return requests.map((r) => ({ kind: r.kind, requestId: r.requestId ?? null, body: r.body })).sort((a, b) => `${a.kind}/${a.requestId}`.localeCompare(`${b.kind}/${b.requestId}`))
}

const byKey = (a: RecoveryRecord, b: RecoveryRecord) => `${a.taskKey}\n${a.reasonCode}`.localeCompare(`${b.taskKey}\n${b.reasonCode}`)

/** What differs for one thread, or null. */
function threadDifference(thread: ThreadSurvey, target: Stores): string | null {
  const id = thread.record.id
  const row = target.registry.get(id)
  if (!row) return `${id} has no registry row`
  if (!isDeepStrictEqual(row, thread.record)) return `the registry row of ${id} differs (${row.status} there, ${thread.record.status} in the source)`
  const bytes = target.folders.transcriptBytes(id)
  let entries: ReturnType<Stores['transcripts']['read']>['entries'] = []
  if (thread.entries > 0 || (bytes ?? 0) > 0) {
    try {
      entries = target.transcripts.read(id).entries
    } catch (error) {
      return `the transcript of ${id} does not verify: ${(error as Error).message}`
    }
  }
  const last = entries.at(-1)
  if (entries.length !== thread.entries || (last?.hash ?? '') !== thread.position.hash || (bytes ?? 0) !== thread.position.bytes) {
    return `the transcript of ${id} ends at seq ${last?.seq ?? 0}, byte ${bytes ?? 0}; the source's at seq ${thread.position.seq}, byte ${thread.position.bytes}`
  }
  const envelope = target.checkpoints.load(id)
  if ((envelope === null ? null : envelopeDigest(envelope)) !== thread.envelope) return `the checkpoint of ${id} differs from the source's`
  try {
    if (envelope && !(envelope.transcript.seq === 0 && entries.length === 0) && !checkReplay(envelope, entries).matches) return `the checkpoint of ${id} is not what its transcript replays to`
    if (!envelope && entries.length > 0) replayTranscript(entries)
  } catch (error) {
    return `the transcript of ${id} does not replay: ${(error as Error).message}`
  }
  const count = target.registry.recoveryCount(id)
  if (!isDeepStrictEqual(count ?? { count: 0, seq: null }, thread.recovery ?? { count: 0, seq: null })) return `the recovery count of ${id} differs`
  if (thread.claim > 1 && (target.registry.leaseToken(id) ?? 0) < thread.claim) return `${id} was claimed with lease token ${thread.claim}, the target's claim is ${target.registry.leaseToken(id)}`
  if (!isDeepStrictEqual(target.inbox.approvals(id), thread.approvals)) return `the approval requests or decisions of ${id} differ`
  const waiting = target.inbox.unclaimed(id).flatMap((r) => (r.body.ok ? [{ ...r, body: r.body.value }] : []))
  if (!isDeepStrictEqual(asked(waiting), asked(thread.requests))) return `the requests left for ${id} differ`
  return null
}

function eventsDifference(survey: SourceSurvey, source: Stores, target: Stores): string | null {
  if (target.registry.events.lastId() !== survey.events.lastId) return `the event log's last id is ${target.registry.events.lastId()}, the source's ${survey.events.lastId}`
  let cursor = 0
  for (;;) {
    const mine: StoredEvent[] = source.registry.events.after(cursor, EVENT_PAGE)
    const theirs: StoredEvent[] = target.registry.events.after(cursor, EVENT_PAGE)
    if (!isDeepStrictEqual(mine, theirs)) return `the event log differs after event ${cursor}`
    if (mine.length === 0) return null
    cursor = mine.at(-1)!.id
  }
}

/**
 * What the target holds differently from the survey of the source, up to `limit` differences;
 * empty when it holds exactly the same. Reads every thread back through the target's stores.
 */
export function differences(survey: SourceSurvey, source: Stores, target: Stores, limit = 5): string[] {
  const found: string[] = []
  const known = new Set(survey.threads.map((t) => t.record.id))
  for (const record of target.registry.list()) {
    if (!known.has(record.id)) found.push(`it holds thread ${record.id}, which the source does not`)
    if (found.length >= limit) return found
  }
  for (const thread of survey.threads) {
    const difference = threadDifference(thread, target)
    if (difference) found.push(difference)
    if (found.length >= limit) return found
  }
  if (!isDeepStrictEqual(target.ledger.accounts(), survey.accounts)) found.push('the budget ledger\'s accounts differ')
  if (!isDeepStrictEqual(target.recovery.decisions().sort(byKey), [...survey.decisions].sort(byKey))) found.push('the recovery decisions differ')
  const steps = (list: SourceSurvey['degradeSteps']) => [...list].sort((a, b) => a.taskKey.localeCompare(b.taskKey))
  if (!isDeepStrictEqual(steps(target.recovery.degradeSteps()), steps(survey.degradeSteps))) found.push('the degrade steps of budget governance differ')
  const events = eventsDifference(survey, source, target)
  if (events) found.push(events)
  return found.slice(0, limit)
}
