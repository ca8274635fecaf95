/**
 * What `spindle migrate` reads of the source before it writes anything: every thread's registry
 * row, its transcript (every chain verified, every entry checked to come out of the target's
 * appends with the same hash), its checkpoint (replayed against the transcript), and what else
 * the copy takes. Anything that would not survive the copy refuses the migration here, naming the
 * thread, with nothing written.
 */
import { createHash } from 'node:crypto'
import { journalLag } from '../../persistence/foreignJournals.js'
import { threadFile, TRANSCRIPT_FILE } from '../../persistence/paths.js'
import { encodeEntry } from '../../persistence/transcriptLines.js'
import type { InboxRequest, Lease, RecoveryCount, RecoveryRecord, StateEnvelope, StoredAccount, ThreadRecord, TranscriptEntry, TranscriptPosition } from '../../persistence/types.js'
import { EMPTY_POSITION } from '../../persistence/types.js'
import { isSpindleError, midSentence, SpindleError } from '../base/errors.js'
import type { Stores } from '../runtime/openStores.js'
import { replayTranscript } from '../thread/replay.js'
import { checkReplay } from './inspectThread.js'
import { lockState } from './locks.js'
import { endName, type MigrateEnd } from './migrateEnds.js'

/** A request left for a thread and not claimed, readable: what the copy leaves on the target. */
export type WaitingRequest = InboxRequest & { threadId: string; body: unknown }

export interface ThreadSurvey {
  record: ThreadRecord
  /** Where the thread's transcript ends, as the target's appends count it. */
  position: TranscriptPosition
  entries: number
  /** The checkpoint's digest as the target is to hold it (see `envelopeDigest`); null without one. */
  envelope: string | null
  /**
   * The byte position of the checkpoint's anchor on the target, when it differs from the source's:
   * lines of a fenced-off writer that the source's file holds between the chain's lines are not
   * part of the chain and are not copied, so the bytes before the anchor are fewer.
   */
  anchorBytes: number | null
  /** The largest lease token the thread was claimed (or leased) with: fencing goes on past it. */
  claim: number
  recovery: RecoveryCount | null
  approvals: Array<{ requestId: string; request: unknown; decision: unknown }>
  requests: WaitingRequest[]
}

export interface SourceSurvey {
  threads: ThreadSurvey[]
  accounts: StoredAccount[]
  decisions: RecoveryRecord[]
  degradeSteps: Array<{ taskKey: string; step: number; updatedAt: number }>
  events: { count: number; lastId: number }
  /** What the copy leaves out or changes, for the summary. */
  notes: string[]
}

/** Events read (and copied) at once. */
export const EVENT_PAGE = 1_000

/**
 * A digest of an envelope's JSON: the copy is checked against it without keeping every snapshot
 * in memory. Both backends give an envelope back parsed from the JSON they stored, so the same
 * envelope gives the same text.
 */
export function envelopeDigest(envelope: StateEnvelope): string {
  return createHash('sha256').update(JSON.stringify(envelope)).digest('hex')
}

/** The envelope as the target holds it: its anchor moved to the target's byte count when that differs. */
export function copiedEnvelope(envelope: StateEnvelope, anchorBytes: number | null): StateEnvelope {
  return anchorBytes === null ? envelope : { ...envelope, transcript: { ...envelope.transcript, bytes: anchorBytes } }
}

/** A store's refusal of one thread, as the migration's: the same code, the thread named, nothing written. */
function refusal(error: unknown, threadId: string, target: string): unknown {
  if (!isSpindleError(error)) return error
  return new SpindleError(error.code, `Thread ${threadId} cannot be copied, so nothing was written to ${target}: ${midSentence(error.message)}`, {
    cause: error,
    details: { ...error.details, threadId },
  })
}

