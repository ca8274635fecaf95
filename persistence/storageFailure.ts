/**
 * Writes that fail for want of a resource rather than for something wrong with a thread: a disk
 * that is full, over quota, failing (I/O errors), read-only, or a file size limit; or a process
 * (or system) out of file descriptors. Either passes once someone frees what is short, so a thread
 * that meets one is parked at its last durable step and tried again, rather than failed or
 * restarted against its supervisor's intensity. They are told apart in what the host hears: a full
 * disk is mended on the disk, a descriptor shortage by raising `ulimit -n` or spending fewer of
 * them, and a thread short of descriptors stops trying after a while (see parking.ts) rather than
 * waiting on a limit nobody may be about to raise.
 */
import Database from 'better-sqlite3'
import { SpindleError, isSpindleError } from '../src/base/errors.js'
import { descriptorLimit } from './descriptorPool.js'

const DISK = new Set(['ENOSPC', 'EDQUOT', 'EIO', 'EROFS', 'EFBIG'])
const DESCRIPTORS = new Set(['EMFILE', 'ENFILE'])
const SQLITE = /^SQLITE_(FULL|IOERR|READONLY)/

/** What a storage failure lacks: room on the disk (or a working disk), file descriptors, or the database. */
export type StorageShortage = 'disk' | 'descriptors' | 'database'

/** The storage failure in `error` or its causes (a store's error wraps SQLite's), or null. */
export function storageFailureOf(error: unknown): { code: string; path?: string; message: string; kind: StorageShortage } | null {
  let current: unknown = error
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    if (isSpindleError(current) && (current.code === 'STORAGE_FAILED' || current.code === 'DESCRIPTORS_EXHAUSTED')) return storageFailureOf(current.cause)
    // The database is down or out of reach: it passes once it answers again, as a freed disk does.
    if (isSpindleError(current) && current.code === 'DATABASE_UNAVAILABLE') return { code: current.code, message: current.message, kind: 'database' }
    const { code, syscall, path } = current as { code?: unknown; syscall?: unknown; path?: unknown }
    // A system call's errno (Node's fs errors carry the call), or SQLite's own code.
    if (typeof code === 'string' && typeof syscall === 'string' && (DISK.has(code) || DESCRIPTORS.has(code))) {
      const kind: StorageShortage = DESCRIPTORS.has(code) ? 'descriptors' : 'disk'
      return { code, message: (current as Error).message, kind, ...(typeof path === 'string' ? { path } : {}) }
    }
    if (current instanceof Database.SqliteError && SQLITE.test(current.code)) {
      const file = isSpindleError(error) ? error.details.path : undefined
      return { code: current.code, message: current.message, kind: 'disk', ...(typeof file === 'string' ? { path: file } : {}) }
    }
    // Several files failed in one round: the first tells what kind of failure it was.
    current = current instanceof AggregateError ? current.errors[0] : (current as { cause?: unknown }).cause
  }
  return null
}

export function isStorageFailure(error: unknown): boolean {
  return storageFailureOf(error) !== null
}

/** Whether `error` is the process (EMFILE) or the system (ENFILE) out of file descriptors. */
export function isDescriptorShortage(error: unknown): boolean {
  return storageFailureOf(error)?.kind === 'descriptors'
}

