/**
 * What must hold of every thread in a test database after a fault: read back through the
 * PostgreSQL stores themselves, as a new worker would read them.
 */
import { openPostgresStores } from '../../src/runtime/openPostgresStores.js'
import { checkReplay } from '../../src/operator/inspectThread.js'
import type { ThreadRecord } from '../../persistence/types.js'

export interface StoredThread {
  record: ThreadRecord
  /** The transcript's hash chain verified on read (a broken one throws), and the state it replays to equals the checkpoint's. */
  replays: boolean
  entries: number
}

export function storedThreads(url: string, schema: string): StoredThread[] {
  const stores = openPostgresStores({ url, schema }, { problem: () => {}, folderInvalid: () => {} })
  try {
    return stores.registry.list().map((record) => {
      const { entries } = stores.transcripts.read(record.id)
      return { record, replays: checkReplay(stores.checkpoints.load(record.id), entries).matches, entries: entries.length }
    })
  } finally {
    stores.close()
  }
}
