/**
 * Thread "folders" of the PostgreSQL backend: a thread's rows, named `postgres:<schema>/<id>` in
 * messages. Nothing is set aside (a fenced-off writer's lines are never written, see
 * pgTranscript.ts). Recovery reads many threads ahead, a batch at a time (pgReadAhead.ts).
 */
import type { ThreadFolders } from '../types.js'
import type { PgBridge } from './bridge.js'
import { pgReadAhead } from './pgReadAhead.js'

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
    readAhead: () => pgReadAhead(options.db),
  }
}
