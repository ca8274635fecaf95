import fs from 'node:fs'
import path from 'node:path'
import { assertThreadId } from '../src/base/ids.js'
import { SpindleError } from '../src/base/errors.js'
import { linkTarget } from './fdio.js'

/** Where a data directory keeps its files. Every thread path goes through `threadDir`. */
export interface DataPaths {
  root: string
  threads: string
  registry: string
  /** Hierarchical budgets (persistence/sqliteLedger.ts). */
  ledger: string
  /** Which runtime process runs which thread (persistence/sqliteLeases.ts). */
  leases: string
  /** Recovery escalation and governance state (persistence/sqliteRecovery.ts). */
  recovery: string
  /** Transcript journals: the newest lines of every thread, durable in one file (persistence/transcriptJournal.ts). */
  journal: string
  /**
   * Files on their way, each named for the process that made it (persistence/leftovers.ts): temp
   * files of atomic writes before their rename, requests a runtime claimed and is acting on.
   */
  tmp: string
}

/** The data directory's folder of files on their way (`DataPaths.tmp`). */
export const TMP_DIR = 'tmp'

export function dataPaths(root: string): DataPaths {
  const abs = path.resolve(root)
  return {
    root: abs,
    threads: path.join(abs, 'threads'),
    registry: path.join(abs, 'registry.db'),
    ledger: path.join(abs, 'ledger.db'),
    leases: path.join(abs, 'leases.db'),
    recovery: path.join(abs, 'recovery.db'),
    journal: path.join(abs, 'journal'),
    tmp: path.join(abs, TMP_DIR),
  }
}

/**
 * DATA_DIR_NOT_FOUND for a directory that holds no spindle data: it does not exist, or has neither
 * a registry nor a threads directory. What a command run with the wrong `--dir` meets; every
 * thread it names would otherwise be reported missing, one by one.
 */
export function dataDirNotFound(paths: DataPaths): SpindleError {
  const where = fs.existsSync(paths.root) ? `${paths.root} holds no spindle data (no registry.db)` : `${paths.root} does not exist`
  return new SpindleError(
    'DATA_DIR_NOT_FOUND',
    `${where}: pass --dir with the data directory your runtime uses (the \`dir\` of createRuntime; the CLI's default is .spindle).`,
    { details: { dir: paths.root } },
  )
}

/** Throws {@link dataDirNotFound} unless the directory holds a registry or threads. Reads only. */
export function assertDataDir(paths: DataPaths): void {
  if (!fs.existsSync(paths.registry) && !fs.existsSync(paths.threads)) throw dataDirNotFound(paths)
}

/**
 * Refuses a data directory whose own directories (`threads/`, `journal/`, `tmp/`) exist as something other
 * than directories, a symlink included: every thread would fail on them one by one, and through a
 * link spindle would read and write its threads wherever it points. So the whole directory is
 * refused up front, naming the entry (and the link's target). Nothing is changed.
 */
export function assertDirectories(paths: DataPaths): void {
  for (const [dir, what] of [
    [paths.threads, 'its threads'],
    [paths.journal, 'its transcript journal'],
    [paths.tmp, 'the temp files of its writes'],
  ] as const) {
    // lstat: a link to a directory is seen as the link it is.
    const stat = fs.lstatSync(dir, { throwIfNoEntry: false })
    if (!stat || stat.isDirectory()) continue
    if (stat.isSymbolicLink()) {
      const target = linkTarget(dir)
      throw new SpindleError(
        'DATA_DIR_INVALID',
        `${dir} is a symbolic link (to ${target}), not a directory: spindle keeps ${what} there and follows no link inside its data directory, ` +
          'so it did not open the directory (nothing in it was changed, nothing was read or written at the target). ' +
          'Move the link aside (if the directory it points to is yours, move that directory in its place) and open the directory again.',
        { details: { path: dir, kind: 'symbolic link', target } },
      )
    }
    throw new SpindleError(
      'DATA_DIR_INVALID',
      `${dir} is not a directory: spindle keeps ${what} there. Move it aside (nothing in the data directory was changed) and open the directory again.`,
      { details: { path: dir } },
    )
  }
}

