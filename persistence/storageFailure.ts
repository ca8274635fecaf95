/**
 * Failures of the disk rather than of a thread: no space left, a quota, an I/O error, a file
 * system gone read-only, a file size limit, no descriptors left. They pass once a person frees
 * space or mends the disk, so a thread that meets one is parked at its last durable step and
 * tried again, rather than failed, or restarted against its supervisor's intensity.
 */
import Database from 'better-sqlite3'
import { SpindleError, isSpindleError } from '../src/base/errors.js'

const ERRNO = new Set(['ENOSPC', 'EDQUOT', 'EIO', 'EROFS', 'EFBIG', 'EMFILE', 'ENFILE'])
const SQLITE = /^SQLITE_(FULL|IOERR|READONLY)/

/** The storage failure in `error` or its causes (a store's error wraps SQLite's), or null. */
export function storageFailureOf(error: unknown): { code: string; path?: string; message: string } | null {
  let current: unknown = error
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    if (isSpindleError(current) && current.code === 'STORAGE_FAILED') return storageFailureOf(current.cause)
    const { code, syscall, path } = current as { code?: unknown; syscall?: unknown; path?: unknown }
    // A system call's errno (Node's fs errors carry the call), or SQLite's own code.
    if (typeof code === 'string' && typeof syscall === 'string' && ERRNO.has(code)) {
      return { code, message: (current as Error).message, ...(typeof path === 'string' ? { path } : {}) }
    }
    if (current instanceof Database.SqliteError && SQLITE.test(current.code)) {
      const file = isSpindleError(error) ? error.details.path : undefined
      return { code: current.code, message: current.message, ...(typeof file === 'string' ? { path: file } : {}) }
    }
    // Several files failed in one round: the first tells what kind of failure it was.
    current = current instanceof AggregateError ? current.errors[0] : (current as { cause?: unknown }).cause
  }
  return null
}

export function isStorageFailure(error: unknown): boolean {
  return storageFailureOf(error) !== null
}

/** The failure in words (`ENOSPC on <file>: <message>`) and as details, for the two errors below. */
function described(error: unknown): { text: string; details: Record<string, unknown> } {
  const failure = storageFailureOf(error)
  if (!failure) return { text: `a write failed: ${String(error)}`, details: {} }
  return {
    text: `${failure.code}${failure.path ? ` on ${failure.path}` : ''}: ${failure.message}`,
    details: { errno: failure.code, ...(failure.path ? { path: failure.path } : {}) },
  }
}

/** What a host is told when a thread is parked for want of storage: what failed, where, what to do. */
export function threadParked(threadId: string, error: unknown, retryMaxMs: number): SpindleError {
  const { text, details } = described(error)
  return new SpindleError(
    'STORAGE_FAILED',
    `Thread ${threadId} could not write its files (${text}). ` +
      `It is parked at its last durable step and tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s) until writes succeed: ` +
      'free space on the disk of the data directory (or mend it). Nothing it acknowledged is lost.',
    { cause: error, details: { threadId, ...details } },
  )
}

/** What a host is told when checkpoint rounds (state.json, registry) start failing for want of storage. */
export function checkpointsFailing(dir: string, error: unknown, retryMaxMs: number): SpindleError {
  const { text, details } = described(error)
  return new SpindleError(
    'STORAGE_FAILED',
    `Checkpoints in ${dir} could not be written (${text}). ` +
      `They are tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s) until writes succeed: free space on the disk (or mend it). ` +
      'Every thread keeps its transcript; nothing acknowledged is lost.',
    { cause: error, details: { dir, ...details } },
  )
}
