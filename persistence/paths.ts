import path from 'node:path'
import { assertThreadId } from '../src/ids.js'
import { SpindleError } from '../src/errors.js'

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
}

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
  }
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
