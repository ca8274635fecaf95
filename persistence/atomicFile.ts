/**
 * Atomic file replacement: temp file, fsync, rename, fsync the directory. A crash at any point
 * leaves either the old file or the new one, never a mix. For one-off files (config, cancel
 * requests, side files); state.json has its own batched version in fileCheckpointStore.ts.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { writerMark } from '../src/base/processes.js'
import { assertRealDirectories, TMP_DIR } from './paths.js'

let counter = 0

/** What a temp file's name holds between the name of the file it is for and the writer's mark. */
export const TEMP_INFIX = '.tmp-'

/**
 * Where the temp file of a write of `file` goes: in a data directory (`under`), its `tmp/`, so
 * that one a kill left before its rename is found with one listing (persistence/leftovers.ts);
 * elsewhere beside `file`. Named for this process (`writerMark`), so the next runtime can tell a
 * dead writer's file from a live one's; unique per call, so two writers of one file never share
 * a temp file; with a random part, so nobody who can write the directory can plant a symlink at
 * the name beforehand (and the temp file is created exclusively — 'wx' — which never follows one
 * anyway).
 */
function tempName(file: string, under: string | undefined): string {
  const name = `${path.basename(file)}${TEMP_INFIX}${writerMark()}-${++counter}-${randomBytes(4).toString('hex')}`
  if (under === undefined) return path.join(path.dirname(file), name)
  const dir = path.join(under, TMP_DIR)
  // Made if missing, never through a link: the temp file would be written wherever it points.
  assertRealDirectories(under, dir, { create: true })
  return path.join(dir, name)
}

/** A rename across filesystems: `tmp/` and the file's folder are not on one (a folder mounted apart). */
function crossDevice(error: unknown): boolean {
  return (error as NodeJS.ErrnoException).code === 'EXDEV'
}

/** Makes the entries of `dir` (a rename or a new file into it) survive power loss. */
export function fsyncDirSync(dir: string): void {
  const fd = fs.openSync(dir, 'r')
  try {
    fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/** `fsyncDirSync` on the libuv threadpool, so many directories can be synced in parallel. */
export function fsyncDir(dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    fs.open(dir, 'r', (error, fd) => {
      if (error) return reject(error)
      fs.fsync(fd, (syncError) => fs.close(fd, () => (syncError ? reject(syncError) : resolve())))
    })
  })
}

export interface AtomicWriteOptions {
  fsync: boolean
  under?: string
}

/**
 * Replaces `file` atomically: readers see the old content or the new, never a mix. With `fsync`
 * the new content survives power loss once this returns; without, a process crash only. On failure
 * the temp file is removed, `file` keeps its old content, and the error propagates.
 * @param options.fsync fsync the temp file before the rename and the directory after it.
 * @param options.under the data directory `file` lies in: nothing is written when a directory between
 *   it and `file` is a symlink (DATA_DIR_INVALID), since the temp file and the rename would follow it.
 *   The temp file goes in its `tmp/` (beside `file` should the two be on different filesystems).
 * @example writeFileAtomicSync(path.join(dir, 'cancel.json'), JSON.stringify(request), { fsync: true })
 */
export function writeFileAtomicSync(file: string, data: string | Buffer, options: AtomicWriteOptions): void {
  if (options.under !== undefined) assertRealDirectories(options.under, path.dirname(file))
  const temp = tempName(file, options.under)
  try {
    const fd = fs.openSync(temp, 'wx')
    try {
      fs.writeFileSync(fd, data)
      if (options.fsync) fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
    fs.renameSync(temp, file)
  } catch (error) {
    // Best effort: a failing cleanup must not hide the error that matters.
    try {
      fs.rmSync(temp, { force: true })
    } catch {}
    if (options.under !== undefined && crossDevice(error)) return writeFileAtomicSync(file, data, { fsync: options.fsync })
    throw error
  }
  if (options.fsync) fsyncDirSync(path.dirname(file))
}

/** `writeFileAtomicSync` without blocking the event loop; same contract. */
export async function writeFileAtomic(file: string, data: string | Buffer, options: AtomicWriteOptions): Promise<void> {
  if (options.under !== undefined) assertRealDirectories(options.under, path.dirname(file))
  const temp = tempName(file, options.under)
  try {
    const handle = await fs.promises.open(temp, 'wx')
    try {
      await handle.writeFile(data)
      if (options.fsync) await handle.sync()
    } finally {
      await handle.close()
    }
    await fs.promises.rename(temp, file)
  } catch (error) {
    await fs.promises.rm(temp, { force: true }).catch(() => {})
    if (options.under !== undefined && crossDevice(error)) return writeFileAtomic(file, data, { fsync: options.fsync })
    throw error
  }
  if (options.fsync) await fsyncDir(path.dirname(file))
}
