/**
 * The inspector's source on a PostgreSQL database: the database's stores, opened once when the
 * inspector starts and closed with it, read through the store interfaces as `spindle ls | show |
 * locks` read them, and written only by leaving requests in the inbox, as `spindle approve | deny |
 * answer | cancel | resume --db` do (databaseRequests.ts, the same checks). Like every CLI command
 * it takes no lease and claims no request: the workers on the database carry the decisions out.
 *
 * Changes are announced: every process on the database NOTIFYs when it appends events (a thread
 * spawned, suspended, approved, ended …) or leaves a request, and `watch` passes that on so the
 * page updates at once; the poll stays, for what is not announced (a turn, a lease going stale).
 * A database that stops answering fails each look with DATABASE_UNAVAILABLE, and the next one
 * connects again.
 */
import type { StateEnvelope } from '../../persistence/types.js'
import { isSpindleError } from '../base/errors.js'
import type { BudgetView } from '../runtime/budgetView.js'
import { budgetOf } from '../runtime/budgetView.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import { databaseName } from '../runtime/openPostgresStores.js'
import type { Stores } from '../runtime/stores.js'
import { ApprovalResponseSchema } from '../thread/requests.js'
import { answerQuestionIn, approveIn, cancelIn, denyIn, openRequestIn, resumeIn } from './databaseRequests.js'
import { databasePlace, openDatabase, recordIn } from './databaseStores.js'
import type { InspectorSource, LeftAnswer } from './inspectorSource.js'
import { reviewLocks } from './locks.js'
import { listedThreads } from './threadListing.js'

/** The channels whose news may change what the page shows: thread events, and requests left for threads. */
const WATCHED = new Set(['events', 'requests'])

/**
 * The stores of one look, whose checkpoint reads are kept for the look: listing a thread, showing
 * its state and finding the request it waits at each read its checkpoint, one round trip apiece.
 */
function lookStores(stores: Stores): Stores {
  const loaded = new Map<string, StateEnvelope | null>()
  const checkpoints = Object.create(stores.checkpoints) as Stores['checkpoints']
  checkpoints.load = (id) => {
    if (!loaded.has(id)) loaded.set(id, stores.checkpoints.load(id))
    return loaded.get(id)!
  }
  return { ...stores, checkpoints }
}

/** The answer left for request `requestId` that no worker has claimed, read as the worker will read it. */
function answerLeft(stores: Stores, id: string, requestId: string): LeftAnswer | null {
  const left = stores.inbox.unclaimed(id).find((r) => r.kind === 'approval' && r.requestId === requestId)
  if (!left?.body.ok) return null
  // An answer the worker would reject does not show as given.
  const read = ApprovalResponseSchema.safeParse(left.body.value)
  return read.success ? { approved: read.data.approved ?? null, by: read.data.by ?? null, state: 'waiting' } : null
}

export function databaseSource(database: DatabaseOptions): InspectorSource {
  const listeners = new Set<() => void>()
  const stores = openDatabase(database, (channel) => {
    if (WATCHED.has(channel)) for (const listener of listeners) listener()
  })
  const place = databasePlace(database)
  return {
    kind: 'database',
    name: databaseName(database),
    look() {
      const view = lookStores(stores)
      return {
        threads: listedThreads(view.registry, view.checkpoints),
        leases: reviewLocks(view.leases, {}, null).locks,
        budgets(ids) {
          const budgets = new Map<string, BudgetView>()
          for (const id of ids) {
            try {
              budgets.set(id, budgetOf(view, view.root, id))
            } catch (error) {
              // A thread gone since the listing has no budget to show, as on a directory.
              if (!isSpindleError(error) || error.code !== 'THREAD_NOT_FOUND') throw error
            }
          }
          return budgets
        },
        checkpoint: (id) => view.checkpoints.load(id),
        openApproval(id, status) {
          const open = openRequestIn(view, id, status)
          return open ? { ...open, answer: answerLeft(view, id, open.id) } : null
        },
        requested: (id, kind) => view.inbox.waiting(id, kind),
      }
    },
    transcript(id) {
      recordIn(stores, id)
      return stores.transcripts.read(id).entries
    },
    rejected(id) {
      recordIn(stores, id)
      // The inbox keeps a refused answer's row and the log line saying why, but no store interface
      // reads them back (`spindle show --db` lists none either).
      return null
    },
    approve: (id, approval, by) => approveIn(stores, place, id, approval, by),
    deny: (id, reason, by) => denyIn(stores, place, id, reason, by),
    answer: (id, answer, by) => answerQuestionIn(stores, place, id, answer, by),
    cancel: (id, reason, by) => cancelIn(stores, place, id, reason, by),
    resume: (id, by) => resumeIn(stores, place, id, by),
    watch(listener) {
      listeners.add(listener)
      return () => listeners.delete(listener)
    },
    close() {
      listeners.clear()
      stores.close()
    },
  }
}
