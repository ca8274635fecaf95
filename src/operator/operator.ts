/**
 * What the operator commands read and repair, as data; `cli.ts` formats it. Reads never change a
 * file; only `rebuildThread(..., { apply: true })` writes, atomically.
 */
import fs from 'node:fs'
import path from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import type { ThreadContext } from '../../machines/threadContext.js'
import { writeFileAtomicSync } from '../../persistence/atomicFile.js'
import { makeEnvelope } from '../../persistence/envelope.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { assertDirectories, dataPaths, STATE_FILE, threadFile, TRANSCRIPT_FILE } from '../../persistence/paths.js'
import { staleLinesMessage } from '../../persistence/transcriptLines.js'
import { journalLag, refuseIfBehindJournal } from '../../persistence/foreignJournals.js'
import type { SkippedJournal } from '../../persistence/journalFiles.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import type { RequestLogEntry } from '../../persistence/requestFiles.js'
import { readRequestLog } from '../../persistence/requestFiles.js'
import { locks } from './locks.js'
import { readBudgets } from './budgetFigures.js'
import type { BudgetView } from '../runtime/budgetView.js'
import { recordOf, withRegistry } from './registryAccess.js'
import { withoutNonce } from './threadListing.js'
import type { ThreadListing } from './threadListing.js'
import type { RecoveryCount, StateEnvelope, ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import { SpindleError, describeError } from '../base/errors.js'
import { replayTranscript } from '../thread/replay.js'
import type { RejectedAnswer } from '../thread/approvalRecords.js'
import { rejectedAnswers } from '../thread/approvalRecords.js'
import type { OpenRequest } from '../thread/requests.js'
import { openApprovalRequest } from '../thread/requests.js'
import { approvalFindings, settleDecisionFiles } from './approvalChecks.js'
import { leftoverFindings } from './leftoverChecks.js'
import type { Finding } from './approvalChecks.js'
import type { LedgerProblem } from '../../persistence/types.js'
import { bringRegistryInLine, compareWithTranscript } from './rebuildReport.js'
import type { RebuildReport } from './rebuildReport.js'
import { isActive } from '../thread/threadStatus.js'
import { loadFileLayers } from '../../config/load.js'

export interface ThreadReport {
  /** Its registry row, without the nonce. */
  record: ThreadListing
  /** How many recoveries in a row found it at the same point (crash-loop detection), and that point. */
  recoveries: RecoveryCount | null
  /** null when state.json is missing; `problem` says why when it could not be read. */
  state: { status: ThreadStatus; value: unknown; savedAt: string; transcriptSeq: number; context: ThreadContext } | null
  transcript: { entries: number; lastSeq: number; torn: boolean } | null
  /** The approval request it waits at (null: none), and the answers to its requests a runtime rejected. */
  approvals: { open: OpenRequest | null; rejected: RejectedAnswer[] }
  problems: Array<{ code: string; message: string }>
  /** Its budget as `rt.budget` gives it (null when ledger.db could not be read: see `problems`). */
  budget: BudgetView | null
}

/** Everything known about one thread; damage is reported, not thrown. */
export function showThread(dir: string, id: string): ThreadReport {
  const { record, recoveries } = withRegistry(dir, (registry) => ({ record: withoutNonce(recordOf(registry, dir, id)), recoveries: registry.recoveryCount(id) }))
  const paths = dataPaths(dir)
  const problems: ThreadReport['problems'] = []
  let state: ThreadReport['state'] = null
  try {
    const envelope = createFileCheckpointStore({ paths, durability: 'process' }).load(id)
    if (envelope) {
      const snapshot = envelope.snapshot as { value: unknown; context: ThreadContext }
      state = { status: envelope.status, value: snapshot.value, savedAt: envelope.savedAt, transcriptSeq: envelope.transcript.seq, context: snapshot.context }
    }
  } catch (error) {
    problems.push(describeError(error))
  }
  let transcript: ThreadReport['transcript'] = null
  try {
    const { entries, torn } = createJsonlTranscriptStore({ paths, durability: 'process' }).read(id)
    transcript = { entries: entries.length, lastSeq: entries.at(-1)?.seq ?? 0, torn: torn !== null }
  } catch (error) {
    problems.push(describeError(error))
  }
  const approvals = { open: openApprovalRequest(dir, id, record.status), rejected: rejectedAnswers(paths, id) }
  let budget: BudgetView | null = null
  try {
    budget = readBudgets(dir, [id]).get(id) ?? null
  } catch (error) {
    problems.push(describeError(error))
  }
  return { record, recoveries, state, transcript, approvals, problems, budget }
}

/** A thread's registry status and transcript entries, verified; `after` skips entries up to that seq. */
export function threadLog(dir: string, id: string, options: { after?: number } = {}): { status: ThreadStatus; entries: TranscriptEntry[] } {
  const { status } = withRegistry(dir, (registry) => recordOf(registry, dir, id))
  const { entries } = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'process' }).read(id)
  return { status, entries: options.after === undefined ? entries : entries.filter((e) => e.seq > options.after!) }
}