/** The thread's entries, or none when it has no transcript at all (a spawn killed before its first line). */
function entriesOf(source: Stores, threadId: string, notes: string[]): TranscriptEntry[] {
  if (source.folders.transcriptBytes(threadId) === null) return []
  const read = source.transcripts.read(threadId)
  if (read.torn) notes.push(`${threadId}: a torn last line (${read.torn.bytes} bytes, a write cut off by a crash) is not part of its chain and was not copied.`)
  if (read.stale) notes.push(`${threadId}: ${read.stale.length} line(s) of a fenced-off writer between its entries are not part of its chain and were not copied.`)
  return read.entries
}

/** The thread's approval requests; a decision stored without its request (a hand edit) is left out: no backend keeps one alone. */
function approvalsOf(source: Stores, threadId: string, notes: string[]): ThreadSurvey['approvals'] {
  const approvals = source.inbox.approvals(threadId)
  const alone = approvals.filter((a) => a.request === null)
  if (alone.length > 0) notes.push(`${threadId}: ${alone.length} approval decision(s) without their request (${alone.map((a) => a.requestId).join(', ')}) were not copied.`)
  return approvals.filter((a) => a.request !== null)
}

/**
 * Where the target's appends leave the transcript, checking that each entry comes out with its own
 * hash (the target computes it again from the entry's time, type and data); and the byte position
 * of entry `anchor`.
 */
function copiedPosition(threadId: string, entries: readonly TranscriptEntry[], anchor: number): { position: TranscriptPosition; anchorBytes: number } {
  let position: TranscriptPosition = { ...EMPTY_POSITION }
  let anchorBytes = 0
  for (const entry of entries) {
    const time = Date.parse(entry.ts)
    const copied = Number.isNaN(time) ? null : encodeEntry(position, entry.type, entry.data, new Date(time))
    if (!copied || copied.entry.ts !== entry.ts || copied.entry.hash !== entry.hash) {
      throw new SpindleError(
        'TRANSCRIPT_CORRUPT',
        `The transcript of ${threadId} verifies, but its entry ${entry.seq} was not written the way spindle writes entries (its time ${JSON.stringify(entry.ts)} or its JSON differs), ` +
          'so a copy could not reproduce its hash. Nothing was written. Inspect the entry with `spindle logs`.',
        { details: { threadId, seq: entry.seq } },
      )
    }
    position = { seq: copied.entry.seq, hash: copied.entry.hash, bytes: position.bytes + Buffer.byteLength(copied.line) }
    if (position.seq === anchor) anchorBytes = position.bytes
  }
  return { position, anchorBytes }
}

/** The checkpoint must be what the transcript replays to, or the copy would carry a thread that cannot be rebuilt. */
function checkCheckpoint(threadId: string, envelope: StateEnvelope | null, entries: readonly TranscriptEntry[], source: MigrateEnd): void {
  if (envelope === null) {
    if (entries.length > 0) replayTranscript(entries)
    return
  }
  let matches = false
  try {
    matches = envelope.transcript.seq === 0 && entries.length === 0 ? true : checkReplay(envelope, entries).matches
  } catch {
    matches = false
  }
  if (matches) return
  const repair = source.kind === 'dir' ? `\`spindle rebuild ${threadId} --apply --dir ${source.dir}\` rewrites it from the transcript` : 'rebuild it from its transcript'
  throw new SpindleError(
    'REPLAY_DIVERGED',
    `The checkpoint of ${threadId} (at transcript entry ${envelope.transcript.seq}) is not what its transcript replays to: ${repair}, then migrate again. Nothing was written.`,
    { details: { threadId, seq: envelope.transcript.seq } },
  )
}

/** Refuses a source that a live runtime process still writes. */
function assertNoLiveLease(leases: readonly Lease[], source: MigrateEnd, now: number): void {
  const live = leases.filter((lease) => lockState(lease, now) === 'live')
  if (live.length === 0) return
  const named = live.slice(0, 3).map((l) => `${l.threadId} (${l.owner}, pid ${l.pid} on ${l.host})`)
  throw new SpindleError(
    'THREAD_LEASED',
    `${live.length} thread(s) of ${endName(source)} are run by a live runtime process: ${named.join(', ')}${live.length > 3 ? ', …' : ''}. ` +
      'Stop every runtime on it (its threads are checkpointed and carry on after the move), then migrate; `spindle locks` shows who holds what. Nothing was written.',
    { details: { threadIds: live.map((l) => l.threadId), owners: [...new Set(live.map((l) => l.owner))] } },
  )
}

