/**
 * Where an operator command finds the threads: a data directory (`--dir`), or a PostgreSQL database
 * (`--db`, `--schema`, or SPINDLE_DATABASE_URL), whose stores a command opens for itself through
 * `openPostgresStores`, as any runtime process on the database does, and closes when it is done.
 *
 * Precedence: `--db`; else `--dir` given on the command line; else SPINDLE_DATABASE_URL when set;
 * else the directory `.spindle`. An explicit `--dir` wins over the variable, so that a shell that
 * exports it can still look at a directory; `--dir` and `--db` together are refused, except for
 * `run` and `demo`, where `--dir` is where config.yaml and directives are read from beside the
 * database (and the demo's tools write their files).
 */
import type { Command } from 'commander'
import { Option } from 'commander'
import { PgBridge, redact } from '../../persistence/postgres/bridge.js'
import { SpindleError, isSpindleError } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'
import type { ThreadRecord } from '../../persistence/types.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import { databaseName, databaseOptions, openPostgresStores } from '../runtime/openPostgresStores.js'
import type { Stores, StorePorts } from '../runtime/stores.js'
import { dirArgument } from './terminalText.js'

/** Where a command's threads are. */
export interface Place {
  /** The data directory; beside a database, where config.yaml and directives are read from. */
  dir: string
  /** The database the threads are in, when they are in one. */
  database?: DatabaseOptions
  /** How a command printed for a person says where: ` --dir <dir>`, ` --db <url>`, '' for the default. */
  argument: string
}

/** A place whose threads are in a database. */
export type DatabasePlace = Place & { database: DatabaseOptions }

export const ENV_URL = 'SPINDLE_DATABASE_URL'

export const dbOption = (): Option =>
  new Option('--db <url>', `a PostgreSQL database (postgres://user:password@host:5432/db) holding the threads instead of a data directory; default: ${ENV_URL}, unless --dir is given`)

export const schemaOption = (): Option => new Option('--schema <name>', "with --db (or SPINDLE_DATABASE_URL): the schema spindle's tables are in (default public)")

/**
 * Where the command run as `command` with options `o` looks. `dirBeside`: `--dir` may come with a
 * database (run, demo). Refuses a URL that is none, and a schema without a database, naming the flag.
 */
export function placeOf(o: { dir: string; db?: string; schema?: string }, command: Command, options: { dirBeside?: boolean } = {}): Place {
  const dirGiven = command.getOptionValueSource('dir') === 'cli'
  if (o.db !== undefined) {
    if (dirGiven && !options.dirBeside) {
      throw new SpindleError('INVALID_OPTIONS', '--dir and --db name two places: give one (--dir for a data directory, --db for a database).', { details: { field: 'db' } })
    }
    return databasePlace(resolve(o.db, '--db', o.schema), o.dir)
  }
  const fromEnv = process.env[ENV_URL]
  if (!dirGiven && fromEnv) {
    const database = resolve(fromEnv, ENV_URL, o.schema)
    // The variable names the database: a command copied from the output finds it the same way.
    return { dir: o.dir, database, argument: database.schema ? ` --schema ${database.schema}` : '' }
  }
  if (o.schema !== undefined) {
    throw new SpindleError('INVALID_OPTIONS', `--schema names a schema of a database: give the database with --db (or ${ENV_URL})${dirGiven ? ', not --dir' : ''}.`, { details: { field: 'schema' } })
  }
  return { dir: o.dir, argument: dirArgument(o.dir) }
}

/** The place of a database given with `--db` (`dir`: where config.yaml and directives are read from beside it). */
export function databasePlace(database: DatabaseOptions, dir = '.spindle'): DatabasePlace {
  return { dir, database, argument: ` --db ${shellWord(redact(database.url))}${database.schema ? ` --schema ${database.schema}` : ''}` }
}

function resolve(url: string, field: string, schema: string | undefined): DatabaseOptions {
  const database = databaseOptions(url, field)
  if (schema === undefined) return database
  try {
    return databaseOptions({ url, schema }, field)
  } catch (error) {
    if (!isSpindleError(error) || error.code !== 'INVALID_OPTIONS') throw error
    throw new SpindleError('INVALID_OPTIONS', `--schema must be a lower-case PostgreSQL identifier such as "spindle" (got ${JSON.stringify(schema)}).`, { details: { field: 'schema' } })
  }
}

