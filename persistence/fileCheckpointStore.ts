/**
 * state.json per thread, written by group commit: every staged envelope of a batch is written to a
 * temp file, the temp files are fsynced in parallel, renamed into place, and the directories
 * fsynced in parallel — one round of fsync latency for the whole batch instead of one per thread.
 * A sync of a few threads (`only`: threads that stopped, whose `done` waits for it) does not queue
 * behind a batch of every thread under way: it takes their envelopes, out of that batch if it has
 * not published them, and makes no call on the threadpool but its fsyncs.
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
import type { FileCalls } from './stateTempFile.js'
import { call, INLINE, POOLED, TEMP, writeTemp } from './stateTempFile.js'
import { assertThreadDir, forgetThreadDir, STATE_FILE, threadDir, threadFile } from './paths.js'
import type { CheckpointStore, Durability, StagedEnvelope } from './types.js'
import { stagedEnvelope } from './types.js'

const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0

/** A state.json's text; it must be a regular file, not a link to one (see openRegular). */
function readRegular(file: string): string {
  const { fd } = openRegular(file, fs.constants.O_RDONLY | NOFOLLOW)
  try {
    return fs.readFileSync(fd, 'utf8')
  } finally {
    fs.closeSync(fd)
  }
}

/** Envelopes taken by one sync, by thread. */
type Batch = Map<string, StagedEnvelope>

/** One thread of a batch that was not made durable, and the file or directory that failed. */
interface WriteFailure {
  threadId: string
  file: string
  error: unknown
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
  /** Syncs without `only`, one after another. */
  let chain: Promise<void> = Promise.resolve()
  /** Directories that gained an entry by a mkdir and are not fsynced yet, with the threads that need them. */
  const unsyncedParents = new Map<string, Set<string>>()
  /**
   * The batch that holds each thread's newest envelope until it has published it: a batch that
   * finds another here (an `only` sync took the thread from it) publishes nothing of the thread.
   */
  const owners = new Map<string, Batch>()
  /**
   * Per thread, the last file operation queued on its folder (writing its temp file, renaming it):
   * two batches under way at once never write one temp file together or rename out of order.
   */
  const busy = new Map<string, Promise<void>>()

  /** Runs `fn` once every file operation queued on the thread's folder before it has ended. */
  function exclusive(threadId: string, fn: () => Promise<void>): Promise<void> {
    const before = busy.get(threadId)
    const run = before ? before.then(fn) : fn()
    const after = run.catch(() => {})
    busy.set(threadId, after)
    void after.then(() => {
      if (busy.get(threadId) === after) busy.delete(threadId)
    })
    return run
  }

  /** Takes every staged envelope, or those of `only` (from a batch under way if it has them). */
  function take(only: ReadonlySet<string> | undefined): Batch {
    let batch: Batch
    if (only === undefined) {
      batch = staged
      staged = new Map()
    } else {
      batch = new Map()
      for (const id of only) {
        const envelope = staged.get(id) ?? owners.get(id)?.get(id)
        if (envelope === undefined) continue
        staged.delete(id)
        batch.set(id, envelope)
      }
    }
    for (const id of batch.keys()) owners.set(id, batch)
    return batch
  }

  /** Puts failed envelopes back for the next sync, unless a newer one of that thread was staged or taken meanwhile. */
  function restage(batch: Batch, threadIds: Iterable<string>): void {
    for (const id of threadIds) {
      const envelope = batch.get(id)
      if (envelope && owners.get(id) === batch && !staged.has(id) && !dropped.has(id)) staged.set(id, envelope)
    }
  }

