/**
 * `spindle rebuild <id> --compact` (design 003 §3): a deduplicated transcript. Every entry that
 * replay or the conversation needs stays — the spawn, each machine input, tool intents, tool-call
 * repairs — and a run of the same note with the same data (its time aside) keeps only its first.
 * The chain is re-hashed and renumbered, the old file kept beside it, and state.json rebuilt to
 * point into the new one. Never while a live runtime process holds the thread.
 */
import fs from 'node:fs'
import path from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { writeFileAtomicSync } from '../../persistence/atomicFile.js'
import { makeEnvelope } from '../../persistence/envelope.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { PRE_COMPACT_PREFIX } from '../../persistence/anchorSetAside.js'
import { dataPaths, STATE_FILE, threadDir, TRANSCRIPT_FILE } from '../../persistence/paths.js'
import { refuseIfBehindJournal } from '../../persistence/foreignJournals.js'
import { encodeEntry } from '../../persistence/transcriptLines.js'
import type { TranscriptEntry, TranscriptPosition } from '../../persistence/types.js'
import { EMPTY_POSITION } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import { locks } from './locks.js'
import { TOOL_CALLS_REPAIRED } from '../thread/messages.js'
import { SPAWN_ENTRY, isMachineEventEntry, replayTranscript } from '../thread/replay.js'

export interface CompactReport {
  threadId: string
  before: number
  after: number
  /** What was dropped, by type. */
  dropped: Record<string, number>
  /** The original transcript, kept (only when applied). */
  keptAs: string | null
  applied: boolean
}

const ESSENTIAL = new Set([SPAWN_ENTRY, 'tool_intent', TOOL_CALLS_REPAIRED])

function withoutTime(data: unknown): unknown {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return data
  const { at: _at, ...rest } = data as Record<string, unknown>
  return rest
}

/** The entries a compacted transcript keeps. */
export function compactEntries(entries: readonly TranscriptEntry[]): TranscriptEntry[] {
  const kept: TranscriptEntry[] = []
  let lastNote: TranscriptEntry | null = null
  for (const entry of entries) {
    if (isMachineEventEntry(entry) || ESSENTIAL.has(entry.type)) {
      kept.push(entry)
      lastNote = null
      continue
    }
    if (lastNote && lastNote.type === entry.type && isDeepStrictEqual(withoutTime(lastNote.data), withoutTime(entry.data))) continue
    kept.push(entry)
    lastNote = entry
  }
  return kept
}

export function compactThread(dir: string, id: string, options: { apply?: boolean } = {}): CompactReport {
  const paths = dataPaths(dir)
  const lease = locks(dir).locks.find((l) => l.threadId === id && l.state === 'live')
  if (lease && options.apply) {
    throw new SpindleError('THREAD_LEASED', `Thread ${id} is run by ${lease.owner} (pid ${lease.pid}): compact it once that process has stopped.`, { details: { threadId: id } })
  }
  // A rewritten file (another inode) owes a journal nothing: lines a power loss took from this one
  // and only a journal still holds would be lost for good.
  if (options.apply) refuseIfBehindJournal(paths, id, 'compact it')
  const transcripts = createJsonlTranscriptStore({ paths, durability: 'fsync' })
  const { entries } = transcripts.read(id)
  const kept = compactEntries(entries)
  const dropped: Record<string, number> = {}
  const keptSet = new Set(kept)
  for (const entry of entries) if (!keptSet.has(entry)) dropped[entry.type] = (dropped[entry.type] ?? 0) + 1
  const report: CompactReport = { threadId: id, before: entries.length, after: kept.length, dropped, keptAs: null, applied: false }
  if (!options.apply || kept.length === entries.length) return report

  let position: TranscriptPosition = EMPTY_POSITION
  let text = ''
  for (const entry of kept) {
    const { entry: written, line } = encodeEntry(position, entry.type, entry.data, new Date(entry.ts))
    text += line
    position = { seq: written.seq, hash: written.hash, bytes: position.bytes + Buffer.byteLength(line) }
  }
  const replayed = replayTranscript(kept)
  const full = replayTranscript(entries)
  if (!isDeepStrictEqual(replayed.snapshot, full.snapshot)) {
    throw new SpindleError('REPLAY_DIVERGED', `Compacting ${id} would change what its transcript replays to; nothing was written.`, { details: { threadId: id } })
  }
  const folder = threadDir(paths, id)
  const file = path.join(folder, TRANSCRIPT_FILE)
  const keptAs = path.join(folder, `${PRE_COMPACT_PREFIX}${Date.now()}`)
  fs.copyFileSync(file, keptAs)
  // Durable before the transcript is replaced: a runtime that finds state.json pointing into the
  // old transcript (killed between the two writes below) recognises it by this copy.
  const copy = fs.openSync(keptAs, 'r')
  try {
    fs.fsyncSync(copy)
  } finally {
    fs.closeSync(copy)
  }
  // `under`: never through a thread folder swapped for a link since the transcript was read.
  writeFileAtomicSync(file, text, { fsync: true, under: paths.root })
  writeFileAtomicSync(path.join(folder, STATE_FILE), JSON.stringify(makeEnvelope(id, replayed.status, position, replayed.snapshot, Date.now())), { fsync: true, under: paths.root })
  return { ...report, keptAs, applied: true }
}
