/**
 * Where the inspector reads threads from and leaves decisions: a data directory
 * (inspectorDirectory.ts) or a PostgreSQL database (inspectorDatabase.ts). The page, its API and
 * its events channel are the same on both: they are shaped from what a source reads
 * (inspectorData.ts), and each button goes through the same function, with the same checks, as the
 * CLI command of that place. Which source serves is decided once per inspector (inspector.ts).
 */
import type { StateEnvelope, ThreadStatus, TranscriptEntry } from '../../persistence/types.js'
import type { BudgetView } from '../runtime/budgetView.js'
import type { RejectedAnswer } from '../thread/approvalRecords.js'
import type { OpenRequest } from '../thread/requests.js'
import type { LockView } from './locks.js'
import type { Approval, RequestWritten } from './operatorActions.js'
import type { ThreadListing } from './threadListing.js'

/**
 * An answer left for an open request that no runtime has acted on yet: `waiting` while nobody has
 * taken it, `taken` once a runtime has claimed it. `approved` null: the answer to a question.
 */
export interface LeftAnswer {
  approved: boolean | null
  by: string | null
  state: 'waiting' | 'taken'
}

/** The request a suspended thread waits at, with the answer left for it (null: none yet). */
export type OpenApproval = OpenRequest & { answer: LeftAnswer | null }

/**
 * One look at every thread, for one overview. A read that fails throws; per-thread reads
 * (`checkpoint`, `openApproval`) are told apart by the caller, which shows one thread's damage on
 * that thread and a source that does not answer on the whole page.
 */
export interface SourceLook {
  /** The threads as `spindle ls` lists them, oldest first. */
  threads: ThreadListing[]
  /** Every lease, live or stale. */
  leases: LockView[]
  /** The budgets of `ids`, as `rt.budget` gives them. */
  budgets(ids: readonly string[]): Map<string, BudgetView>
  checkpoint(id: string): StateEnvelope | null
  /** The request thread `id`, whose row says `status`, waits at, or null. */
  openApproval(id: string, status: ThreadStatus): OpenApproval | null
  /** Whether a cancel or resume request was left for the thread and no runtime has taken it yet. */
  requested(id: string, kind: 'cancel' | 'resume'): boolean
}

export interface InspectorSource {
  readonly kind: 'directory' | 'database'
  /** How the page's header names it (a database without its password). */
  readonly name: string
  look(): SourceLook
  /** The thread's verified transcript; THREAD_NOT_FOUND for a thread the source does not have. */
  transcript(id: string): TranscriptEntry[]
  /** The answers a runtime rejected, or null where the source keeps none the inspector can read. */
  rejected(id: string): RejectedAnswer[] | null
  approve(id: string, approval: Approval, by: string): RequestWritten
  deny(id: string, reason: string | undefined, by: string): RequestWritten
  answer(id: string, answer: unknown, by: string): RequestWritten
  cancel(id: string, reason: string, by: string): RequestWritten
  resume(id: string, by: string): RequestWritten
  /**
   * Calls `listener` when other processes announce that threads changed (a database's NOTIFY),
   * sooner than the next poll; returns how to stop. Absent where nothing announces: the poll alone.
   */
  watch?(listener: () => void): () => void
  close(): void
}