export type { RebuildReport } from './rebuildReport.js'

/**
 * Replays a thread's transcript and compares the result with its state.json. With `apply`, writes
 * the rebuilt state.json atomically (fsynced) and brings the registry row in line. Do not apply to
 * a thread a running runtime is executing.
 */
export function rebuildThread(dir: string, id: string, options: { apply?: boolean } = {}): RebuildReport {
  const paths = dataPaths(dir)
  return withRegistry(dir, (registry) => {
    recordOf(registry, dir, id)
    // The runtime running the thread would write over the rebuilt state.json at its next round.
    const lease = options.apply ? locks(dir).locks.find((l) => l.threadId === id && l.state === 'live') : undefined
    if (lease) {
      throw new SpindleError('THREAD_LEASED', `Thread ${id} is run by ${lease.owner} (pid ${lease.pid}): rebuild it once that process has stopped.`, { details: { threadId: id } })
    }
    // A state.json rebuilt from a transcript that lacks journaled lines would point past what it
    // replayed once the lines are written back.
    if (options.apply) refuseIfBehindJournal(paths, id, 'rebuild it')
    const transcripts = createJsonlTranscriptStore({ paths, durability: 'fsync' })
    const { entries } = transcripts.read(id)
    const { report, full } = compareWithTranscript(id, entries, () => createFileCheckpointStore({ paths, durability: 'process' }).load(id), (other) => registry.get(other) !== null)
    if (!full) return report
    report.decisions = settleDecisionFiles(paths, id, entries, full, false)
    if (options.apply) {
      // open() (unlike read()) cuts a torn last line, so the position written matches the file.
      const { position } = transcripts.open(id)
      transcripts.close(id)
      const file = threadFile(paths, id, STATE_FILE)
      writeFileAtomicSync(file, JSON.stringify(makeEnvelope(id, full.status, position, full.snapshot, Date.now())), { fsync: true, under: paths.root })
      bringRegistryInLine(registry, id, full, Date.now())
      report.applied = true
      // A process killed between recording a decision and writing its file: the file, from the transcript.
      report.decisions = settleDecisionFiles(paths, id, entries, full, true)
    }
    return report
  })
}

export type { Finding } from './approvalChecks.js'

/**
 * Checks every thread of a data directory: registry row, state.json, transcript chain, and that
 * state.json and the registry agree with what the transcript replays to; and what processes
 * killed mid-write left behind. Reads only.
 */
