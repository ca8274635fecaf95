/**
 * state.json per thread, written by group commit: every staged envelope of a batch is written to a
 * temp file, the temp files are fsynced in parallel, renamed into place, and the directories
 * fsynced in parallel — one round of fsync latency for the whole batch instead of one per thread.
 *
 * Caveats: one writer per data directory (the temp name `state.json.tmp` is fixed, so two
 * processes syncing the same thread would write into each other's temp file). A crash mid-batch
 * leaves, per thread, either the previous state.json or the new one, plus perhaps a stray
 * `state.json.tmp` that `load` ignores and the next sync removes and makes anew.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError, isSpindleError } from '../src/base/errors.js'
import { isThreadId } from '../src/base/ids.js'
import { fsyncDir } from './atomicFile.js'
import { linkTarget, NotRegularFile, notRegularReason, openRegular } from './fdio.js'
import { upgradeEnvelope } from './envelope.js'
import type { DataPaths } from './paths.js'
import { eachLimited, poolShare } from './poolShare.js'
import { PinnedFolders } from './pinnedFolders.js'
import { assertThreadDir, forgetThreadDir, STATE_FILE, threadDir, threadFile } from './paths.js'
import type { CheckpointStore, Durability, StagedEnvelope } from './types.js'
import { stagedEnvelope } from './types.js'

const TEMP = `${STATE_FILE}.tmp`
const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0
/**
 * The temp file is always made anew: O_EXCL (which never follows a link at the name) and
 * O_NOFOLLOW, so a symlink or FIFO planted at `state.json.tmp` is neither written through nor
 * waited on. Costs nothing over a plain open: the previous temp file was renamed away.
 */
const CREATE_TEMP = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | NOFOLLOW

/** A state.json's text; it must be a regular file, not a link to one (see openRegular). */
function readRegular(file: string): string {
  const { fd } = openRegular(file, fs.constants.O_RDONLY | NOFOLLOW)
  try {
    return fs.readFileSync(fd, 'utf8')
  } finally {
    fs.closeSync(fd)
  }
}

/** One thread of a batch that was not made durable, and the file or directory that failed. */
interface WriteFailure {
  threadId: string
  file: string
  error: unknown
}