  async function writeBatch(batch: Batch, publishAfter: Promise<unknown>, only: ReadonlySet<string> | undefined): Promise<void> {
    // A few threads' batch, which a stopped thread's `done` waits for, makes no call on the
    // threadpool but its fsyncs (see INLINE).
    const inline = only !== undefined
    const folders = new PinnedFolders(paths, { inline })
    try {
      await writeBatchIn(folders, inline ? INLINE : POOLED, batch, publishAfter, only)
    } finally {
      for (const id of batch.keys()) if (owners.get(id) === batch) owners.delete(id)
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

  async function writeBatchIn(
    folders: PinnedFolders,
    io: FileCalls,
    batch: Batch,
    publishAfter: Promise<unknown>,
    only: ReadonlySet<string> | undefined,
  ): Promise<void> {
    const failures: WriteFailure[] = []
    const written: Array<{ id: string; dir: string; settled: boolean }> = []
    /** Whether this batch still holds the thread's newest envelope (see `owners`). */
    const ours = (id: string): boolean => owners.get(id) === batch
    await eachLimited([...batch], CONCURRENCY, async ([id, envelope]) => {
      const dir = threadDir(paths, id)
      // Recorded at once, whatever happens next: a retry finds the directory and does not mkdir.
      const onMkdir = (changedParents: string[]) => {
        if (!fsync) return
        for (const parent of changedParents) unsyncedParents.set(parent, (unsyncedParents.get(parent) ?? new Set()).add(id))
      }
      try {
        await exclusive(id, async () => {
          if (!ours(id)) return
          const full = stagedEnvelope(envelope)
          await writeTemp(paths, folders, io, id, dir, JSON.stringify(full), fsync, onMkdir)
          written.push({ id, dir, settled: full.status !== 'created' && full.status !== 'running' })
        })
      } catch (error) {
        if (!folderInvalid(id, error)) failures.push({ threadId: id, file: path.join(dir, TEMP), error })
      }
    })

    const removeTemp = (w: { id: string; dir: string }): Promise<void> =>
      folders.within(w.id, w.dir, (base) => io.remove(base + path.sep + TEMP)).catch(() => {})
    try {
      await publishAfter
    } catch (error) {
      // Nothing is published past a transcript that is not durable: drop the temp files, keep the
      // batch. A temp file of a thread a later batch took is that batch's (it opens it anew).
      await eachLimited(written, CONCURRENCY, (w) => exclusive(w.id, async () => (ours(w.id) ? removeTemp(w) : undefined)))
      restage(batch, batch.keys())
      throw error
    }

    // Renamed into place and, with fsync, the folder synced, through one descriptor of the folder.
    await eachLimited(written, CONCURRENCY, async (w) => {
      let renamed = false
      try {
        await exclusive(w.id, async () => {
          if (!ours(w.id)) return
          if (dropped.has(w.id)) return removeTemp(w)
          await folders.within(w.id, w.dir, async (base, fd) => {
            await io.rename(base + path.sep + TEMP, base + path.sep + STATE_FILE)
            renamed = true
            if (fsync) await (fd === null ? fsyncDir(w.dir) : call((cb) => fs.fsync(fd, cb)))
          })
        })
        // A thread that stopped writes here again only when someone resumes it or rebuilds its file:
        // its folder is checked again then (one lstat), and a long-running host does not hold its id.
        if (w.settled && renamed) forgetThreadDir(paths, w.id)
      } catch (error) {
        if (!folderInvalid(w.id, error)) failures.push({ threadId: w.id, file: renamed ? w.dir : path.join(w.dir, STATE_FILE), error })
      }
    })

    if (fsync) {
      // New thread directories: their entries in `threads` (and `threads` in the root, the first
      // time) must be durable too, or a renamed state.json could vanish with its directory.
      for (const [dir, ids] of unsyncedParents) {
        if (only && ![...ids].some((id) => only.has(id))) continue
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
      const { only } = options
      const start = (): Promise<void> => {
        const batch = take(only)
        let publishAfter: Promise<unknown>
        try {
          publishAfter = Promise.resolve(options.beforePublish?.())
        } catch (error) {
          publishAfter = Promise.reject(error)
        }
        // Handled here so a rejection while the temp files are written is not reported as
        // unhandled (which would end the process); writeBatch awaits it and sees the error.
        publishAfter.catch(() => {})
        return batch.size > 0 ? writeBatch(batch, publishAfter, only) : publishAfter.then(() => undefined)
      }
      // A few threads' syncs (a stopped thread's `done` waits for them) start at once; each thread's
      // files are still written by one batch at a time, in order (`exclusive`, `owners`).
      if (only) return start()
      // Serialised: a later batch of everything is never overtaken by an earlier one.
      const run = chain.then(start)
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
