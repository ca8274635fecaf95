/**
 * Parsing and verifying transcript lines: shared by the file backend and offline readers.
 */
import { SpindleError } from '../src/base/errors.js'
import { entryHash, hashText } from './transcriptHash.js'
import type { TranscriptEntry, TranscriptPosition } from './types.js'

export interface ParsedTail {
  entries: TranscriptEntry[]
  position: TranscriptPosition
  /** Byte offset and length of a torn final fragment, if any. */
  torn: { offset: number; bytes: number } | null
  /**
   * Complete lines between others that repeat a seq already read: a process that lost the thread
   * while it was stopped wrote them between the new owner's lines. Skipped, never part of the
   * chain; left where they are. Empty in the usual case.
   */
  stale: Array<{ offset: number; bytes: number; seq: number }>
}

function broken(path: string, seq: number, reason: string): SpindleError {
  return new SpindleError(
    'TRANSCRIPT_CHAIN_BROKEN',
    `The transcript ${path} is damaged at seq ${seq}: ${reason}. Entries before it are intact; ` +
      'inspect the file (readThreadFiles() from the spindle API reads it) or restore it from a backup.',
    { details: { path, seq, reason } },
  )
}

/**
 * Verifies `buffer` (the bytes after `from`) line by line. A final fragment without a newline is a
 * torn write; so is an unparsable last line, since a crash can cut a line anywhere; so are lines at
 * the end that repeat seqs already read (a stale writer's). A complete line in between that repeats
 * a seq already read is a stale writer's too, landed between two of the owner's lines: skipped and
 * listed (`stale`), and the next line must go on from the chain before it. Damage anywhere else is
 * real damage.
 */
export function parseTranscriptBytes(buffer: Buffer, from: TranscriptPosition, path: string): ParsedTail {
  const entries: TranscriptEntry[] = []
  let { seq, hash } = from
  let offset = 0
  let torn: ParsedTail['torn'] = null
  const stale: ParsedTail['stale'] = []
  while (offset < buffer.length) {
    const newline = buffer.indexOf(0x0a, offset)
    const end = newline === -1 ? buffer.length : newline
    const isLast = newline === -1 || newline === buffer.length - 1
    const text = buffer.subarray(offset, end).toString('utf8')
    let entry: TranscriptEntry | null = null
    try {
      entry = JSON.parse(text) as TranscriptEntry
    } catch {
      if (isLast) {
        torn = { offset: from.bytes + offset, bytes: buffer.length - offset }
        break
      }
      throw broken(path, seq + 1, 'the line is not valid JSON')
    }
    if (newline === -1) {
      // Parsable but without its newline: the write was cut before the end of the line.
      torn = { offset: from.bytes + offset, bytes: buffer.length - offset }
      break
    }
    if (typeof entry === 'object' && entry !== null && typeof entry.seq === 'number' && entry.seq <= seq) {
      // A seq already read: written by a process that lost the thread while it was stopped.
      if (staleTail(buffer, offset, seq)) {
        // Lines at the end, after the new owner's last line (see jsonlTranscript's append). Never
        // a continuation of the chain: set aside like a torn line.
        torn = { offset: from.bytes + offset, bytes: buffer.length - offset }
        break
      }
      if (leadingSeq(text) === entry.seq) {
        // Between two of the owner's lines (its append checks before each line, but a stopped
        // writer's line can land between that check and the owner's own write): skipped.
        stale.push({ offset: from.bytes + offset, bytes: newline + 1 - offset, seq: entry.seq })
        offset = newline + 1
        continue
      }
    }
    if (typeof entry !== 'object' || entry === null || entry.seq !== seq + 1) {
      throw broken(path, seq + 1, `expected seq ${seq + 1}, found ${JSON.stringify((entry as { seq?: unknown } | null)?.seq)}`)
    }
    if (entry.hash !== entryHash(hash, entry.seq, entry.ts, entry.type, entry.data)) {
      throw broken(path, entry.seq, 'its hash does not match its content and the entry before it')
    }
    entries.push(entry)
    seq = entry.seq
    hash = entry.hash
    offset = newline + 1
  }
  return { entries, position: { seq, hash, bytes: from.bytes + offset }, torn, stale }
}

/** What a transcript's skipped stale lines (a fenced-off writer's, between the owner's lines) are, for onProblem and doctor. */
export function staleLinesMessage(id: string, stale: ReadonlyArray<{ offset: number; seq: number }>): string {
  const where = stale.map((line) => `seq ${line.seq} at byte ${line.offset}`).join(', ')
  return (
    `The transcript of ${id} holds ${stale.length} line(s) repeating a seq already written, between the chain's lines (${where}): most likely ` +
    `written by a process that lost the thread to another while it was stopped, landing between two of the new owner's lines. They are ` +
    `skipped, never part of the chain, which verifies without them; they stay in the file until it is compacted.`
  )
}

/** The seq a transcript line starts with (every line `encodeEntry` writes does), or null. */
export function leadingSeq(line: string): number | null {
  const found = /^\{"seq":(\d+),/.exec(line)
  return found ? Number(found[1]) : null
}

/** Whether every line of `buffer` from `offset` on is a complete line with a seq of at most `seq`. */
function staleTail(buffer: Buffer, offset: number, seq: number): boolean {
  if (buffer[buffer.length - 1] !== 0x0a) return false
  for (const line of buffer.subarray(offset, buffer.length - 1).toString('utf8').split('\n')) {
    const found = leadingSeq(line)
    if (found === null || found > seq) return false
  }
  return true
}

/**
 * Builds the next entry and its line. `data` is serialised once: the hash covers exactly the text a
 * reader will parse back (JSON.stringify of parsed JSON reproduces the same text).
 */
export function encodeEntry(
  position: TranscriptPosition,
  type: string,
  data: unknown,
  ts: Date,
): { entry: TranscriptEntry; line: string } {
  const seq = position.seq + 1
  const iso = ts.toISOString()
  const dataJson = data === undefined ? 'null' : JSON.stringify(data)
  const tsJson = JSON.stringify(iso)
  const typeJson = JSON.stringify(type)
  const hash = hashText(position.hash, `[${seq},${tsJson},${typeJson},${dataJson}]`)
  const line = `{"seq":${seq},"ts":${tsJson},"type":${typeJson},"data":${dataJson},"hash":"${hash}"}\n`
  return { entry: { seq, ts: iso, type, data: data === undefined ? null : data, hash }, line }
}
