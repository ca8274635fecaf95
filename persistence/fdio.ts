/**
 * Whole reads and writes on a file descriptor, and fdatasync as a promise: what the transcript
 * store and its journal both do at byte offsets. Side effects.
 */
import fs from 'node:fs'

/** pread until `end` (or until the file ends, if it shrank meanwhile). */
export function readRange(fd: number, start: number, end: number): Buffer {
  const buffer = Buffer.allocUnsafe(Math.max(0, end - start))
  let done = 0
  while (done < buffer.length) {
    const n = fs.readSync(fd, buffer, done, buffer.length - done, start + done)
    if (n === 0) return buffer.subarray(0, done)
    done += n
  }
  return buffer
}

/** write until every byte is written (a short write is finished, not dropped). */
export function writeAll(fd: number, bytes: Buffer): void {
  let written = 0
  while (written < bytes.length) written += fs.writeSync(fd, bytes, written, bytes.length - written)
}

/** fdatasync on the libuv threadpool. */
export function fdatasync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fdatasync(fd, (error) => (error ? reject(error) : resolve())))
}

/** Where the symbolic link `entry` points, or '?' when that cannot be read (for messages). */
export function linkTarget(entry: string): string {
  try {
    return fs.readlinkSync(entry)
  } catch {
    return '?'
  }
}

/** A path that had to be a regular file and is not. */
export class NotRegularFile extends Error {
  constructor(
    readonly file: string,
    readonly kind: 'a directory' | 'a FIFO, socket or device',
  ) {
    super(`${file} is ${kind}, not a file`)
  }
}

/**
 * Opens `file`, which must be a regular file, non-blocking: a FIFO put in its place would otherwise
 * block the open or the first read, and with it the whole process. Throws NotRegularFile (the
 * descriptor closed) when it is not one; other fs errors as they come. `dev` and `ino` say which
 * file it is, for a caller that must find the same one again.
 */
export function openRegular(file: string, flags: number): { fd: number; size: number; dev: number; ino: number } {
  let fd: number
  try {
    fd = fs.openSync(file, flags | fs.constants.O_NONBLOCK)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EISDIR') throw new NotRegularFile(file, 'a directory')
    throw error
  }
  const stat = fs.fstatSync(fd)
  if (!stat.isFile()) {
    fs.closeSync(fd)
    throw new NotRegularFile(file, stat.isDirectory() ? 'a directory' : 'a FIFO, socket or device')
  }
  return { fd, size: stat.size, dev: stat.dev, ino: stat.ino }
}

/** A small file (configuration, a request) that is larger than its readers allow. */
export class FileTooLarge extends Error {
  constructor(
    readonly file: string,
    /** Its size when opened, or null when it grew past `max` while it was read. */
    readonly size: number | null,
    readonly max: number,
  ) {
    super(size === null ? `${file} grew past ${max} bytes while it was read` : `${file} is ${size} bytes, more than ${max}`)
  }
}

/**
 * Reads a regular file of at most `max` bytes as UTF-8, a byte-order mark dropped. `flags` are
 * added to O_RDONLY (O_NOFOLLOW, say). Throws NotRegularFile, FileTooLarge (also for a file that
 * grew past `max` since it was opened: refused, not cut) or the fs error.
 */
export function readSmallRegular(file: string, max: number, flags = 0): string {
  const { fd, size } = openRegular(file, fs.constants.O_RDONLY | flags)
  try {
    if (size > max) throw new FileTooLarge(file, size, max)
    const bytes = readRange(fd, 0, max + 1)
    if (bytes.length > max) throw new FileTooLarge(file, null, max)
    return bytes.toString('utf8').replace(/^\uFEFF/, '')
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * Appends `text` to `file` (created if missing) only when it is a regular file: never through a
 * symlink (O_NOFOLLOW), which could point at a file outside the data directory, and never waiting
 * on a FIFO put in its place (with O_NONBLOCK and no reader the open fails with ENXIO at once).
 * Throws NotRegularFile or the fs error otherwise; `notRegularReason` tells the two kinds apart.
 */
export function appendRegular(file: string, text: string): void {
  const { O_WRONLY, O_APPEND, O_CREAT, O_NOFOLLOW } = fs.constants
  const { fd } = openRegular(file, O_WRONLY | O_APPEND | O_CREAT | (O_NOFOLLOW ?? 0))
  try {
    writeAll(fd, Buffer.from(text))
  } finally {
    fs.closeSync(fd)
  }
}

/**
 * What was found in place of a regular file, from the error of an `openRegular` with O_NOFOLLOW
 * (or `appendRegular`); null when the open failed for another reason (missing, no permission).
 */
export function notRegularReason(error: unknown): string | null {
  if (error instanceof NotRegularFile) return error.kind
  const code = (error as NodeJS.ErrnoException | null)?.code
  if (code === 'ELOOP') return 'a symbolic link'
  // A write-only, non-blocking open of a FIFO nobody reads, or of a socket.
  if (code === 'ENXIO') return 'a FIFO or socket'
  return null
}