/** A callback-style fs call as a promise: it runs on the libuv threadpool, so many run at once. */
function call<T = void>(fn: (cb: (error: NodeJS.ErrnoException | null, value?: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((error, value) => (error ? reject(error) : resolve(value as T))))
}

/**
 * Writes `data` to `<dir>/state.json.tmp`, making the thread's folder when it is missing.
 * `onMkdir` gets the directories whose entries changed because of a mkdir here: they need an
 * fsync before the new directory is durable. The folder is checked to be a real directory (not a
 * link out of the data directory) when it is first written or was opened by the transcript store
 * (see assertThreadDir), and written through its descriptor (`folders`), so a folder swapped for a
 * link since is refused, not written through.
 */
async function writeTemp(
  paths: DataPaths,
  folders: PinnedFolders,
  threadId: string,
  dir: string,
  data: string,
  fsync: boolean,
  onMkdir: (changedParents: string[]) => void,
): Promise<void> {
  const made = (fresh: boolean): void => {
    const check = assertThreadDir(paths, threadId, { create: true, known: !fresh })
    if (check.made.length > 0) onMkdir(check.made.map((d) => path.dirname(d)))
  }
  const write = async (base: string): Promise<void> => {
    const temp = base + path.sep + TEMP
    let fd: number
    try {
      fd = await call<number>((cb) => fs.open(temp, CREATE_TEMP, 0o666, cb))
    } catch (error) {
      // A temp file a crash left, or whatever was planted at its name: removed (unlink never
      // follows a link), never opened.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      await fs.promises.rm(temp, { force: true })
      fd = await call<number>((cb) => fs.open(temp, CREATE_TEMP, 0o666, cb))
    }
    try {
      await call((cb) => fs.writeFile(fd, data, cb))
      // fdatasync flushes the data and the size (what reading it back needs), not the timestamps.
      if (fsync) await call((cb) => fs.fdatasync(fd, cb))
    } finally {
      await call((cb) => fs.close(fd, cb))
    }
  }
  made(false)
  try {
    await folders.within(threadId, dir, write)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    // The folder went away since it was checked: made again, and checked again.
    made(true)
    await folders.within(threadId, dir, write)
  }
}

function describeFailures(failures: readonly WriteFailure[]): string {
  return failures.map((f) => `${f.threadId} (${f.file}: ${(f.error as Error)?.message ?? String(f.error)})`).join('; ')
}

/**
 * A CheckpointStore keeping `<root>/threads/<id>/state.json`, replaced atomically by `sync()`.
 * @param options.paths the data directory; every thread path goes through `threadDir`.
 * @param options.durability 'fsync': a resolved `sync()` survives power loss. 'process': a process crash only.
 * @example
 * const checkpoints = createFileCheckpointStore({ paths: dataPaths('.spindle'), durability: 'fsync' })
 * checkpoints.stage(id, envelope)
 * await checkpoints.sync()
 */
export function createFileCheckpointStore(options: {
  paths: DataPaths
  durability: Durability
  /**
   * A thread's folder was found to be no real directory when its checkpoint was written (a link
   * swapped in while it ran): nothing was written there, and the thread's checkpoints are dropped
   * instead of failing the sync (which would hold up every other thread's round until a person
   * repairs the folder). Without it, such a thread fails the sync and is retried at the next.
   */
  onFolderInvalid?: (threadId: string, error: SpindleError) => void
}): CheckpointStore {
  const { paths, durability } = options
  const fsync = durability === 'fsync'
  // File operations of one batch in flight at once: bounded so ten thousand threads never hold ten
  // thousand descriptors, and so a round leaves most of the threadpool to the transcript journal.
  const CONCURRENCY = poolShare()
  let staged = new Map<string, StagedEnvelope>()
  /** Threads this process lost (`discard`): a batch under way publishes nothing of theirs. */
  const dropped = new Set<string>()
  let chain: Promise<void> = Promise.resolve()
  /** Directories that gained an entry by a mkdir and are not fsynced yet, with the threads that need them. */
  const unsyncedParents = new Map<string, Set<string>>()

  /** Puts failed envelopes back for the next sync, unless a newer one of that thread was staged meanwhile. */
  function restage(batch: Map<string, StagedEnvelope>, threadIds: Iterable<string>): void {
    for (const id of threadIds) {
      const envelope = batch.get(id)
      if (envelope && !staged.has(id) && !dropped.has(id)) staged.set(id, envelope)
    }
  }

  async function writeBatch(batch: Map<string, StagedEnvelope>, publishAfter: Promise<unknown>): Promise<void> {
    const folders = new PinnedFolders(paths)
    try {
      await writeBatchIn(folders, batch, publishAfter)
    } finally {
      await folders.close()
    }
  }

  /**
   * A thread whose folder is no real directory now (swapped for a link while it ran): nothing of
   * it is written. With `onFolderInvalid` the thread is handed to it and dropped, and the rest of
   * the round goes on as if it had not been staged; without, it fails the sync and is retried.
   */
  function folderInvalid(threadId: string, error: unknown): boolean {
    if (!options.onFolderInvalid || !isSpindleError(error) || error.code !== 'DATA_DIR_INVALID') return false
    dropped.add(threadId)
    staged.delete(threadId)
    options.onFolderInvalid(threadId, error)
    return true
  }

  async function writeBatchIn(folders: PinnedFolders, batch: Map<string, StagedEnvelope>, publishAfter: Promise<unknown>): Promise<void> {
    const failures: WriteFailure[] = []
    const written: Array<{ id: string; dir: string; settled: boolean }> = []
    await eachLimited([...batch], CONCURRENCY, async ([id, envelope]) => {
      const dir = threadDir(paths, id)
      // Recorded at once, whatever happens next: a retry finds the directory and does not mkdir.
      const onMkdir = (changedParents: string[]) => {
        if (!fsync) return
        for (const parent of changedParents) unsyncedParents.set(parent, (unsyncedParents.get(parent) ?? new Set()).add(id))
      }
      try {
        const full = stagedEnvelope(envelope)
        await writeTemp(paths, folders, id, dir, JSON.stringify(full), fsync, onMkdir)
        written.push({ id, dir, settled: full.status !== 'created' && full.status !== 'running' })
      } catch (error) {
        if (!folderInvalid(id, error)) failures.push({ threadId: id, file: path.join(dir, TEMP), error })
      }
    })

    const removeTemp = (w: { id: string; dir: string }): Promise<void> =>
      folders.within(w.id, w.dir, (base) => fs.promises.rm(base + path.sep + TEMP, { force: true })).catch(() => {})
    try {
      await publishAfter
    } catch (error) {
      // Nothing is published past a transcript that is not durable: drop the temp files, keep the batch.
      await eachLimited(written, CONCURRENCY, removeTemp)
      restage(batch, batch.keys())
      throw error
    }

    // Renamed into place and, with fsync, the folder synced, through one descriptor of the folder.
    await eachLimited(written, CONCURRENCY, async (w) => {
      if (dropped.has(w.id)) return removeTemp(w)
      let renamed = false
      try {
        await folders.within(w.id, w.dir, async (base, fd) => {
          await call((cb) => fs.rename(base + path.sep + TEMP, base + path.sep + STATE_FILE, cb))
          renamed = true
          if (fsync) await (fd === null ? fsyncDir(w.dir) : call((cb) => fs.fsync(fd, cb)))
        })
        // A thread that stopped writes here again only when someone resumes it or rebuilds its file:
        // its folder is checked again then (one lstat), and a long-running host does not hold its id.
        if (w.settled) forgetThreadDir(paths, w.id)
      } catch (error) {
        if (!folderInvalid(w.id, error)) failures.push({ threadId: w.id, file: renamed ? w.dir : path.join(w.dir, STATE_FILE), error })
      }
    })

    if (fsync) {
      // New thread directories: their entries in `threads` (and `threads` in the root, the first
      // time) must be durable too, or a renamed state.json could vanish with its directory.
      for (const [dir, ids] of unsyncedParents) {
        try {
          await fsyncDir(dir)
          unsyncedParents.delete(dir)
        } catch (error) {
          for (const id of ids) failures.push({ threadId: id, file: dir, error })
        }
      }
    }

    if (failures.length > 0) {
      const failedIds = new Set(failures.map((f) => f.threadId))
      restage(batch, failedIds)
      // Not STATE_CORRUPT, which would send the user to rebuild a state.json that is intact (the
      // old version is still in place). The fs errors (with their errno codes) are kept as the cause.
      throw new SpindleError(
        'STORAGE_FAILED',
        `Could not make state.json durable for ${failedIds.size} thread(s): ${describeFailures(failures)}. ` +
          `A thread whose temp file or rename failed keeps its previous state.json; the next sync retries them all.`,
        {
          cause: failures.length === 1 ? failures[0]!.error : new AggregateError(failures.map((f) => f.error)),
          details: { threadIds: [...failedIds] },
        },
      )
    }
  }

  return {
    stage(threadId, envelope) {
      threadDir(paths, threadId)
      dropped.delete(threadId)
      staged.set(threadId, envelope)
    },

    discard(threadId) {
      staged.delete(threadId)
      dropped.add(threadId)
    },

    sync(options = {}) {
      // Serialised: two batches must never write the same temp file at once, and a later batch
      // must never be overtaken by an earlier one.
      const run = chain.then(() => {
        const batch = staged
        staged = new Map()
        let publishAfter: Promise<unknown>
        try {
          publishAfter = Promise.resolve(options.beforePublish?.())
        } catch (error) {
          publishAfter = Promise.reject(error)
        }
        // Handled here so a rejection while the temp files are written is not reported as
        // unhandled (which would end the process); writeBatch awaits it and sees the error.
        publishAfter.catch(() => {})
        return batch.size > 0 ? writeBatch(batch, publishAfter) : publishAfter.then(() => undefined)
      })
      chain = run.catch(() => {})
      return run
    },

    load(threadId, read) {
      const file = threadFile(paths, threadId, STATE_FILE)
      let text: string
      if (read) {
        if ('missing' in read) return null
        text = read.bytes.toString('utf8')
      } else {
        try {
          // A prefetched read comes from a folder the reading worker checked the same way.
          if (assertThreadDir(paths, threadId).missing) return null
          text = readRegular(file)
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null
          if (notRegularReason(error) === 'a symbolic link') {
            const target = linkTarget(file)
            throw new SpindleError(
              'STATE_CORRUPT',
              `${file} is a symbolic link (to ${target}), not a file: spindle reads no state.json through a link, so it was not read. ` +
                "The thread's transcript still holds its history: a runtime opening this directory rebuilds state.json from it, " +
                'replacing the link (its target is left alone). Find out who made it.',
              { details: { path: file, threadId, target } },
            )
          }
          if (error instanceof NotRegularFile && error.kind === 'a directory') {
            // Not STATE_CORRUPT: a rebuilt state.json could never be renamed over a directory.
            throw new SpindleError(
              'DATA_DIR_INVALID',
              `${file} is a directory, not a file: spindle can neither read nor replace the thread's state.json. Move it aside (nothing was changed) and run \`spindle rebuild ${threadId} --apply\`; the transcript holds the thread's history.`,
              { cause: error, details: { path: file, threadId } },
            )
          }
          if (error instanceof NotRegularFile) {
            throw new SpindleError(
              'STATE_CORRUPT',
              `${error.message}: spindle does not read it. The thread's transcript still holds its history: a runtime opening this directory rebuilds state.json from it.`,
              { details: { path: file, threadId } },
            )
          }
          throw error
        }
      }
      let raw: unknown
      try {
        raw = JSON.parse(text)
      } catch (error) {
        throw new SpindleError(
          'STATE_CORRUPT',
          `${file} is not valid JSON (${text.length} bytes; it may have been cut short). The thread's transcript still ` +
            `holds its history: a runtime opening this directory rebuilds state.json from it.`,
          { cause: error, details: { path: file, threadId } },
        )
      }
      // Validation and version steps (upgradeV1toV2 …) live in envelope.ts.
      return upgradeEnvelope(raw, file, threadId)
    },

    list() {
      let names: string[]
      try {
        names = fs.readdirSync(paths.threads)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return []
        throw error
      }
      return names.filter((name) => isThreadId(name) && fs.existsSync(path.join(paths.threads, name, STATE_FILE)))
    },
  }
}
