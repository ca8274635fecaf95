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
