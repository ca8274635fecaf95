/**
 * Thread folders held open by descriptor while a checkpoint round writes in them, so that a folder
 * swapped for a link while its thread runs cannot redirect a write outside the data directory.
 *
 * Node has no openat(). On Linux, `/proc/self/fd/<fd>/<name>` resolves `name` inside the directory
 * the descriptor holds, whatever path now leads there; each level is opened with O_NOFOLLOW, so a
 * link planted at `threads` or at `threads/<id>` is refused (ELOOP or ENOTDIR), never followed.
 * Elsewhere (no /proc) folders are written by path, as docs/durability.md says.
 */
import fs from 'node:fs'
import type { DataPaths } from './paths.js'
import { threadFolderProblem } from './paths.js'

const FD_DIR = '/proc/self/fd'
const OPEN_DIR = fs.constants.O_RDONLY | (fs.constants.O_DIRECTORY ?? 0) | (fs.constants.O_NOFOLLOW ?? 0)
let available: boolean | null = null

function pinningAvailable(): boolean {
  available ??= process.platform === 'linux' && fs.existsSync(FD_DIR)
  return available
}

function open(file: string): Promise<number> {
  return new Promise((resolve, reject) => fs.open(file, OPEN_DIR, (error, fd) => (error ? reject(error) : resolve(fd))))
}

function close(fd: number): Promise<void> {
  return new Promise((resolve) => fs.close(fd, () => resolve()))
}

async function openInline(file: string): Promise<number> {
  return fs.openSync(file, OPEN_DIR)
}

async function closeInline(fd: number): Promise<void> {
  try {
    fs.closeSync(fd)
  } catch {
    // As `close`: a descriptor that will not close leaves nothing to do.
  }
}

/** One checkpoint round's view of the thread folders: `threads/` opened once, each folder per use. */
export class PinnedFolders {
  private threads: Promise<number> | null = null
  private readonly openDir: (file: string) => Promise<number>
  private readonly closeDir: (fd: number) => Promise<void>

  /**
   * @param options.inline open and close the folders with synchronous calls (a round of a few
   * folders, where a call on the threadpool would cost a turn of the event loop each).
   */
  constructor(
    private readonly paths: DataPaths,
    options: { inline?: boolean } = {},
  ) {
    this.openDir = options.inline ? openInline : open
    this.closeDir = options.inline ? closeInline : close
  }

  private async threadsFd(): Promise<number> {
    this.threads ??= this.openDir(this.paths.threads)
    try {
      return await this.threads
    } catch (error) {
      this.threads = null
      throw error
    }
  }

  /**
   * Runs `use` with the path that names the thread's folder: `/proc/self/fd/<fd>` of the folder
   * opened without following links, or the folder's path where that is not possible. Throws
   * DATA_DIR_INVALID naming the link when the folder (or `threads/`) is no real directory now.
   */
  async within<T>(threadId: string, folderPath: string, use: (base: string, fd: number | null) => Promise<T>): Promise<T> {
    if (!pinningAvailable()) return use(folderPath, null)
    let fd: number
    try {
      fd = await this.openDir(`${FD_DIR}/${await this.threadsFd()}/${threadId}`)
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ELOOP' || code === 'ENOTDIR') throw threadFolderProblem(this.paths, threadId, error)
      throw error
    }
    try {
      return await use(`${FD_DIR}/${fd}`, fd)
    } finally {
      await this.closeDir(fd)
    }
  }

  async close(): Promise<void> {
    const threads = this.threads
    this.threads = null
    if (threads) await threads.then(this.closeDir, () => {})
  }
}
