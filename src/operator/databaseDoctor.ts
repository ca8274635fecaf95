/**
 * `spindle doctor` on a PostgreSQL database: every thread's registry row, checkpoint and transcript
 * (its hash chain verified on read), that the checkpoint is what the transcript replays to, and that
 * the registry agrees; the approval requests left undecided; the ledger's balances; leases of
 * processes that are gone. Reads only, through the store interfaces, as a new worker would read.
 * Findings have the shapes and codes of the directory's doctor (operator.ts); their repairs say
 * what can be done on a database.
 */
import type { RecoveryCount, StateEnvelope, ThreadRecord, TranscriptEntry } from '../../persistence/types.js'
import { describeError } from '../base/errors.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import type { Stores } from '../runtime/openStores.js'
import { decisionsOwed, openRequestId } from '../thread/approvalDecision.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { replayTranscript } from '../thread/replay.js'
import { isActive } from '../thread/threadStatus.js'
import type { Finding } from './approvalChecks.js'
import { withDatabase } from './databaseStores.js'
import { checkReplay } from './inspectThread.js'
import { lockState } from './locks.js'
import { crashLoopFindings, ledgerFinding } from './operator.js'

/** The repair of a thread whose rows disagree with its transcript, which holds the truth. */
const REBUILD = (id: string, rows: string): string =>
  `Rewrite the ${rows} of ${id} from its transcript: \`spindle rebuild ${id} --apply\` with this --db and --schema, once no worker runs the thread.`

/** Checks every thread of the database; exit 5 is for findings of kind damage. */
export function databaseDoctor(database: DatabaseOptions): { threads: number; findings: Finding[] } {
  return withDatabase(database, (stores) => {
    const records = stores.registry.list()
    const counts = stores.registry.recoveryCounts()
    const findings: Finding[] = []
    for (const record of records) findings.push(...threadFindings(stores, record, counts.get(record.id)))
    findings.push(...ledgerFindings(stores), ...leaseFindings(stores, new Set(records.map((r) => r.id))))
    return { threads: records.length, findings }
  })
}

function threadFindings(stores: Stores, record: ThreadRecord, count: RecoveryCount | undefined): Finding[] {
  const id = record.id
  const findings: Finding[] = []
  const damage = (code: string, message: string, repair: string) => findings.push({ threadId: id, kind: 'damage', code, message, repair })
  let entries: TranscriptEntry[]
  try {
    entries = stores.transcripts.read(id).entries
  } catch (error) {
    const { code, message } = describeError(error)
    damage(code, message, `Restore the transcript rows (transcript_lines) of ${id} from a backup of the database; without them the thread cannot be rebuilt.`)
    return findings
  }
  let envelope: StateEnvelope | null = null
  try {
    envelope = stores.checkpoints.load(id)
  } catch (error) {
    const { code, message } = describeError(error)
    damage(code, message, REBUILD(id, 'checkpoint row'))
  }
  let replayed: ReturnType<typeof replayTranscript>
  try {
    replayed = replayTranscript(entries)
  } catch (error) {
    const { code, message } = describeError(error)
    damage(code, message, 'Inspect the transcript with `spindle logs`; it no longer replays through the thread machine.')
    return findings
  }
  if (envelope) {
    const check = checkReplay(envelope, entries)
    const at = envelope.transcript
    if (!check.checkpointFound) {
      damage('STATE_MISMATCH', `The checkpoint of ${id} was taken at transcript entry ${at.seq}, which its transcript does not hold with that hash.`, `Restore the transcript rows of ${id} from a backup if they were lost; else \`spindle rebuild ${id} --apply\` rewrites the checkpoint from the transcript as it stands.`)
    } else if (!check.matches) {
      damage('STATE_MISMATCH', `The checkpoint of ${id} differs from what its transcript replays to at seq ${at.seq}.`, REBUILD(id, 'checkpoint row'))
    } else if (at.seq < replayed.appliedSeq && !isActive(record.status)) {
      findings.push({ threadId: id, kind: 'lag', code: 'STATE_BEHIND', message: `The checkpoint of ${id} is behind its transcript.`, repair: 'Nothing is lost: the transcript holds every step after the checkpoint, and a runtime that loads the thread replays them.' })
    }
  }
  findings.push(...crashLoopFindings(id, record.status, count, replayed.snapshot))
  findings.push(...approvalFindings(stores, id, entries, replayed))
  // Registry behind the transcript, which recovery brings in line: a thread it calls running, or
  // one it calls suspended whose decision was recorded by a process killed before it committed the status.
  const behind = isActive(record.status) || record.status === 'suspended'
  if (record.status !== replayed.status && !behind) {
    damage('REGISTRY_MISMATCH', `The registry says ${id} is ${record.status}; its transcript says ${replayed.status}.`, REBUILD(id, 'registry row'))
  } else if (record.status !== replayed.status) {
    findings.push({
      threadId: id,
      kind: 'lag',
      code: 'REGISTRY_BEHIND',
      message: `The registry says ${id} is ${record.status}; its transcript says ${replayed.status}.`,
      repair: 'Open a runtime on this database: recovery brings the registry in line.',
    })
  }
  return findings
}