/**
 * Refuses to write into `dir` when it, or any directory between the data directory `root` and it
 * (`threads`, `threads/<id>`, `threads/<id>/approvals`), is a symlink or no directory at all: a
 * file written through a link planted there would land wherever the link points, outside the data
 * directory. Each entry is looked at with lstat, so a link is seen as a link. A missing entry ends
 * the check (the write then fails on its own) or, with `create`, is made: mkdir never follows a
 * link. `root` itself may be a link: where the data directory lives is its owner's choice.
 */
export function assertRealDirectories(root: string, dir: string, options: { create?: boolean } = {}): void {
  const below = path.relative(root, dir)
  if (below.startsWith('..') || path.isAbsolute(below)) throw new Error(`${dir} is not inside ${root}`)
  let current = root
  for (const name of below.split(path.sep)) {
    if (name === '') continue
    current = path.join(current, name)
    let stat = fs.lstatSync(current, { throwIfNoEntry: false })
    if (!stat && options.create) stat = makeDirectory(current)
    if (!stat) return
    if (!stat.isDirectory()) throw notARealDirectory(root, current, stat)
  }
}

/** mkdir one level; when someone made the entry meanwhile, what is there now decides. */
function makeDirectory(dir: string): fs.Stats | undefined {
  try {
    fs.mkdirSync(dir)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
  }
  return fs.lstatSync(dir, { throwIfNoEntry: false })
}

function notARealDirectory(root: string, entry: string, stat: fs.Stats, threadId?: string): SpindleError {
  const thread = threadId === undefined ? {} : { threadId }
  if (stat.isSymbolicLink()) {
    const target = linkTarget(entry)
    return new SpindleError(
      'DATA_DIR_INVALID',
      `${entry} is a symbolic link (to ${target}), not a directory: spindle reads and writes only real directories inside its data directory ${root}, ` +
        'so nothing was read or written through it. Replace the link with the directory it stands for (or move it aside), find out who made it, and try again.',
      { details: { path: entry, kind: 'symbolic link', target, ...thread } },
    )
  }
  return new SpindleError(
    'DATA_DIR_INVALID',
    `${entry} is ${stat.isFile() ? 'a file' : 'a FIFO, socket or device'}, not a directory: spindle keeps a directory there, so nothing was read or written. ` +
      'Move it aside and try again.',
    { details: { path: entry, kind: stat.isFile() ? 'file' : 'special', ...thread } },
  )
}

/**
 * Thread folders found to be real directories, per DataPaths (so per runtime): the checkpoint
 * writer looks here instead of at the folder, since a checkpoint is written thousands of times a
 * second and a folder is checked once, when its thread's files are opened or created. A thread
 * that stopped is forgotten once its last checkpoint is written or its transcript closed
 * (`forgetThreadDir`); the whole set is cleared past a bound as well, so a host that runs for months
 * holds at most that many ids. A folder forgotten is checked again (one lstat) at its next write.
 */
const realThreadDirs = new WeakMap<DataPaths, Set<string>>()
const REAL_THREAD_DIRS_KEPT = 1 << 16
/** DataPaths whose `threads/` was found to be a real directory (or made as one). */
const realThreadsDirs = new WeakSet<DataPaths>()

function remember(paths: DataPaths, threadId: string): void {
  let known = realThreadDirs.get(paths)
  if (!known) realThreadDirs.set(paths, (known = new Set()))
  else if (known.size >= REAL_THREAD_DIRS_KEPT) known.clear()
  known.add(threadId)
}