export function doctor(dir: string): { threads: number; findings: Finding[] } {
  const paths = dataPaths(dir)
  assertDirectories(paths)
  const checkpoints = createFileCheckpointStore({ paths, durability: 'process' })
  const transcripts = createJsonlTranscriptStore({ paths, durability: 'process' })
  const findings: Finding[] = []
  const { records, counts } = withRegistry(dir, (registry) => ({ records: registry.list(), counts: registry.recoveryCounts() }))
  const registered = new Set(records.map((r) => r.id))
  let log: RequestLogEntry[] | null = null
  // Read once, and only for a thread with rejected answers.
  const requestLog = (): RequestLogEntry[] => (log ??= readRequestLog(paths.root))
  for (const record of records) {
    const id = record.id
    const damage = (code: string, message: string, repair: string) => findings.push({ threadId: id, kind: 'damage', code, message, repair })
    let entries: TranscriptEntry[]
    try {
      const read = transcripts.read(id)
      entries = read.entries
      if (read.stale) findings.push({ threadId: id, kind: 'lag', code: 'TRANSCRIPT_STALE_LINES', message: staleLinesMessage(id, read.stale), repair: `spindle rebuild ${id} --compact --apply (the old file is kept)` })
    } catch (error) {
      const { code, message } = describeError(error)
      // A linked thread folder is not read at all: what it needs is the folder back, not a backup.
      const repair =
        code === 'DATA_DIR_INVALID'
          ? `Move the link aside and put the thread's own folder in its place (find out who made the link), then \`spindle rebuild ${id} --apply\`.`
          : 'Restore transcript.jsonl from a backup; without it the thread cannot be rebuilt.'
      damage(code, message, repair)
      continue
    }
    let envelope: StateEnvelope | null = null
    try {
      envelope = checkpoints.load(id)
    } catch (error) {
      const { code, message } = describeError(error)
      damage(code, message, `spindle rebuild ${id} --apply`)
    }
    let replayed: ReturnType<typeof replayTranscript>
    try {
      replayed = replayTranscript(entries)
    } catch (error) {
      const { code, message } = describeError(error)
      damage(code, message, 'Inspect the transcript with `spindle logs`; it no longer replays through the thread machine.')
      continue
    }
    if (envelope) {
      const upTo = envelope.transcript.seq
      const at = envelope.transcript
      if (at.seq > 0 && !entries.some((e) => e.seq === at.seq && e.hash === at.hash)) {
        // The transcript was rewritten or cut under it (a compaction killed between its two writes).
        damage('STATE_MISMATCH', `state.json of ${id} was checkpointed at transcript entry ${at.seq}, which its transcript does not hold with that hash.`, `spindle rebuild ${id} --apply`)
      } else if (!isDeepStrictEqual(replayTranscript(entries.filter((e) => e.seq <= upTo)).snapshot, envelope.snapshot)) {
        damage('STATE_MISMATCH', `state.json of ${id} differs from what its transcript replays to at seq ${upTo}.`, `spindle rebuild ${id} --apply`)
      } else if (upTo < replayed.appliedSeq && !isActive(record.status)) {
        findings.push({ threadId: id, kind: 'lag', code: 'STATE_BEHIND', message: `state.json of ${id} is behind its transcript.`, repair: `spindle rebuild ${id} --apply` })
      }
    }
    findings.push(...crashLoopFindings(id, record.status, counts.get(id), replayed.snapshot))
    findings.push(...approvalFindings(paths, id, record.status, entries, replayed, requestLog))
    // Registry behind the transcript, which recovery brings in line: a thread it calls running, or
    // one it calls suspended whose decision (approval, resume, cancel) was recorded by a process
    // killed before it committed the status.
    const behind = isActive(record.status) || record.status === 'suspended'
    if (record.status !== replayed.status && !behind) {
      damage('REGISTRY_MISMATCH', `The registry says ${id} is ${record.status}; its transcript says ${replayed.status}.`, `spindle rebuild ${id} --apply`)
    } else if (record.status !== replayed.status) {
      findings.push({
        threadId: id,
        kind: 'lag',
        code: 'REGISTRY_BEHIND',
        message: `The registry says ${id} is ${record.status}; its transcript says ${replayed.status}.`,
        repair: 'Open a runtime on this directory: recovery brings the registry in line.',
      })
    }
  }
  for (const id of fs.existsSync(paths.threads) ? fs.readdirSync(paths.threads) : []) {
    if (registered.has(id)) continue
    findings.push({
      threadId: id,
      kind: 'stray',
      code: 'UNREGISTERED_FILES',
      message: `${path.join(paths.threads, id)} has no registry row: a spawn that never returned.`,
      repair: 'Nothing was acknowledged from it (unless registry.db was replaced by an older copy: then restore the newest); remove the directory when convenient.',
    })
  }
  const skipped = (entry: SkippedJournal) =>
    findings.push({
      threadId: '(journal)',
      kind: 'damage',
      code: 'JOURNAL_UNREADABLE',
      message: `${entry.file} is in the transcript journal but ${entry.reason}: runtimes skip it.`,
      repair: `Move it out of ${paths.journal}; if it is a journal spindle wrote, make it readable and open a runtime on the directory.`,
    })
  for (const { threadId, journal } of journalLag(paths.journal, (id) => threadFile(paths, id, TRANSCRIPT_FILE), undefined, skipped)) {
    findings.push({
      threadId,
      kind: 'lag',
      code: 'TRANSCRIPT_BEHIND_JOURNAL',
      message: `The transcript of ${threadId} lacks lines that ${journal} holds: the machine lost power before the file's own fdatasync.`,
      repair: 'Open a runtime on this directory: it writes the lines back (a suspended thread\'s when it is approved or resumed).',
    })
  }
  findings.push(...leftoverFindings(paths, [...registered]))
  findings.push(...ledgerFindings(dir), ...lockFindings(dir, (id) => registered.has(id)), ...configFindings(paths.root))
  return { threads: records.length, findings }
}

