/**
 * The event log: an append-only list of what happened to the threads of a data directory, kept
 * beside the registry rows it describes (each backend's log shares its registry's transactions).
 * Knows nothing of what an event means: a type name, a thread, a time and a JSON payload.
 */
import { SpindleError } from '../src/base/errors.js'

/** An event as it is appended: the registry backend numbers it. */
export interface NewEvent {
  threadId: string
  /** The event's name (e.g. 'thread.approved'); stable, since readers branch on it. */
  type: string
  /** ms since epoch */
  at: number
  /** The event's other fields, stored as JSON. */
  data: Record<string, unknown>
}

/** An event as it is read back, with its place in the log. */
export interface StoredEvent extends NewEvent {
  /** Increases with every append and is never reused, even after pruning. */
  id: number
}

export interface EventLog {
  /**
   * Appends `events`, in order, inside the registry transaction under way if there is one (so an
   * event commits with the row change it describes), else in a transaction of its own.
   */
  append(events: readonly NewEvent[]): void
  /** Up to `limit` events with an id greater than `after`, oldest first. */
  after(after: number, limit: number): StoredEvent[]
  /** The id of the newest event, or 0 when the log is empty (ever, or pruned to nothing). */
  lastId(): number
  /**
   * Drops the events older than `before` (ms since epoch) and all but the newest `keep`; returns
   * how many went. Ids are not reused: a reader's position stays valid.
   */
  prune(options: { before: number; keep: number }): number
  /**
   * Writes another log's events with their own ids (a copy to another backend: `spindle migrate`),
   * in one transaction, and raises the last id handed out to `lastId` if it is below: a reader's
   * cursor from the other log stays valid here, and new events go on past it. Every id must be
   * larger than this log's `lastId()`; otherwise REGISTRY_FAILED, and nothing is written.
   */
  restore(events: readonly StoredEvent[], lastId: number): void
}

/** Refuses a restore whose ids this log handed out already. */
export function assertRestorable(events: readonly StoredEvent[], lastId: number, where: string): void {
  let previous = lastId
  for (const event of events) {
    if (!Number.isSafeInteger(event.id) || event.id <= previous) {
      throw new SpindleError(
        'REGISTRY_FAILED',
        `Cannot restore event ${event.id} into the event log of ${where}: its ids must be whole numbers, increasing, and past the last id it handed out (${previous}). Nothing was written.`,
        { details: { id: event.id, lastId: previous } },
      )
    }
    previous = event.id
  }
}
