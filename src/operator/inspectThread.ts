/**
 * Reading a thread's files without a runtime, and checking that its transcript replays to its
 * state.json. The basis of snapshot replay tests and of `spindle rebuild`.
 */
import fs from 'node:fs'
import { isDeepStrictEqual } from 'node:util'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { assertDataDir, dataPaths, threadDir } from '../../persistence/paths.js'
import { SpindleError } from '../base/errors.js'
import type { StateEnvelope, TranscriptEntry } from '../../persistence/types.js'
import { replayTranscript } from '../thread/replay.js'

export interface ThreadFiles {
  envelope: StateEnvelope | null
  entries: TranscriptEntry[]
  torn: { bytes: number } | null
}

/** Reads and verifies a thread's state.json and transcript. Throws the stores' errors (STATE_CORRUPT, TRANSCRIPT_CHAIN_BROKEN …). */
export function readThreadFiles(dir: string, threadId: string): ThreadFiles {
  const paths = dataPaths(dir)
  assertDataDir(paths)
  if (!fs.existsSync(threadDir(paths, threadId))) {
    throw new SpindleError('THREAD_NOT_FOUND', `No thread ${threadId} in ${paths.root} (no ${threadDir(paths, threadId)}).`, { details: { threadId } })
  }
  const envelope = createFileCheckpointStore({ paths, durability: 'process' }).load(threadId)
  const { entries, torn } = createJsonlTranscriptStore({ paths, durability: 'process' }).read(threadId)
  return { envelope, entries, torn }
}

export interface ReplayCheck {
  matches: boolean
  /** The snapshot rebuilt from the transcript up to the position state.json records. */
  replayed: unknown
  stored: unknown
  /** Transcript entries recorded after the checkpoint (a crash between the two leaves some). */
  pendingEntries: number
  /**
   * Whether the transcript holds the entry state.json says it was checkpointed at (same seq and
   * hash). Not after a transcript rewritten under it — a compaction killed between writing the
   * new transcript and its state.json — or cut below it: then `matches` is false too.
   */
  checkpointFound: boolean
}

/** Replays a thread's transcript and compares the result with its state.json. */
export function verifyReplay(dir: string, threadId: string): ReplayCheck {
  const { envelope, entries } = readThreadFiles(dir, threadId)
  return checkReplay(envelope, entries)
}

/** `verifyReplay` of a thread's stored envelope and transcript entries, however they were read. */
export function checkReplay(envelope: StateEnvelope | null, entries: readonly TranscriptEntry[]): ReplayCheck {
  const upTo = envelope?.transcript.seq ?? Number.POSITIVE_INFINITY
  const replayed = replayTranscript(entries.filter((e) => e.seq <= upTo)).snapshot
  const stored = envelope?.snapshot ?? null
  const at = envelope?.transcript
  const checkpointFound = !at || at.seq === 0 || entries.some((e) => e.seq === at.seq && e.hash === at.hash)
  return {
    matches: checkpointFound && isDeepStrictEqual(replayed, stored),
    checkpointFound,
    replayed,
    stored,
    pendingEntries: entries.filter((e) => e.seq > upTo).length,
  }
}
