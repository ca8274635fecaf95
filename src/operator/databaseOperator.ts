/**
 * What `spindle ls | show | logs | tree | locks` read on a PostgreSQL database, as data of the same
 * shapes the directory versions return, so that cli.ts prints both alike. Everything goes through
 * the store interfaces (persistence/types.ts) of `openPostgresStores`: the rows are read as a
 * runtime reads them, hash chains verified.
 */
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import type { Stores } from '../runtime/openStores.js'
import type { BudgetView } from '../runtime/budgetView.js'
import { budgetOf } from '../runtime/budgetView.js'
import type { ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { describeError } from '../base/errors.js'
import { recordIn, withDatabase, withDatabaseAsync } from './databaseStores.js'
import { openRequestIn } from './databaseRequests.js'
import type { LocksOptions, LocksReport } from './locks.js'
import { reviewLocks } from './locks.js'
import type { ThreadReport } from './operator.js'
import type { TreeNode } from './operatorActions.js'
import { treeOf } from './operatorActions.js'
import type { ThreadListing } from './threadListing.js'
import { listedThreads, withoutNonce } from './threadListing.js'

/** `spindle ls`: the database's threads, oldest first, each brought up to its last checkpoint. */
export function databaseThreads(database: DatabaseOptions, filter: { status?: ThreadStatus[] } = {}): ThreadListing[] {
  return withDatabase(database, (stores) => listedThreads(stores.registry, stores.checkpoints, filter))
}

/** `spindle show`: everything known about one thread; damage is reported, not thrown. */
export function showDatabaseThread(database: DatabaseOptions, id: string): ThreadReport {
  return withDatabase(database, (stores) => {
    const record = withoutNonce(recordIn(stores, id))
    const recoveries = stores.registry.recoveryCount(id)
    const problems: ThreadReport['problems'] = []
    let state: ThreadReport['state'] = null
    try {
      const envelope = stores.checkpoints.load(id)
      if (envelope) {
        const snapshot = envelope.snapshot as { value: unknown; context: ThreadContext }
        state = { status: envelope.status, value: snapshot.value, savedAt: envelope.savedAt, transcriptSeq: envelope.transcript.seq, context: snapshot.context }
      }
    } catch (error) {
      problems.push(describeError(error))
    }
    let transcript: ThreadReport['transcript'] = null
    try {
      const { entries } = stores.transcripts.read(id)
      transcript = { entries: entries.length, lastSeq: entries.at(-1)?.seq ?? 0, torn: false }
    } catch (error) {
      problems.push(describeError(error))
    }
    let budget: BudgetView | null = null
    try {
      budget = budgetOf(stores, stores.root, id)
    } catch (error) {
      problems.push(describeError(error))
    }
    // Answers a runtime refused are kept in the inbox's rows, which no store interface reads back.
    const approvals = { open: openRequestIn(stores, id, record.status), rejected: [] }
    return { record, recoveries, state, transcript, approvals, problems, budget }
  })
}

/** A thread's transcript read again and again (`spindle logs --follow`) on one connection. */
export interface LogReader {
  /** The thread's registry status, then its verified entries after seq `after`. */
  read(after: number): { status: ThreadStatus; entries: TranscriptEntry[] }
}

/** Runs `fn` with a reader of thread `id`'s transcript in the database. */
export function readDatabaseLog<T>(database: DatabaseOptions, id: string, fn: (log: LogReader) => Promise<T>): Promise<T> {
  return withDatabaseAsync(database, (stores) => {
    recordIn(stores, id)
    return fn({
      read: (after) => {
        // The status first: a read after the thread stopped then holds its last entries.
        const { status } = recordIn(stores, id)
        const { entries } = stores.transcripts.read(id)
        return { status, entries: entries.filter((e) => e.seq > after) }
      },
    })
  })
}

/** `spindle tree`: children under their parent, continuations after the thread they continue. */
export function databaseTree(database: DatabaseOptions, root?: string): TreeNode[] {
  return withDatabase(database, (stores) => {
    const records = listedThreads(stores.registry, stores.checkpoints)
    return treeOf(records, budgetsOf(stores, records), stores.root, root)
  })
}

function budgetsOf(stores: Stores, records: readonly ThreadListing[]): Map<string, BudgetView> | null {
  try {
    return new Map(records.map((r) => [r.id, budgetOf(stores, stores.root, r.id)]))
  } catch {
    // A ledger that does not add up is `spindle doctor`'s to report; the tree is still worth seeing.
    return null
  }
}

/**
 * `spindle locks`: every lease and which are stale; `apply` reclaims the stale ones (`force`: the
 * live ones too, revoked). A database keeps no locks.log.jsonl: what was reclaimed is in the report.
 */
export function databaseLocks(database: DatabaseOptions, options: LocksOptions = {}): LocksReport {
  return withDatabase(database, (stores) => reviewLocks(stores.leases, options, null))
}
