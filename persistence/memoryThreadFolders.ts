/**
 * Thread "folders" of the memory backend: nothing on disk, so nothing is set aside and nothing
 * is worth reading ahead; a transcript's length is what the memory transcript store holds.
 */
import type { ThreadFolders } from './types.js'

export function createMemoryThreadFolders(transcripts: { storedBytes(threadId: string): number | null }): ThreadFolders {
  return {
    where: (threadId) => `(memory)/${threadId}`,
    transcriptBytes: (threadId) => transcripts.storedBytes(threadId),
    setAside: () => null,
    readAhead: () => null,
  }
}
