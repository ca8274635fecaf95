/**
 * The copy of `spindle migrate`, through the store interfaces of both ends: transcripts entry by
 * entry (each appended with its own time, so it comes out with its own hash and position), then
 * checkpoints, the inbox, the ledger, recovery decisions and the event log, and the registry rows
 * last: a thread exists on the target only once everything it needs is there.
 */
import type { ThreadRecord } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import type { Stores } from '../runtime/openStores.js'
import { copiedEnvelope, EVENT_PAGE, type SourceSurvey, type ThreadSurvey } from './migrateSurvey.js'

/** Entries buffered on the target before a sync writes them (one transaction on a database). */
const ENTRIES_PER_SYNC = 5_000
/** Checkpoints, and registry rows, written per sync or transaction. */
const THREADS_PER_BATCH = 500

function batches<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = []
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size))
  return out
}

/** The appends gave another hash than the source's entry: survey checked they cannot, so this is a bug. */
function diverged(threadId: string, seq: number): SpindleError {
  return new SpindleError('MIGRATION_MISMATCH', `The copy of entry ${seq} of ${threadId} came out with another hash than the source's: stopped there. This is a bug in spindle; please report it.`, {
    details: { threadId, seq },
  })
}

async function copyTranscripts(threads: readonly ThreadSurvey[], source: Stores, target: Stores): Promise<void> {
  let buffered = 0
  for (const { record, entries } of threads) {
    const id = record.id
    // Every registered thread gets a transcript, as a spawn gives it one (on files: an empty one).
    target.transcripts.open(id)
    if (entries > 0) {
      for (const entry of source.transcripts.read(id).entries) {
        const copied = target.transcripts.append(id, entry.type, entry.data, new Date(entry.ts))
        if (copied.hash !== entry.hash) throw diverged(id, entry.seq)
      }
    }
    target.transcripts.close(id)
    buffered += entries
    if (buffered >= ENTRIES_PER_SYNC) {
      await target.transcripts.sync()
      buffered = 0
    }
  }
  // The files themselves, not only a journal: checkpoints written next point into them.
  await target.transcripts.sync({ files: true })
}

async function copyCheckpoints(threads: readonly ThreadSurvey[], source: Stores, target: Stores): Promise<void> {
  for (const batch of batches(threads, THREADS_PER_BATCH)) {
    for (const { record, anchorBytes } of batch) {
      const envelope = source.checkpoints.load(record.id)
      if (envelope) target.checkpoints.stage(record.id, copiedEnvelope(envelope, anchorBytes))
    }
    await target.checkpoints.sync()
  }
}

function copyInbox(threads: readonly ThreadSurvey[], target: Stores): void {
  for (const { record, approvals, requests } of threads) {
    for (const { requestId, request, decision } of approvals) {
      target.inbox.putApprovalRequest(record.id, requestId, request)
      if (decision !== null) target.inbox.putDecision(record.id, requestId, decision)
    }
    for (const request of requests) target.inbox.leaveRequest(record.id, request.kind, request.body, request.requestId)
  }
}

function copyRecovery(survey: SourceSurvey, target: Stores): void {
  for (const decision of survey.decisions) target.recovery.put(decision)
  // A step is a count of governance actions: counted again up to where it was, the last at its time.
  for (const { taskKey, step, updatedAt } of survey.degradeSteps) for (let i = 0; i < step; i++) target.recovery.bumpDegradeStep(taskKey, updatedAt)
}

function copyEvents(survey: SourceSurvey, source: Stores, target: Stores): void {
  for (let page = source.registry.events.after(0, EVENT_PAGE); page.length > 0; page = source.registry.events.after(page.at(-1)!.id, EVENT_PAGE)) {
    target.registry.events.restore(page, page.at(-1)!.id)
  }
  target.registry.events.restore([], survey.events.lastId)
}

function registerRow(target: Stores, record: ThreadRecord): void {
  target.registry.register({
    id: record.id,
    directiveName: record.directiveName,
    directive: record.directive,
    parentId: record.parentId,
    previousThreadId: record.previousThreadId,
    nonce: record.nonce,
    createdAt: record.createdAt,
  })
  target.registry.updateStatus(record.id, record.status, record.updatedAt, record.suspendReason)
  if (record.result !== null || record.error !== null) target.registry.setResult(record.id, { result: record.result ?? undefined, error: record.error })
  if (record.cost !== null) target.registry.updateCostSnapshot(record.id, record.cost)
}

function copyRegistry(threads: readonly ThreadSurvey[], target: Stores): void {
  for (const batch of batches(threads, THREADS_PER_BATCH)) {
    // A row, its counts and its claim commit together: a runtime that opens the target meanwhile
    // finds each thread whole, or not at all.
    target.registry.transaction(() => {
      for (const { record } of batch) registerRow(target, record)
      target.registry.setRecoveryCounts(batch.flatMap(({ record, recovery }) => (recovery ? [{ id: record.id, ...recovery }] : [])))
      // A first lease (token 1) is never recorded: the target's first lease is token 1 as well.
      const claims = batch.filter(({ claim }) => claim > 1).map(({ record, claim }) => ({ id: record.id, token: claim }))
      if (claims.length > 0) target.registry.claim(claims)
    })
  }
}

/** Copies everything `survey` found in `source` to `target`, which holds nothing yet. */
export async function copyStores(survey: SourceSurvey, source: Stores, target: Stores): Promise<void> {
  await copyTranscripts(survey.threads, source, target)
  await copyCheckpoints(survey.threads, source, target)
  copyInbox(survey.threads, target)
  target.ledger.restore(survey.accounts)
  copyRecovery(survey, target)
  copyEvents(survey, source, target)
  copyRegistry(survey.threads, target)
}
