/**
 * Writing one thread's `state.json.tmp` for a checkpoint batch: made anew in the thread's folder
 * as its descriptor holds it, never through a link (see fileCheckpointStore.ts). Side effects.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { DataPaths } from './paths.js'
import { assertThreadDir, STATE_FILE } from './paths.js'
import type { PinnedFolders } from './pinnedFolders.js'

export const TEMP = `${STATE_FILE}.tmp`
const NOFOLLOW = fs.constants.O_NOFOLLOW ?? 0
/**
 * The temp file is always made anew: O_EXCL (which never follows a link at the name) and
 * O_NOFOLLOW, so a symlink or FIFO planted at `state.json.tmp` is neither written through nor
 * waited on. Costs nothing over a plain open: the previous temp file was renamed away.
 */
const CREATE_TEMP = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | NOFOLLOW

/** A callback-style fs call as a promise: it runs on the libuv threadpool, so many run at once. */
export function call<T = void>(fn: (cb: (error: NodeJS.ErrnoException | null, value?: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((error, value) => (error ? reject(error) : resolve(value as T))))
}

/** The quick file calls of a batch (fsyncs always go to the threadpool). */
export interface FileCalls {
  open(file: string, flags: number): Promise<number>
  write(fd: number, data: string): Promise<void>
  close(fd: number): Promise<void>
  remove(file: string): Promise<void>
  rename(from: string, to: string): Promise<void>
}

/** On the libuv threadpool: a batch of many files writes them in parallel. */
export const POOLED: FileCalls = {
  open: (file, flags) => call<number>((cb) => fs.open(file, flags, 0o666, cb)),
  write: (fd, data) => call((cb) => fs.writeFile(fd, data, cb)),
  close: (fd) => call((cb) => fs.close(fd, cb)),
  remove: (file) => fs.promises.rm(file, { force: true }),
  rename: (from, to) => call((cb) => fs.rename(from, to, cb)),
}

/**
 * Synchronous calls: a batch of a few files (see `sync`'s `only`) is done in microseconds, where
 * each call on the threadpool would cost a turn of the event loop — on a busy host, a step of
 * every other running thread.
 */
export const INLINE: FileCalls = {
  open: async (file, flags) => fs.openSync(file, flags, 0o666),
  write: async (fd, data) => fs.writeFileSync(fd, data),
  close: async (fd) => fs.closeSync(fd),
  remove: async (file) => fs.rmSync(file, { force: true }),
  rename: async (from, to) => fs.renameSync(from, to),
}

/**
 * Writes `data` to `<dir>/state.json.tmp`, making the thread's folder when it is missing.
 * `onMkdir` gets the directories whose entries changed because of a mkdir here: they need an
 * fsync before the new directory is durable. The folder is checked to be a real directory (not a
 * link out of the data directory) when it is first written or was opened by the transcript store
 * (see assertThreadDir), and written through its descriptor (`folders`), so a folder swapped for a
 * link since is refused, not written through.
 */
export async function writeTemp(
  paths: DataPaths,
  folders: PinnedFolders,
  io: FileCalls,
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
      fd = await io.open(temp, CREATE_TEMP)
    } catch (error) {
      // A temp file a crash left (or a batch that a later one took the thread from), or whatever
      // was planted at its name: removed (unlink never follows a link), never opened.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      await io.remove(temp)
      fd = await io.open(temp, CREATE_TEMP)
    }
    try {
      await io.write(fd, data)
      // fdatasync flushes the data and the size (what reading it back needs), not the timestamps.
      if (fsync) await call((cb) => fs.fdatasync(fd, cb))
    } finally {
      await io.close(fd)
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