/** What to do about a descriptor shortage, with the process's limit where it can be read. */
export function descriptorAdvice(): string {
  const limit = descriptorLimit()
  return (
    `raise the process's descriptor limit (${limit === null ? '' : `now ${limit}: `}\`ulimit -n\` before starting it, \`LimitNOFILE=\` for a systemd service), ` +
    'or lower the runtime option `maxOpenTranscripts` (the transcript files spindle keeps open), and look for what else in the process holds descriptors'
  )
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

/** How long a thread short of descriptors is tried again before it stops (see parking.ts). */
export const DESCRIPTOR_GIVE_UP_MS = 60_000

/** What a host is told when a thread is parked for want of storage: what failed, where, what to do. */
export function threadParked(threadId: string, error: unknown, retryMaxMs: number): SpindleError {
  const { text, details } = described(error)
  if (isDescriptorShortage(error)) {
    return new SpindleError(
      'DESCRIPTORS_EXHAUSTED',
      `Thread ${threadId} could not open a file (${text}): the process has no file descriptors left. ` +
        `It is parked at its last durable step and tried again for ${Math.round(DESCRIPTOR_GIVE_UP_MS / 1000)} s, then stops here if none is freed: ` +
        `${descriptorAdvice()}. Nothing it acknowledged is lost.`,
      { cause: error, details: { threadId, ...details } },
    )
  }
  if (storageFailureOf(error)?.kind === 'database') {
    return new SpindleError(
      'STORAGE_FAILED',
      `Thread ${threadId} could not write to its database (${text}). ` +
        `It is parked at its last durable step and tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s) until the database answers. Nothing it acknowledged is lost.`,
      { cause: error, details: { threadId, ...details } },
    )
  }
  return new SpindleError(
    'STORAGE_FAILED',
    `Thread ${threadId} could not write its files (${text}). ` +
      `It is parked at its last durable step and tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s) until writes succeed: ` +
      'free space on the disk of the data directory (or mend it). Nothing it acknowledged is lost.',
    { cause: error, details: { threadId, ...details } },
  )
}

/**
 * What a host is told when a thread short of descriptors stops trying: it is let go where it stands
 * (nothing of it is lost, nothing more is written), for `rt.recover()` or the next runtime.
 */
export function threadStoppedForDescriptors(threadId: string, error: unknown, cancel?: { reason: string; by: string }): SpindleError {
  const { text, details } = described(error)
  return new SpindleError(
    'DESCRIPTORS_EXHAUSTED',
    `Thread ${threadId} stopped in this process: for ${Math.round(DESCRIPTOR_GIVE_UP_MS / 1000)} s it could not open a file (${text}), the process having no file descriptors left. ` +
      `It is left at its last durable step, nothing it acknowledged lost: ${descriptorAdvice()}; then \`rt.recover()\` (or the next runtime on this directory) carries it on.` +
      (cancel ? ` The cancel that waited for it (${JSON.stringify(cancel.reason)}) was not recorded: cancel it again.` : ''),
    { cause: error, details: { threadId, ...details, ...(cancel ? { cancel } : {}) } },
  )
}

/**
 * What a host is told when a thread that ended could not have its last checkpoint written for
 * DESCRIPTOR_GIVE_UP_MS, for want of descriptors: its `done` stops waiting; the checkpoint is
 * still tried, and written once descriptors are free.
 */
export function finishedShortOfDescriptors(threadId: string, status: string, error: unknown): SpindleError {
  const { text, details } = described(error)
  return new SpindleError(
    'DESCRIPTORS_EXHAUSTED',
    `Thread ${threadId} ended (${status}), but for ${Math.round(DESCRIPTOR_GIVE_UP_MS / 1000)} s its last checkpoint could not be written (${text}): the process has no file descriptors left. ` +
      `Its transcript holds its end, and this process goes on trying to write the checkpoint (the next runtime on this directory does it otherwise): ${descriptorAdvice()}.`,
    { cause: error, details: { threadId, status, ...details } },
  )
}

/** What a host is told when checkpoint rounds (state.json, registry) start failing for want of storage. */
export function checkpointsFailing(dir: string, error: unknown, retryMaxMs: number): SpindleError {
  const { text, details } = described(error)
  if (isDescriptorShortage(error)) {
    return new SpindleError(
      'DESCRIPTORS_EXHAUSTED',
      `Checkpoints in ${dir} could not be written (${text}): the process has no file descriptors left. ` +
        `They are tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s): ${descriptorAdvice()}. ` +
        'Every thread keeps its transcript; nothing acknowledged is lost.',
      { cause: error, details: { dir, ...details } },
    )
  }
  if (storageFailureOf(error)?.kind === 'database') {
    return new SpindleError(
      'STORAGE_FAILED',
      `Checkpoints in ${dir} could not be written (${text}). They are tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s) until the database answers. ` +
        'Every thread keeps what its transcript holds; nothing acknowledged is lost.',
      { cause: error, details: { dir, ...details } },
    )
  }
  return new SpindleError(
    'STORAGE_FAILED',
    `Checkpoints in ${dir} could not be written (${text}). ` +
      `They are tried again by itself (at least every ${Math.round(retryMaxMs / 1000)} s) until writes succeed: free space on the disk (or mend it). ` +
      'Every thread keeps its transcript; nothing acknowledged is lost.',
    { cause: error, details: { dir, ...details } },
  )
}
