/**
 * Thread folders on a data directory: `threads/<id>/`, holding a thread's transcript, its
 * state.json and its request files.
 */
import fs from 'node:fs'
import { anchorSetAside } from './anchorSetAside.js'
import type { DataPaths } from './paths.js'
import { threadDir, threadFile, TRANSCRIPT_FILE } from './paths.js'
import { bootThreadFileReader } from './prefetch.js'
import { CANCEL_FILE } from './requestFiles.js'
import type { ThreadFolders } from './types.js'

export function createFileThreadFolders(paths: DataPaths): ThreadFolders {
  return {
    where: (threadId) => threadDir(paths, threadId),
    transcriptBytes(threadId) {
      try {
        return fs.statSync(threadFile(paths, threadId, TRANSCRIPT_FILE)).size
      } catch {
        return null
      }
    },
    setAside: (threadId, anchor, savedAt) => anchorSetAside(paths, threadId, anchor, savedAt),
    // The worker also says which folders hold no cancel request, so the first poll after recovery
    // need not look in them again.
    readAhead: () => bootThreadFileReader(paths.threads, { watchFile: CANCEL_FILE }),
  }
}
