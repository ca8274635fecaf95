/**
 * Thread "folders" of the PostgreSQL backend: a thread's rows, named `postgres:<schema>/<id>` in
 * messages. Nothing is set aside (a fenced-off writer's lines are never written, see
 * pgTranscript.ts), and nothing is read ahead: opening a thread is one statement already.
 */
import type { ThreadFolders } from '../types.js'
import type { PgBridge } from './bridge.js'

/**
 * @param options.db the bridge the stores use (its schema names where threads are)
 * @param options.transcripts the transcript store of the same schema (see createPgTranscriptStore)
 */
export function createPgThreadFolders(options: { db: PgBridge; transcripts: { storedBytes(threadId: string): number | null } }): ThreadFolders {
  const schema = options.db.schema ?? 'public'
  return {
    where: (threadId) => `postgres:${schema}/${threadId}`,
    transcriptBytes: (threadId) => options.transcripts.storedBytes(threadId),
    setAside: () => null,
    readAhead: () => null,
  }
}