/** A word for a POSIX shell: single-quoted unless it needs no quoting. */
function shellWord(text: string): string {
  return /^[\w./@:+%=-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`
}

/**
 * What `createRuntime` is given for `place`. A directory given with `--dir` must not be swapped for
 * the database SPINDLE_DATABASE_URL names, which createRuntime would take: the variable is cleared
 * for this process (a CLI process runs one command).
 */
export function runtimePlace(place: Place): { dir: string; database?: DatabaseOptions } {
  if (place.database) return { dir: place.dir, database: place.database }
  delete process.env[ENV_URL]
  return { dir: place.dir }
}

/**
 * Opens the database's stores (migrating its schema, as every process that opens it does), runs
 * `fn`, and closes them. Nothing this process holds is left behind: the CLI takes no lease and
 * claims no request.
 */
export function withDatabase<T>(database: DatabaseOptions, fn: (stores: Stores) => T): T {
  const stores = openDatabase(database)
  try {
    return fn(stores)
  } finally {
    stores.close()
  }
}

/** `withDatabase` for a command that waits (`logs --follow`). */
export async function withDatabaseAsync<T>(database: DatabaseOptions, fn: (stores: Stores) => Promise<T>): Promise<T> {
  const stores = openDatabase(database)
  try {
    return await fn(stores)
  } finally {
    stores.close()
  }
}

/** The schemas of the database that hold spindle's tables (schemas a runtime migrated), without creating any. */
export function spindleSchemas(database: DatabaseOptions): string[] {
  const db = new PgBridge({ url: database.url })
  try {
    return db.querySync(`SELECT table_schema AS name FROM information_schema.tables WHERE table_name = 'spindle_schema' ORDER BY 1`).map((row) => row.name as string)
  } finally {
    db.close()
  }
}

/** Whether the database's schema holds spindle's tables (a schema a runtime migrated), without creating it. */
export function schemaHoldsSpindle(database: DatabaseOptions): boolean {
  return spindleSchemas(database).includes(database.schema ?? 'public')
}

/**
 * The database's stores, for a command that keeps them open (the inspector, for as long as it
 * serves): refused as `withDatabase` refuses a schema without spindle data or a database that does
 * not answer. `notified`: what other processes announce (see `StorePorts.notified`).
 */
export function openDatabase(database: DatabaseOptions, notified?: StorePorts['notified']): Stores {
  try {
    // Opening stores creates the schema: a mistyped --schema would find an empty one, and leave it.
    const schemas = spindleSchemas(database)
    if (!schemas.includes(database.schema ?? 'public')) {
      const named = schemas.length > 8 ? `${schemas.slice(0, 8).join(', ')} and ${schemas.length - 8} more` : schemas.join(', ')
      const others = schemas.length === 0 ? 'No schema of that database holds spindle tables' : `Schemas with spindle tables there: ${named}`
      throw new SpindleError(
        'DATA_DIR_NOT_FOUND',
        `${databaseName(database)} holds no spindle data (no spindle tables in schema ${database.schema ?? 'public'}). ${others}. ` +
          'Pass the --db and --schema your runtimes use. Nothing was read, written or created.',
        { details: { database: databaseName(database), schemas } },
      )
    }
    // A command reports what it finds itself; the stores' own problems (a heartbeat not written)
    // concern processes that hold claims, which a command never does.
    return openPostgresStores(database, { problem: () => {}, folderInvalid: () => {}, ...(notified ? { notified } : {}) })
  } catch (error) {
    if (!isSpindleError(error) || error.code !== 'DATABASE_UNAVAILABLE') throw error
    // A runtime tries again by itself, as the bridge's message says; a command does not.
    const message = error.message.replace(/;? spindle tries again\.$/, '')
    throw new SpindleError('DATABASE_UNAVAILABLE', `${message}, and that --db (or ${ENV_URL}) names it. Nothing was read or written.`, { cause: error, details: error.details })
  }
}

/** A thread's registry row in the database; INVALID_THREAD_ID or THREAD_NOT_FOUND otherwise. */
export function recordIn(stores: Stores, id: string): ThreadRecord {
  assertThreadId(id)
  const record = stores.registry.get(id)
  if (!record) {
    throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${stores.root}. \`spindle ls\` lists the threads there.`, { details: { threadId: id } })
  }
  return record
}