/**
 * Approval requests the thread no longer waits at that have no decision stored (a process killed
 * between recording the decision and storing it), and answers that nothing will act on.
 */
function approvalFindings(stores: Stores, id: string, entries: readonly TranscriptEntry[], replayed: ReturnType<typeof replayTranscript>): Finding[] {
  const context = (replayed.snapshot as { context?: ThreadContext }).context
  const open = replayed.status === 'suspended' && context ? openRequestId(context) : null
  const findings: Finding[] = []
  for (const { requestId, decision } of decisionsOwed(stores.inbox.undecided(id), entries, replayed)) {
    findings.push(
      decision
        ? {
            threadId: id,
            kind: 'lag',
            code: 'DECISION_MISSING',
            message:
              `Approval request ${requestId} of ${id} has no decision stored, but the thread no longer waits at it (it is ${replayed.status}): ` +
              `its transcript says it was ${decision.decision}${decision.by ? ` by ${decision.by}` : ''} at ${decision.at}. A process killed between recording the decision and storing it leaves this; ` +
              'the request is not pending, and answers to it are not acted on.',
            repair: 'A runtime on this database stores the decision from the transcript when it takes the thread on; nothing else is needed.',
          }
        : {
            threadId: id,
            kind: 'stray',
            code: 'DECISION_UNKNOWN',
            message: `Approval request ${requestId} of ${id} has no decision stored, the thread no longer waits at it (it is ${replayed.status}), and its transcript does not say how it was decided.`,
            repair: 'Nothing acts on the request any more: keep it as a record.',
          },
    )
  }
  for (const stray of stores.inbox.strayAnswers(id, open)) {
    findings.push({
      threadId: id,
      kind: 'answer',
      code: 'ANSWER_UNREAD',
      message: `${stray.ref} answers approval request ${stray.requestId}, at which ${id} does not wait (it is ${replayed.status}): no runtime will act on it.`,
      repair: `A runtime watching the thread sets it aside as refused.${open ? ` The thread waits at ${open}: answer that with \`spindle approve ${id}\` or \`spindle deny ${id}\`.` : ''}`,
    })
  }
  return findings
}

/** Budget balances that do not add up. */
function ledgerFindings(stores: Stores): Finding[] {
  return stores.ledger.check().map(ledgerFinding)
}

/**
 * Leases of processes that are gone or silent: a live worker takes their threads over by itself.
 * Only a process of this host can be known gone; another host's lease is stale once it expired.
 */
function leaseFindings(stores: Stores, registered: Set<string>): Finding[] {
  const now = Date.now()
  return stores.leases
    .list()
    .map((lease) => ({ lease, state: lockState(lease, now) }))
    .filter(({ state }) => state !== 'live')
    .map(({ lease, state }) => ({
      threadId: lease.threadId,
      kind: 'lag' as const,
      code: 'STALE_LEASE',
      message: `The lease of ${lease.threadId} is held by ${lease.owner} (pid ${lease.pid}), which is ${state === 'dead_owner' ? 'no longer running' : `silent since its lease expired ${Math.round((now - lease.expiresAt) / 1000)} s ago`}.`,
      repair: registered.has(lease.threadId)
        ? 'A runtime on this database takes the thread over by itself; `spindle locks --apply` reclaims the lease now.'
        : 'The thread has no registry row (a spawn that never returned), so no runtime takes it over: `spindle locks --apply` removes the lease.',
    }))
}
