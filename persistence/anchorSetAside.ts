/**
 * Where a transcript's lines are kept when they are no longer in it (a compaction's old
 * transcript, a stale writer's lines set aside), and `anchorSetAside`, which finds the line a
 * state.json is anchored at there (the thread folders' `setAside`). Apart from the transcript
 * store, which never reads these files: it is asked only when a checkpoint does not match its
 * transcript. Side effects (reads only).
 */
import fs from 'node:fs'
import path from 'node:path'
import type { DataPaths } from './paths.js'
import { TRANSCRIPT_FILE, threadFile } from './paths.js'
import { openRegular, readRange } from './fdio.js'
import { parseTranscriptBytes } from './transcriptLines.js'
import { entryEndingAt } from './transcriptFile.js'
import type { TranscriptPosition } from './types.js'
import { EMPTY_POSITION } from './types.js'

/** What `spindle rebuild --compact` keeps the transcript it replaced as: `transcript.jsonl.pre-compact-<ms>`. */
export const PRE_COMPACT_PREFIX = `${TRANSCRIPT_FILE}.pre-compact-`

/** What a transcript's set-aside lines are kept as: `transcript.jsonl.torn-<offset>` (a torn line, or a stale writer's). */
const TORN_PREFIX = `${TRANSCRIPT_FILE}.torn-`

/** Whether a complete line of `bytes` is the entry `anchor` names (its seq and hash). */
function holdsLine(bytes: Buffer, anchor: TranscriptPosition): boolean {
  const prefix = `{"seq":${anchor.seq},`
  for (const line of bytes.toString('utf8').split('\n')) {
    if (!line.startsWith(prefix)) continue
    try {
      if ((JSON.parse(line) as { hash?: unknown }).hash === anchor.hash) return true
    } catch {
      // A torn or foreign line: not the entry.
    }
  }
  return false
}

/** The whole of a thread file, or null when it cannot be read as a regular file. */
function readKept(file: string): Buffer | null {
  let opened: { fd: number; size: number }
  try {
    opened = openRegular(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW)
  } catch {
    return null
  }
  try {
    return readRange(opened.fd, 0, opened.size)
  } catch {
    return null
  } finally {
    fs.closeSync(opened.fd)
  }
}

/**
 * Where the line a state.json is anchored at (`anchor`: it ends at `anchor.bytes` with that seq
 * and hash) is kept, when the transcript's chain does not hold it there; or null. Two ways that
 * happens without damage:
 * - 'compaction': a compaction killed between writing the new transcript and its state.json left
 *   the state.json pointing into the transcript it replaced (`transcript.jsonl.pre-compact-<ms>`,
 *   at the same offset). Only a compaction begun after that state.json was saved (`savedAt`, ms)
 *   counts: a state.json written later points into the compacted transcript, and a mismatch there
 *   is damage.
 * - 'stale': a process that had lost the thread (stopped between its lease check and its writes)
 *   appended lines and renamed its state.json over the new owner's. Its lines repeat seqs of the
 *   chain: the new owner moved them aside (`transcript.jsonl.torn-<offset>`), or they are still
 *   in the transcript, skipped by every reader; and it believed they ended where its own view of
 *   the file did, so the anchor's offset may point anywhere. The line is looked for by seq and
 *   hash, and counts only if the chain does not hold it.
 * Either way the transcript replays to the thread's state without that state.json. Only asked when
 * a checkpoint does not match its transcript, so it costs recovery nothing.
 */
export function anchorSetAside(
  paths: DataPaths,
  threadId: string,
  anchor: TranscriptPosition,
  savedAt: number,
): { keptAs: string; why: 'compaction' | 'stale' } | null {
  const transcript = threadFile(paths, threadId, TRANSCRIPT_FILE)
  const folder = path.dirname(transcript)
  let names: string[]
  try {
    names = fs.readdirSync(folder)
  } catch {
    return null
  }
  const stamp = (name: string, prefix: string): number => Number(name.slice(prefix.length).split('.')[0]) || 0
  const compactions = names
    .filter((name) => name.startsWith(PRE_COMPACT_PREFIX) && stamp(name, PRE_COMPACT_PREFIX) > savedAt)
    .sort((a, b) => stamp(b, PRE_COMPACT_PREFIX) - stamp(a, PRE_COMPACT_PREFIX))
  for (const name of compactions) {
    const file = path.join(folder, name)
    let opened: { fd: number; size: number }
    try {
      opened = openRegular(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW)
    } catch {
      continue
    }
    try {
      if (opened.size < anchor.bytes) continue
      const entry = entryEndingAt(opened.fd, anchor.bytes)
      if (entry?.seq === anchor.seq && entry?.hash === anchor.hash) return { keptAs: file, why: 'compaction' }
    } catch {
      // Unreadable: not a file this state.json can be checked against.
    } finally {
      fs.closeSync(opened.fd)
    }
  }
  // A stale writer's line: never one the chain holds (that would be damage to where it lies).
  const current = readKept(transcript)
  if (current === null) return null
  let parsed: ReturnType<typeof parseTranscriptBytes>
  try {
    parsed = parseTranscriptBytes(current, EMPTY_POSITION, transcript)
  } catch {
    return null
  }
  if (parsed.entries.some((entry) => entry.seq === anchor.seq && entry.hash === anchor.hash)) return null
  const outside = [...parsed.stale, ...(parsed.torn ? [parsed.torn] : [])]
  if (outside.some((range) => holdsLine(current.subarray(range.offset, range.offset + range.bytes), anchor))) return { keptAs: transcript, why: 'stale' }
  for (const name of names.filter((n) => n.startsWith(TORN_PREFIX)).sort()) {
    const file = path.join(folder, name)
    const kept = readKept(file)
    if (kept && holdsLine(kept, anchor)) return { keptAs: file, why: 'stale' }
  }
  return null
}
