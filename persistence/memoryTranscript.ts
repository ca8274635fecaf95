/**
 * In-memory transcripts: the reference implementation, for tests and the persistence-off benchmark.
 */
import { SpindleError } from '../src/errors.js'
import { makeEntry, serialiseEntry } from './transcriptLines.js'
import type { TranscriptEntry, TranscriptPosition, TranscriptStore } from './types.js'
import { EMPTY_POSITION } from './types.js'

export function createMemoryTranscriptStore(): TranscriptStore {
  const logs = new Map<string, { entries: TranscriptEntry[]; position: TranscriptPosition }>()
  const opened = new Set<string>()
  const logOf = (id: string) => {
    const log = logs.get(id)
    if (!log) throw new SpindleError('THREAD_NOT_FOUND', `No transcript for ${id}.`, { details: { threadId: id } })
    return log
  }
  return {
    open(threadId, from) {
      if (!logs.has(threadId)) {
        if (from && from.seq > 0) {
          throw new SpindleError('TRANSCRIPT_CORRUPT', `The transcript of ${threadId} is missing.`, { details: { threadId } })
        }
        logs.set(threadId, { entries: [], position: { ...EMPTY_POSITION } })
      }
      const log = logOf(threadId)
      const wasOpen = opened.has(threadId)
      opened.add(threadId)
      const tail = wasOpen ? [] : log.entries.filter((e) => e.seq > (from?.seq ?? 0))
      return { position: { ...log.position }, tail, torn: null }
    },
    append(threadId, type, data, ts = new Date()) {
      if (!opened.has(threadId)) {
        throw new SpindleError('THREAD_NOT_FOUND', `The transcript of ${threadId} is not open for appending.`, { details: { threadId } })
      }
      const log = logOf(threadId)
      const entry = makeEntry(log.position, type, data, ts)
      log.entries.push(entry)
      log.position = { seq: entry.seq, hash: entry.hash, bytes: log.position.bytes + Buffer.byteLength(serialiseEntry(entry)) }
      return entry
    },
    position(threadId) {
      return { ...(logs.get(threadId)?.position ?? EMPTY_POSITION) }
    },
    async sync() {},
    read(threadId) {
      return { entries: [...logOf(threadId).entries], torn: null }
    },
    close(threadId) {
      opened.delete(threadId)
    },
    closeAll() {
      opened.clear()
    },
  }
}
