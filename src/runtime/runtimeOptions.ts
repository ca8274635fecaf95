/**
 * createRuntime's options checked before anything is opened, and the database they name.
 */
import { SpindleError } from '../base/errors.js'
import type { Durability } from '../../persistence/types.js'
import type { RuntimeOptions } from './api.js'
import { modelsByName } from './models.js'
import { databaseOptions, type DatabaseOptions } from './openPostgresStores.js'
import { validShutdownSignals } from './shutdownSignals.js'

/** The database the runtime's stores are on: `database`, else SPINDLE_DATABASE_URL (not with `store: 'memory'`), else none (files). */
export function databaseOf(options: RuntimeOptions): DatabaseOptions | undefined {
  if (options.database !== undefined) return databaseOptions(options.database, 'database')
  const fromEnv = process.env.SPINDLE_DATABASE_URL
  if (fromEnv && options.store !== 'memory') return databaseOptions(fromEnv, 'SPINDLE_DATABASE_URL')
  return undefined
}

export function validateOptions(options: RuntimeOptions): Durability {
  if (!options || ((typeof options.dir !== 'string' || options.dir === '') && options.database === undefined && !process.env.SPINDLE_DATABASE_URL)) {
    throw new SpindleError('INVALID_OPTIONS', 'createRuntime needs `dir`, the data directory (e.g. ".spindle"), or `database`, a PostgreSQL URL.', {
      details: { field: 'dir' },
    })
  }
  if (options.dir !== undefined && (typeof options.dir !== 'string' || options.dir === '')) {
    throw new SpindleError('INVALID_OPTIONS', `dir must be a non-empty path (got ${JSON.stringify(options.dir)}).`, { details: { field: 'dir' } })
  }
  if (options.database !== undefined && options.store !== undefined) {
    throw new SpindleError('INVALID_OPTIONS', "Give `database` or `store`, not both: `database` keeps every thread in PostgreSQL, `store: 'memory'` keeps none anywhere.", {
      details: { field: 'store' },
    })
  }
  databaseOf(options)
  // Checked before anything is opened; built again (cheaply) where the parts are wired.
  modelsByName(options)
  validShutdownSignals(options.shutdownSignals)
  const durability: Durability = options.durability ?? 'fsync'
  if (durability !== 'fsync' && durability !== 'process') {
    throw new SpindleError('INVALID_OPTIONS', `durability must be 'fsync' or 'process' (got ${JSON.stringify(durability)}).`, {
      details: { field: 'durability' },
    })
  }
  const threads = options.maxThreads
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 0)) {
    throw new SpindleError('INVALID_OPTIONS', `maxThreads must be a whole number of at least 0 (got ${JSON.stringify(threads)}); 0 runs no thread here and leaves every spawn to a worker.`, {
      details: { field: 'maxThreads' },
    })
  }
  const max = options.maxOpenTranscripts
  if (max !== undefined && (!Number.isInteger(max) || max < 1)) {
    throw new SpindleError('INVALID_OPTIONS', `maxOpenTranscripts must be a whole number of at least 1 (got ${JSON.stringify(max)}).`, {
      details: { field: 'maxOpenTranscripts' },
    })
  }
  return durability
}