/**
 * The thread's files were closed (it ended, or left this runtime): its folder need not be
 * remembered. Without this a long-running host held the id of every thread it ever ran, up to the
 * bound. Should the thread write again, its folder is checked again (one lstat).
 */
export function forgetThreadDir(paths: DataPaths, threadId: string): void {
  realThreadDirs.get(paths)?.delete(threadId)
}

/** What `assertThreadDir` found: no folder, or a real one, and the directories it made, outermost first. */
export interface ThreadDirCheck {
  missing: boolean
  made: readonly string[]
}

const FOUND: ThreadDirCheck = Object.freeze({ missing: false, made: Object.freeze([]) })
const MISSING: ThreadDirCheck = Object.freeze({ missing: true, made: Object.freeze([]) })

/**
 * Checks, with lstat (a link is seen as a link), that the folder of `threadId` is a real directory,
 * and `threads/` above it the first time for these paths: whatever is read or written by path in
 * that folder afterwards stays inside the data directory (until someone swaps the folder: see the
 * docs/durability.md on symlinks). Throws DATA_DIR_INVALID naming the entry (and a link's target) otherwise.
 * With `create` a missing folder is made, and `threads/` (and the root) when missing: mkdir never
 * follows a link; `made` lists what was made, whose parents need an fsync to be durable. `known`:
 * trust an earlier check of this folder (see realThreadDirs) and make no system call. `writes` (or
 * `create`): the caller writes through the folder next, so the check is kept for `known`.
 */
export function assertThreadDir(paths: DataPaths, threadId: string, options: { create?: boolean; known?: boolean; writes?: boolean } = {}): ThreadDirCheck {
  if (options.known && realThreadDirs.get(paths)?.has(threadId)) return FOUND
  const dir = threadDir(paths, threadId)
  const made: string[] = []
  if (!realThreadsDirs.has(paths)) {
    if (!checkDirectory(paths.root, paths.threads, options.create ? made : null)) return MISSING
    realThreadsDirs.add(paths)
  }
  if (!checkDirectory(paths.root, dir, options.create ? made : null, threadId)) return MISSING
  // Only a folder about to be written through is kept: a read (a parent looking at its ended child,
  // an operator command) would otherwise hold the id of a thread that writes nothing more.
  if (options.create || options.writes) remember(paths, threadId)
  return made.length === 0 ? FOUND : { missing: false, made }
}

/**
 * Why the folder of `threadId` (or `threads/` above it) could not be opened without following a
 * link (`cause`: ELOOP, ENOTDIR): the DATA_DIR_INVALID naming the entry that is no real directory
 * now, found with lstat. The earlier check of the folder is forgotten.
 */
export function threadFolderProblem(paths: DataPaths, threadId: string, cause: unknown): SpindleError {
  forgetThreadDir(paths, threadId)
  realThreadsDirs.delete(paths)
  const dir = threadDir(paths, threadId)
  for (const entry of [paths.threads, dir]) {
    const stat = fs.lstatSync(entry, { throwIfNoEntry: false })
    if (stat && !stat.isDirectory()) return notARealDirectory(paths.root, entry, stat, threadId)
  }
  return new SpindleError(
    'DATA_DIR_INVALID',
    `${dir} could not be opened as a directory without following a link (${(cause as Error)?.message ?? String(cause)}), so nothing was written in it. Check what is at that path and who changed it.`,
    { cause, details: { path: dir, threadId } },
  )
}

/**
 * Whether `dir` is a real directory (false: missing); throws DATA_DIR_INVALID when it is anything
 * else. With `made`, a missing one is made (and its missing parents up to a directory that exists)
 * and listed there.
 */