/**
 * A thread quarantined for a crash loop, or one on its way there: recoveries found it at the same
 * point at least twice in a row, and each process that ran it on from there died.
 */
export function crashLoopFindings(id: string, status: ThreadStatus, count: RecoveryCount | undefined, snapshot: unknown): Finding[] {
  const context = (snapshot as { context?: Partial<ThreadContext> }).context
  if (status === 'suspended' && context?.suspendReason === 'crash_loop') {
    return [
      {
        threadId: id,
        kind: 'crash',
        code: 'CRASH_LOOP',
        message: context.lastFailure?.message ?? `${id} is quarantined: each process that ran it on from the same point died.`,
        repair: `Find what kills the process (\`spindle show ${id}\`, \`spindle logs ${id}\`), fix it, then \`spindle resume ${id}\`; or \`spindle cancel ${id}\`.`,
      },
    ]
  }
  if (!isActive(status) || !count || count.count < 2) return []
  return [
    {
      threadId: id,
      kind: 'crash',
      code: 'RECOVERY_REPEATED',
      message:
        `Recovery found ${id} at the same point (transcript seq ${count.seq}) ${count.count} times in a row, and each process that ran it on ` +
        'from there died before it got further. The next recovery runs it alone; past supervision.maxRecoveries it is quarantined.',
      repair: `If it is what kills the process (\`spindle show ${id}\`, \`spindle logs ${id}\`), cancel it or fix its tool before the next start.`,
    },
  ]
}

/** The directory's own config.yaml: a runtime refuses to open the directory while it is invalid. */
function configFindings(root: string): Finding[] {
  try {
    loadFileLayers(root, null)
    return []
  } catch (error) {
    const { code, message } = describeError(error)
    return [{ threadId: '(config)', kind: 'damage', code, message, repair: 'Fix the file as the message says: until then no runtime opens this directory.' }]
  }
}

/** Budget balances that do not add up (ledger.db). */
function ledgerFindings(dir: string): Finding[] {
  const file = dataPaths(dir).ledger
  if (!fs.existsSync(file)) return []
  let ledger
  try {
    ledger = openSqliteLedger({ path: file, durability: 'process' })
  } catch (error) {
    const { code, message } = describeError(error)
    return [{ threadId: '(ledger)', kind: 'damage', code, message, repair: `Restore ${file} from a backup, or move it aside: budgets are then no longer enforced.` }]
  }
  try {
    return ledger.check().map(ledgerFinding)
  } finally {
    ledger.close()
  }
}

/** Leases of processes that are gone (leases.db): `spindle locks --apply` reclaims them. */
function lockFindings(dir: string, registered: (threadId: string) => boolean): Finding[] {
  return locks(dir)
    .locks.filter((lock) => lock.state !== 'live')
    .map((lock) => ({
      threadId: lock.threadId,
      kind: 'lag' as const,
      code: 'STALE_LEASE',
      message: `The lease of ${lock.threadId} is held by ${lock.owner} (pid ${lock.pid}), which is ${lock.state === 'dead_owner' ? 'no longer running' : `silent since its lease expired ${Math.round(-lock.expiresInMs / 1000)} s ago`}.`,
      // A thread without a registry row (a spawn that never returned) is taken over by nobody.
      repair: registered(lock.threadId)
        ? 'A runtime on this directory takes the thread over by itself; `spindle locks --apply` reclaims the lease now.'
        : 'The thread has no registry row (a spawn that never returned), so no runtime takes it over: the next runtime to open this directory removes the lease, or `spindle locks --apply` removes it now.',
    }))
}

/** A budget balance that does not add up, as doctor reports it (whatever the ledger's backend). */
export function ledgerFinding(problem: LedgerProblem): Finding {
  return {
    threadId: problem.threadId,
    kind: 'damage',
    code: problem.kind === 'orphan_account' ? 'LEDGER_ORPHAN' : 'LEDGER_MISMATCH',
    message: problem.message,
    repair:
      problem.kind === 'orphan_account'
        ? 'The account names a parent the ledger does not know; its reservation cannot be returned. Remove the row if its thread is done.'
        : "Recompute the account's spent columns from its own usage and its descendants' (they are what `check` adds up).",
  }
}
