/**
 * The two ends of `spindle migrate`: a data directory or a PostgreSQL database (and schema), each
 * opened as the store bundle a runtime would open on it. The source is opened for reading: nothing
 * is created in it (a database file or a schema it lacks is read as empty), and leftovers of dead
 * processes are left for its own runtimes to clear.
 */
import fs from 'node:fs'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createFileRequestInbox } from '../../persistence/fileRequestInbox.js'
import { createFileThreadFolders } from '../../persistence/fileThreadFolders.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { createMemoryLeases } from '../../persistence/memoryLeases.js'
import { createMemoryLedger } from '../../persistence/memoryLedger.js'
import { createMemoryRecovery } from '../../persistence/memoryRecovery.js'
import { assertDirectories, assertRegistryKept, dataPaths } from '../../persistence/paths.js'
import type { DataPaths } from '../../persistence/paths.js'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { openSqliteRecovery } from '../../persistence/sqliteRecovery.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { SpindleError } from '../base/errors.js'
import { databaseName, databaseOptions, openPostgresStores, type DatabaseOptions } from '../runtime/openPostgresStores.js'
import { openStores, type Stores, type StorePorts } from '../runtime/openStores.js'
import { schemaHoldsSpindle } from './databaseStores.js'

/** Where threads are: a data directory, or a database schema. */
export type MigrateEnd = { kind: 'dir'; dir: string; paths: DataPaths } | { kind: 'database'; database: DatabaseOptions }

/** How messages name an end: the directory, or the database URL without its password and the schema. */
export function endName(end: MigrateEnd): string {
  return end.kind === 'dir' ? end.paths.root : databaseName(end.database)
}

/**
 * `--from` / `--to` as given: a `postgres://` URL is a database (in `schema`, default public),
 * anything else a directory. One end must be each.
 */
export function migrateEnds(from: string, to: string, schema: string | undefined): { source: MigrateEnd; target: MigrateEnd } {
  const end = (given: string, field: string): MigrateEnd => {
    if (/^postgres(ql)?:\/\//.test(given)) return { kind: 'database', database: databaseOptions(schema === undefined ? given : { url: given, schema }, `--${field}`) }
    if (given.trim() === '') throw new SpindleError('INVALID_OPTIONS', `--${field} must name a data directory or a postgres:// URL (got an empty string).`, { details: { field } })
    return { kind: 'dir', dir: given, paths: dataPaths(given) }
  }
  const source = end(from, 'from')
  const target = end(to, 'to')
  if (source.kind === target.kind) {
    throw new SpindleError(
      'INVALID_OPTIONS',
      `spindle migrate moves threads between a data directory and a database: --from and --to are both ${source.kind === 'dir' ? 'directories' : 'databases'}. ` +
        'Give one of each (a postgres:// URL for the database, with --schema for a schema other than public).',
      { details: { field: 'to' } },
    )
  }
  return { source, target }
}

/**
 * The source's stores, opened to be read. A directory must be a data directory, a schema must
 * hold spindle's tables (DATA_DIR_NOT_FOUND otherwise, and the schema is not created). A
 * directory's SQLite files are opened only when they exist (a directory whose runtimes never kept
 * a ledger has none: read as empty).
 */
export function openSource(end: MigrateEnd, ports: StorePorts): Stores {
  if (end.kind === 'database') {
    if (!schemaHoldsSpindle(end.database)) {
      throw new SpindleError(
        'DATA_DIR_NOT_FOUND',
        `${endName(end)} holds no spindle data (no spindle tables in schema ${end.database.schema ?? 'public'}): pass the URL and --schema your runtimes use. Nothing was created or written.`,
        { details: { database: endName(end) } },
      )
    }
    return openPostgresStores(end.database, ports)
  }
  const { paths } = end
  if (!fs.existsSync(paths.registry) && !fs.existsSync(paths.threads)) {
    throw new SpindleError(
      'DATA_DIR_NOT_FOUND',
      `${paths.root} ${fs.existsSync(paths.root) ? 'holds no spindle data (no registry.db)' : 'does not exist'}: pass --from the data directory your runtimes use (the \`dir\` of createRuntime). Nothing was written.`,
      { details: { dir: paths.root } },
    )
  }
  assertDirectories(paths)
  assertRegistryKept(paths)
  const ifExists = <T>(file: string, open: () => T, empty: () => T): T => (fs.existsSync(file) ? open() : empty())
  const transcripts = createJsonlTranscriptStore({ paths, durability: 'process' })
  const stores = {
    transcripts,
    checkpoints: createFileCheckpointStore({ paths, durability: 'process', onFolderInvalid: (threadId, error) => ports.folderInvalid(threadId, error) }),
    registry: openSqliteRegistry({ path: paths.registry, durability: 'process' }),
    ledger: ifExists(paths.ledger, () => openSqliteLedger({ path: paths.ledger, durability: 'process' }), createMemoryLedger),
    leases: ifExists(paths.leases, () => openSqliteLeases({ path: paths.leases, durability: 'process' }), createMemoryLeases),
    recovery: ifExists(paths.recovery, () => openSqliteRecovery({ path: paths.recovery, durability: 'process' }), createMemoryRecovery),
  }
  return {
    root: paths.root,
    shared: true,
    ...stores,
    folders: createFileThreadFolders(paths),
    inbox: createFileRequestInbox({ paths, durability: 'process', onProblem: (error, threadId) => ports.problem(error, threadId) }),
    close: () => {
      stores.transcripts.closeAll()
      stores.registry.close()
      stores.ledger.close()
      stores.leases.close()
      stores.recovery.close()
    },
  }
}

/**
 * Whether the target holds anything at all, without creating it: a directory that does not exist
 * or is empty, a schema without spindle's tables, is empty. A directory that holds files but no
 * spindle data is refused: the copy would land among someone else's files.
 */
export function targetExists(end: MigrateEnd): boolean {
  if (end.kind === 'database') return schemaHoldsSpindle(end.database)
  const { paths } = end
  if (!fs.existsSync(paths.root)) return false
  const names = fs.readdirSync(paths.root)
  if (names.length === 0) return false
  if (!fs.existsSync(paths.registry) && !fs.existsSync(paths.threads)) {
    throw new SpindleError(
      'MIGRATION_TARGET_NOT_EMPTY',
      `${paths.root} holds files but no spindle data (${names.slice(0, 3).join(', ')}${names.length > 3 ? ', …' : ''}): spindle migrate copies into a new or empty directory, or a data directory without threads. ` +
        'Pass --to a directory of its own; nothing was written.',
      { details: { target: paths.root } },
    )
  }
  return true
}

/** The target's stores, created as a runtime creates them (a new directory, a migrated schema). */
export function openTarget(end: MigrateEnd, ports: StorePorts): Stores {
  if (end.kind === 'database') return openPostgresStores(end.database, ports)
  return openStores({ dir: end.dir, durability: 'fsync' }, ports)
}