function checkDirectory(root: string, dir: string, made: string[] | null, threadId?: string): boolean {
  let stat = fs.lstatSync(dir, { throwIfNoEntry: false })
  if (!stat && made) {
    try {
      try {
        fs.mkdirSync(dir)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
        // Only a data directory that does not exist yet (a store used on its own): made as its
        // owner named it, then this level.
        const first = fs.mkdirSync(path.dirname(dir), { recursive: true })
        const parents: string[] = []
        for (let d = path.dirname(dir); first !== undefined; d = path.dirname(d)) {
          parents.unshift(d)
          if (d === first) break
        }
        made.push(...parents)
        fs.mkdirSync(dir)
      }
      made.push(dir)
      return true
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
    }
    // Someone made the entry meanwhile: what is there now decides.
    stat = fs.lstatSync(dir, { throwIfNoEntry: false })
  }
  if (!stat) return false
  if (!stat.isDirectory()) throw notARealDirectory(root, dir, stat, threadId)
  return true
}

/** Whether a file exists with something in it. */
function holdsBytes(file: string): boolean {
  try {
    return fs.statSync(file).size > 0
  } catch {
    return false
  }
}

/**
 * Refuses a data directory that lost its registry: `registry.db` missing or empty (with no WAL)
 * while `threads/` holds checkpointed threads. Opening it would create an empty registry and
 * abandon them all without a word. A registry is created at a runtime's first open, before any
 * thread, so a crash during the first spawn never looks like this.
 */
export function assertRegistryKept(paths: DataPaths): void {
  if (holdsBytes(paths.registry) || holdsBytes(`${paths.registry}-wal`)) return
  let names: string[]
  try {
    names = fs.readdirSync(paths.threads)
  } catch {
    return
  }
  const checkpointed = names.filter((name) => fs.existsSync(path.join(paths.threads, name, 'state.json')))
  if (checkpointed.length === 0) return
  throw new SpindleError(
    'REGISTRY_FAILED',
    `${paths.registry} is ${fs.existsSync(paths.registry) ? 'empty' : 'missing'}, but ${paths.threads} holds ${checkpointed.length} checkpointed ${checkpointed.length === 1 ? 'thread' : 'threads'} ` +
      `(${checkpointed.slice(0, 3).join(', ')}${checkpointed.length > 3 ? ', …' : ''}): the registry was lost or replaced. Restore registry.db from a backup. ` +
      'Opening the directory now would leave those threads without registry rows, and no runtime would carry them on; nothing was changed.',
    { details: { path: paths.registry, threads: checkpointed.length } },
  )
}

/**
 * The directory of one thread. Refuses ids that are not spindle ids and, as a second fence, any
 * path that would resolve outside `<root>/threads`.
 */
export function threadDir(paths: DataPaths, threadId: string): string {
  assertThreadId(threadId)
  // An id is [a-z0-9_-] only (no separator, no dot), so under a normalised absolute directory
  // joining is resolving, and the result is a child of it: no path.resolve per call (one per
  // transition and per file written).
  if (isNormalised(paths)) return paths.threads + path.sep + threadId
  const dir = path.resolve(paths.threads, threadId)
  if (path.dirname(dir) !== paths.threads) {
    throw new SpindleError('INVALID_THREAD_ID', `Thread id "${threadId}" would leave the data directory ${paths.threads}.`, {
      details: { id: threadId },
    })
  }
  return dir
}

/** A thread's checkpoint (its fast path to resume) and its transcript (its source of truth). */
export const STATE_FILE = 'state.json'
export const TRANSCRIPT_FILE = 'transcript.jsonl'

/** The file `name` in a thread's directory; threadDir's result is normalised, so joining is concatenating. */
export function threadFile(paths: DataPaths, threadId: string, name: string): string {
  return threadDir(paths, threadId) + path.sep + name
}

const normalised = new WeakMap<DataPaths, boolean>()

function isNormalised(paths: DataPaths): boolean {
  let known = normalised.get(paths)
  if (known === undefined) {
    const threads = paths.threads
    known = path.isAbsolute(threads) && path.resolve(threads) === threads && !threads.endsWith(path.sep)
    normalised.set(paths, known)
  }
  return known
}
