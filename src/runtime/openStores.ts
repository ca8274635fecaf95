/**
 * The stores a runtime uses, opened as one bundle per backend: files and SQLite on a data
 * directory, or memory.
 */
import fs from 'node:fs'
import { SpindleError } from '../base/errors.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { createMemoryCheckpointStore } from '../../persistence/memoryCheckpointStore.js'
import { createMemoryTranscriptStore } from '../../persistence/memoryTranscript.js'
import { assertDirectories, assertRegistryKept, dataPaths } from '../../persistence/paths.js'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { openSqliteRecovery } from '../../persistence/sqliteRecovery.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { CheckpointStore, Durability, LeaseStore, Ledger, RecoveryStore, Registry, TranscriptStore } from '../../persistence/types.js'

export interface Stores {
  /** The data directory's root (a memory backend names the directory it was given). */
  root: string
  /** Nothing is written anywhere: threads live as long as the process. */
  memory: boolean
  transcripts: TranscriptStore
  checkpoints: CheckpointStore
  registry: Registry
  ledger: Ledger
  leases: LeaseStore
  recovery: RecoveryStore
  close(): void
}

/** What the stores tell the runtime while it runs: wired in the composition root. */
export interface StorePorts {
  /** A problem a store found that stopped no thread. */
  problem(error: unknown, threadId?: string): void
  /** A thread's folder was no real directory when its checkpoint was due: nothing was written through it. */
  folderInvalid(threadId: string, error: SpindleError): void
}

export function openStores(options: { dir: string; durability: Durability; store?: 'file' | 'memory' }, ports: StorePorts): Stores {
  const { durability } = options
  const paths = dataPaths(options.dir)
  const close = (stores: Omit<Stores, 'close' | 'root' | 'memory'>) => (): void => {
    stores.transcripts.closeAll()
    stores.registry.close()
    stores.ledger.close()
    stores.leases.close()
    stores.recovery.close()
  }
  if (options.store === 'memory') {
    const stores = {
      transcripts: createMemoryTranscriptStore(),
      checkpoints: createMemoryCheckpointStore(),
      registry: openSqliteRegistry({ path: ':memory:', durability }),
      ledger: openSqliteLedger({ path: ':memory:', durability }),
      leases: openSqliteLeases({ path: ':memory:', durability }),
      recovery: openSqliteRecovery({ path: ':memory:', durability }),
    }
    return { root: paths.root, memory: true, ...stores, close: close(stores) }
  }
  assertDirectories(paths)
  assertRegistryKept(paths)
  fs.mkdirSync(paths.threads, { recursive: true })
  const stores = {
    transcripts: createJsonlTranscriptStore({
      paths,
      durability,
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
  return { root: paths.root, memory: false, ...stores, close: close(stores) }
}
