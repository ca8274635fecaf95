/**
 * The stores a runtime uses, opened as one bundle per backend: files and SQLite on a data
 * directory, or memory. The runtime sees only the interfaces (persistence/types.ts); a new backend
 * is one more function here that returns them, having passed the same contract suites.
 */
import fs from 'node:fs'
import { SpindleError } from '../base/errors.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { createFileRequestInbox } from '../../persistence/fileRequestInbox.js'
import { createFileThreadFolders } from '../../persistence/fileThreadFolders.js'
import { createMemoryCheckpointStore } from '../../persistence/memoryCheckpointStore.js'
import { createMemoryLeases } from '../../persistence/memoryLeases.js'
import { createMemoryLedger } from '../../persistence/memoryLedger.js'
import { createMemoryRecovery } from '../../persistence/memoryRecovery.js'
import { createMemoryRegistry } from '../../persistence/memoryRegistry.js'
import { createMemoryRequestInbox } from '../../persistence/memoryRequestInbox.js'
import { createMemoryThreadFolders } from '../../persistence/memoryThreadFolders.js'
import { createMemoryTranscriptStore } from '../../persistence/memoryTranscript.js'
import { removeLeftovers } from '../../persistence/leftovers.js'
import { assertDirectories, assertRegistryKept, dataPaths } from '../../persistence/paths.js'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { openSqliteRecovery } from '../../persistence/sqliteRecovery.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { openPostgresStores, type DatabaseOptions } from './openPostgresStores.js'
import type { Stores, StorePorts } from './stores.js'
import type { Durability } from '../../persistence/types.js'

export type { Stores, StorePorts } from './stores.js'

export function openStores(
  options: { dir: string; durability: Durability; store?: 'file' | 'memory'; maxOpenTranscripts?: number; database?: DatabaseOptions },
  ports: StorePorts,
): Stores {
  if (options.database) return openPostgresStores(options.database, ports)
  const { durability } = options
  const paths = dataPaths(options.dir)
  const close = (stores: Omit<Stores, 'close' | 'root' | 'shared' | 'folders' | 'inbox'>) => (): void => {
    stores.transcripts.closeAll()
    stores.registry.close()
    stores.ledger.close()
    stores.leases.close()
    stores.recovery.close()
  }
  if (options.store === 'memory') {
    const transcripts = createMemoryTranscriptStore()
    const stores = {
      transcripts,
      checkpoints: createMemoryCheckpointStore(),
      registry: createMemoryRegistry(),
      ledger: createMemoryLedger(),
      leases: createMemoryLeases(),
      recovery: createMemoryRecovery(),
    }
    return { root: paths.root, shared: false, ...stores, folders: createMemoryThreadFolders(transcripts), inbox: createMemoryRequestInbox(), close: close(stores) }
  }
  assertDirectories(paths)
  assertRegistryKept(paths)
  fs.mkdirSync(paths.threads, { recursive: true })
  // What processes killed mid-write left (temp files, a journal probe, a set-aside bell): removed
  // once their writers are gone for good. Their claimed requests are taken over by the inbox's
  // first sweep, their empty journals settled with the others after recovery.
  removeLeftovers(paths)
  const stores = {
    transcripts: createJsonlTranscriptStore({
      paths,
      durability,
      ...(options.maxOpenTranscripts !== undefined ? { maxOpen: options.maxOpenTranscripts } : {}),
      onJournalSkipped: ({ file, reason }) =>
        ports.problem(
          new SpindleError('JOURNAL_UNREADABLE', `Skipped ${file} in the transcript journal: ${reason}. Threads open without whatever it holds; move it out of ${paths.journal} (if it is a journal spindle wrote, make it readable and open the directory again).`, {
            details: { file },
          }),
        ),
      onForeignTail: ({ threadId, file, bytes, savedTo }) =>
        ports.problem(
          new SpindleError(
            'TRANSCRIPT_FOREIGN_TAIL',
            `${bytes} bytes this process did not write were found at the end of ${file} and moved to ${savedTo} before the next line: ` +
              'most likely the last line of a process that lost the thread to this one while it was stopped (its lease ran out). ' +
              'The transcript goes on unbroken; look at the saved bytes if no other process ran this thread.',
            { details: { threadId, file, bytes, savedTo } },
          ),
          threadId,
        ),
    }),
    checkpoints: createFileCheckpointStore({ paths, durability, onFolderInvalid: (threadId, error) => ports.folderInvalid(threadId, error) }),
    registry: openSqliteRegistry({ path: paths.registry, durability }),
    ledger: openSqliteLedger({ path: paths.ledger, durability }),
    leases: openSqliteLeases({ path: paths.leases, durability }),
    recovery: openSqliteRecovery({ path: paths.recovery, durability }),
  }
  return {
    root: paths.root,
    shared: true,
    ...stores,
    folders: createFileThreadFolders(paths),
    inbox: createFileRequestInbox({ paths, durability, onProblem: (error, threadId) => ports.problem(error, threadId) }),
    close: close(stores),
  }
}
