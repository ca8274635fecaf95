/**
 * `spindle rebuild <id> --db`: a thread's transcript rows replayed and compared with its checkpoint
 * row (rebuildReport.ts, as on a directory); `--apply` writes the rebuilt checkpoint, brings the
 * registry row in line and stores the approval decisions the transcript holds and the inbox lacks.
 * A runtime opening the database rebuilds a damaged checkpoint by itself when it takes the thread
 * on; this is for a person who wants to look, or to mend a stopped thread no runtime takes on.
 */
import { makeEnvelope } from '../../persistence/envelope.js'
import type { TranscriptEntry } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import type { Stores } from '../runtime/stores.js'
import { decisionsOwed } from '../thread/approvalDecision.js'
import { openDatabase, recordIn } from './databaseStores.js'
import { lockState } from './locks.js'
import { bringRegistryInLine, compareWithTranscript } from './rebuildReport.js'
import type { RebuildReport, Replayed } from './rebuildReport.js'

/** Requests the thread no longer waits at whose decision the inbox lacks and the transcript holds; stored with `apply`. */
function settleDecisions(stores: Stores, id: string, entries: readonly TranscriptEntry[], full: Replayed, apply: boolean): RebuildReport['decisions'] {
  const settled: RebuildReport['decisions'] = []
  for (const { requestId, decision } of decisionsOwed(stores.inbox.undecided(id), entries, full)) {
    if (!decision) continue
    if (apply) stores.inbox.putDecision(id, requestId, { ...decision, recovered: true })
    settled.push({ requestId, decision: decision.decision, written: apply })
  }
  return settled
}

export async function rebuildInDatabase(database: DatabaseOptions, id: string, options: { apply?: boolean } = {}): Promise<RebuildReport> {
  const stores = openDatabase(database)
  try {
    recordIn(stores, id)
    const lease = options.apply ? stores.leases.get(id) : null
    // The worker running the thread would write over the rebuilt checkpoint at its next round.
    if (lease && lockState(lease, Date.now()) === 'live') {
      throw new SpindleError('THREAD_LEASED', `Thread ${id} is run by ${lease.owner} (pid ${lease.pid} on ${lease.host}): rebuild it once that process has stopped.`, { details: { threadId: id } })
    }
    const { entries } = stores.transcripts.read(id)
    const { report, full } = compareWithTranscript(id, entries, () => stores.checkpoints.load(id), (other) => stores.registry.get(other) !== null)
    if (!full) return report
    report.decisions = settleDecisions(stores, id, entries, full, false)
    if (!options.apply) return report
    const { position } = stores.transcripts.open(id)
    stores.transcripts.close(id)
    stores.checkpoints.stage(id, makeEnvelope(id, full.status, position, full.snapshot, Date.now()))
    await stores.checkpoints.sync({ only: new Set([id]) })
    bringRegistryInLine(stores.registry, id, full, Date.now())
    report.applied = true
    report.decisions = settleDecisions(stores, id, entries, full, true)
    return report
  } finally {
    stores.close()
  }
}
