/**
 * In-memory transcripts: the reference implementation of `TranscriptStore`, for tests and the
 * persistence-off benchmark. Same hashes, same positions (byte counts of the lines the file backend
 * would write) and the same error codes as the file backend; nothing survives the process.
 */
import { SpindleError } from '../src/base/errors.js'
import { assertThreadId } from '../src/base/ids.js'
import { encodeEntry } from './transcriptLines.js'
import type { TranscriptEntry, TranscriptOpenResult, TranscriptPosition, TranscriptStore } from './types.js'
import { EMPTY_POSITION } from './types.js'

interface Log {
  entries: TranscriptEntry[]
  position: TranscriptPosition
}

function notOpen(threadId: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `The transcript of ${threadId} is not open: open it before appending to it.`, {
    details: { threadId },
  })
}

function missing(threadId: string, message: string, details: Record<string, unknown> = {}): SpindleError {
  const where = `(memory)/${threadId}/transcript.jsonl`
  return new SpindleError('TRANSCRIPT_CORRUPT', `The transcript ${where} ${message}`, { details: { path: where, threadId, ...details } })
}

/**
 * An in-memory `TranscriptStore`. Entries are kept per thread until the store is dropped; closing a
 * thread only stops appends to it. `sync` resolves at once.
 *
 * Caveat: entries hold the `data` objects passed to `append` (not copies), so mutating one after
 * appending changes what `read` returns. The file backend returns parsed copies.
 *
 * @example
 * const store = createMemoryTranscriptStore()
 * store.open('research-3f9k2m1x0q7a')
 * store.append('research-3f9k2m1x0q7a', 'START', null)
 * store.read('research-3f9k2m1x0q7a').entries.length // 1
 * @see createJsonlTranscriptStore for the file backend.
 */
export function createMemoryTranscriptStore(): TranscriptStore & { storedBytes(threadId: string): number | null } {
  const logs = new Map<string, Log>()
  const opened = new Set<string>()

  function openLog(threadId: string, from: TranscriptPosition): Log {
    const log = logs.get(threadId)
    if (!log) {
      if (from.seq > 0) throw missing(threadId, `is missing, but state.json says it holds ${from.seq} entries.`, { seq: from.seq })
      const created = { entries: [], position: { ...EMPTY_POSITION } }
      logs.set(threadId, created)
      return created
    }
    if (from.seq > log.position.seq) {
      throw missing(threadId, `is truncated: state.json says ${from.seq} entries, it has ${log.position.seq}.`, { seq: from.seq })
    }
    // As in the file backend: appends chain to from.hash, so it must be the hash of entry from.seq.
    if (from.seq > 0 && log.entries[from.seq - 1]?.hash !== from.hash) {
      throw missing(threadId, `does not match state.json at entry ${from.seq}.`, { seq: from.seq })
    }
    return log
  }

  return {
    open(threadId: string, from: TranscriptPosition = EMPTY_POSITION): TranscriptOpenResult {
      assertThreadId(threadId)
      if (opened.has(threadId)) return { position: { ...logs.get(threadId)!.position }, tail: [], torn: null }
      const log = openLog(threadId, from)
      opened.add(threadId)
      return { position: { ...log.position }, tail: log.entries.slice(from.seq), torn: null }
    },

    append(threadId: string, type: string, data: unknown, ts: Date = new Date()): TranscriptEntry {
      const log = opened.has(threadId) ? logs.get(threadId) : undefined
      if (!log) throw notOpen(threadId)
      const { entry, line } = encodeEntry(log.position, type, data, ts)
      log.entries.push(entry)
      log.position = { seq: entry.seq, hash: entry.hash, bytes: log.position.bytes + Buffer.byteLength(line) }
      return entry
    },

    position(threadId: string): TranscriptPosition {
      const log = opened.has(threadId) ? logs.get(threadId) : undefined
      if (!log) throw notOpen(threadId)
      return { ...log.position }
    },

    async sync(): Promise<void> {},

    read(threadId: string): { entries: TranscriptEntry[]; torn: { bytes: number } | null } {
      const log = logs.get(threadId)
      if (!log) throw missing(threadId, 'does not exist. Check the thread id.')
      return { entries: [...log.entries], torn: null }
    },

    close(threadId: string): void {
      opened.delete(threadId)
    },

    /** Bytes the file backend would hold for the thread's transcript, open or not; null when it has none. */
    storedBytes(threadId: string): number | null {
      return logs.get(threadId)?.position.bytes ?? null
    },

    closeAll(): void {
      opened.clear()
    },
  }
}
