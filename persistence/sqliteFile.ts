/**
 * Opening one of spindle's SQLite files (registry, ledger, leases, recovery) the same way: WAL,
 * a busy timeout so other processes wait instead of failing, the synchronous level the store
 * needs, numbered migrations — and SQLite failures turned into errors that name the file and say
 * what to do. Side effects.
 */
import fs from 'node:fs'
import Database from 'better-sqlite3'
import { SpindleError } from '../src/base/errors.js'
import type { SpindleErrorCode } from '../src/base/errors.js'
import { linkTarget } from './fdio.js'

/** How long a statement waits for another connection's lock before failing with SQLITE_BUSY. */
export const BUSY_TIMEOUT_MS = 5000

export interface SqliteStore {
  /** The error code of this store's failures (REGISTRY_FAILED, LEDGER_FAILED …). */
  code: SpindleErrorCode
  /** What the file is, for messages: "the registry", "the budget ledger" … */
  what: string
  file: string
}

/** What the user can do about a SQLite failure, by its result code. */
export function sqliteHint(what: string, code: string): string {
  if (code.startsWith('SQLITE_BUSY')) {
    return `Another connection held the lock of ${what} for more than ${BUSY_TIMEOUT_MS} ms; check for a stuck spindle process on this data directory.`
  }
  if (code === 'SQLITE_FULL') return 'The disk is full; free some space and retry.'
  if (code.startsWith('SQLITE_READONLY') || code.startsWith('SQLITE_CANTOPEN') || code === 'SQLITE_PERM') {
    return 'Check that the file and its directory exist and are writable by this user.'
  }
  if (code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB') {
    if (what === 'the registry') {
      return "The file is damaged: restore it from a backup. The threads' own files are not affected, but without their registry rows no runtime carries them on (one refuses to open the directory rather than abandon them)."
    }
    return "The file is damaged: move it aside and start again; the threads' own files are not affected."
  }
  return 'Check the file and the disk it is on.'
}

/** A SQLite failure of `action` as the store's error naming the file; anything else unchanged. */
export function sqliteFailure(store: SqliteStore, action: string, error: unknown): unknown {
  if (!(error instanceof Database.SqliteError)) return error
  return new SpindleError(store.code, `Could not ${action} in ${store.what} ${store.file}: ${error.message}. ${sqliteHint(store.what, error.code)}`, {
    cause: error,
    details: { path: store.file, sqliteCode: error.code },
  })
}

/** Runs `fn`, turning a SQLite failure into the store's error. */
export function sqliteGuard(store: SqliteStore): <T>(action: string, fn: () => T) => T {
  return (action, fn) => {
    try {
      return fn()
    } catch (error) {
      throw sqliteFailure(store, action, error)
    }
  }
}

/**
 * Switches the file to WAL. SQLite answers SQLITE_BUSY at once, without its busy handler, when
 * another connection is switching the same new file at that moment (processes opening a fresh
 * data directory together): retried, briefly, for up to the busy timeout.
 */
function enterWal(db: Database.Database): void {
  const pause = new Int32Array(new SharedArrayBuffer(4))
  for (let waited = 0; ; waited += 5) {
    try {
      db.pragma('journal_mode = WAL')
      return
    } catch (error) {
      if (!(error instanceof Database.SqliteError) || !error.code.startsWith('SQLITE_BUSY') || waited >= BUSY_TIMEOUT_MS) throw error
      Atomics.wait(pause, 0, 0, 5)
    }
  }
}

/** The files SQLite opens for a database in WAL mode (and the rollback journal of an older one). */
const COMPANIONS = ['', '-wal', '-shm', '-journal']

/**
 * Refuses a database, or one of its companion files, that is a link or anything but a regular
 * file. SQLite opens them read-write and follows links: a link planted at `registry.db-wal` would
 * have log frames written into whatever file it points to, outside the data directory. (As with
 * thread folders, one planted between this check and the open is not seen.)
 */
function refuseNonFiles(store: SqliteStore): void {
  for (const suffix of COMPANIONS) {
    const entry = store.file + suffix
    const stat = fs.lstatSync(entry, { throwIfNoEntry: false })
    if (!stat || stat.isFile()) continue
    const kind = stat.isSymbolicLink()
      ? `a symbolic link (to ${linkTarget(entry)})`
      : stat.isDirectory()
        ? 'a directory'
        : 'a FIFO, socket or device'
    throw new SpindleError(
      'DATA_DIR_INVALID',
      `${entry} is ${kind}, not a file: SQLite would write ${store.what} through it, so spindle does not open ${store.file}. ` +
        'Nothing was changed. Move it aside (find out who made it), then open the data directory again.',
      { details: { path: entry, kind } },
    )
  }
}

/**
 * Opens `store.file` (or ':memory:'), then runs the migrations it has not run yet in one
 * transaction (`PRAGMA user_version` counts them). Refuses a file migrated by a newer spindle.
 */
export function openSqliteFile(store: SqliteStore, options: { synchronous: 'FULL' | 'NORMAL'; migrations: readonly string[] }): Database.Database {
  const { file } = store
  if (file !== ':memory:') refuseNonFiles(store)
  let db: Database.Database | undefined
  try {
    db = new Database(file)
    // First: switching to WAL takes a lock another process opening the file may hold a moment.
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`)
    // An in-memory database cannot use WAL (it has no file to keep a log beside).
    if (file !== ':memory:') enterWal(db)
    db.pragma(`synchronous = ${options.synchronous}`)
    const version = db.pragma('user_version', { simple: true }) as number
    const known = options.migrations.length
    if (version > known) {
      throw new SpindleError(store.code, `${store.what} ${file} has schema version ${version}, newer than this spindle knows (${known}); upgrade spindle to open it.`, {
        details: { path: file, version, known },
      })
    }
    if (version < known) {
      const target = db
      target.transaction(() => {
        // Read again under the write lock: another process opening the same file at the same
        // moment may have run these migrations since the read above.
        const current = target.pragma('user_version', { simple: true }) as number
        for (let i = current; i < known; i++) target.exec(options.migrations[i]!)
        if (current < known) target.pragma(`user_version = ${known}`)
      }).immediate()
    }
    return db
  } catch (error) {
    db?.close()
    if (error instanceof SpindleError) throw error
    const hint = error instanceof Database.SqliteError ? sqliteHint(store.what, error.code) : 'Check the path and its permissions.'
    throw new SpindleError(store.code, `Could not open ${store.what} ${file}: ${(error as Error).message}. ${hint}`, { cause: error, details: { path: file } })
  }
}