/** Refuses a directory whose transcripts lack lines only a journal holds (a power loss before their fdatasync). */
function assertJournalsSettled(source: MigrateEnd): void {
  if (source.kind !== 'dir') return
  const { paths } = source
  const [behind, ...more] = journalLag(paths.journal, (id) => threadFile(paths, id, TRANSCRIPT_FILE))
  if (!behind) return
  throw new SpindleError(
    'TRANSCRIPT_BEHIND_JOURNAL',
    `The transcript of ${behind.threadId}${more.length ? ` (and ${more.length} more)` : ''} lacks lines that ${behind.journal} holds (a power loss before the file's own fdatasync): ` +
      `open a runtime on ${paths.root} first, which writes them back, stop it, then migrate. Nothing was written.`,
    { details: { threadId: behind.threadId, journal: behind.journal } },
  )
}

/**
 * Reads and checks everything the copy takes from `source`; throws, naming the thread, at the first
 * thing that would not survive it (THREAD_LEASED, TRANSCRIPT_BEHIND_JOURNAL, TRANSCRIPT_CHAIN_BROKEN,
 * TRANSCRIPT_CORRUPT, STATE_CORRUPT, REPLAY_DIVERGED). `target` names where nothing was written.
 */
export function surveySource(source: Stores, end: MigrateEnd, target: string, now = Date.now()): SourceSurvey {
  const leases = source.leases.list()
  assertNoLiveLease(leases, end, now)
  assertJournalsSettled(end)
  const leased = new Map(leases.map((lease) => [lease.threadId, lease.token]))
  const notes: string[] = []
  const records = source.registry.list()
  const counts = source.registry.recoveryCounts()
  const threads: ThreadSurvey[] = []
  for (const record of records) {
    const id = record.id
    try {
      const envelope = source.checkpoints.load(id)
      const entries = entriesOf(source, id, notes)
      const anchor = envelope?.transcript.seq ?? 0
      const { position, anchorBytes } = copiedPosition(id, entries, anchor)
      checkCheckpoint(id, envelope, entries, end)
      const moved = envelope !== null && anchor > 0 && anchorBytes !== envelope.transcript.bytes ? anchorBytes : null
      const requests: WaitingRequest[] = []
      for (const request of source.inbox.unclaimed(id)) {
        if (request.body.ok) requests.push({ ...request, threadId: id, body: request.body.value })
        else notes.push(`${id}: a ${request.kind} request left for it cannot be read and was not copied (${request.body.problem}).`)
      }
      threads.push({
        record,
        position,
        entries: entries.length,
        envelope: envelope === null ? null : envelopeDigest(copiedEnvelope(envelope, moved)),
        anchorBytes: moved,
        claim: Math.max(source.registry.leaseToken(id) ?? 0, leased.get(id) ?? 0),
        recovery: counts.get(id) ?? null,
        approvals: approvalsOf(source, id, notes),
        requests,
      })
    } catch (error) {
      throw refusal(error, id, target)
    }
  }
  const registered = new Set(records.map((r) => r.id))
  const strays = source.checkpoints.list().filter((id) => !registered.has(id))
  if (strays.length > 0) notes.push(`${strays.length} checkpoint(s) without a registry row (spawns that never returned: ${strays.slice(0, 3).join(', ')}${strays.length > 3 ? ', …' : ''}) were not copied.`)
  let count = 0
  for (let page = source.registry.events.after(0, EVENT_PAGE); page.length > 0; page = source.registry.events.after(page.at(-1)!.id, EVENT_PAGE)) count += page.length
  return {
    threads,
    accounts: source.ledger.accounts(),
    decisions: source.recovery.decisions(),
    degradeSteps: source.recovery.degradeSteps(),
    events: { count, lastId: source.registry.events.lastId() },
    notes,
  }
}
