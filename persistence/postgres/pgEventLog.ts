/**
 * The event log on PostgreSQL: the `events` table beside the registry's, written through the
 * registry's connection so that an event commits in the transaction of the row change it
 * describes.
 *
 * Readers on other hosts resume after an id (`after(cursor)`), so an id must never become visible
 * after a larger one: a reader that has read up to 7 would never see a 6 committed later. A
 * sequence (bigserial) hands ids out outside transactions, so a transaction holding 6 may commit
 * after one holding 7. Here ids come from one counter row, `event_counter`, incremented by the
 * statement that inserts the events: its row lock is held to the commit, so appends commit one
 * after another in id order (PostgreSQL makes a commit visible before it releases the locks, so
 * the next appender's ids are visible only after these). A rolled-back append gives its ids back,
 * never having shown them to anyone; `lastId` is the counter, the last id committed, which a log
 * pruned to nothing keeps.
 *
 * That serialises the appends of every process on the schema, so the lock is held as briefly as
 * possible: inside a registry transaction the events are queued and inserted by the last
 * statement before COMMIT (sent with it: no extra round trip), so the counter is the last lock the
 * transaction takes (no other lock waits behind it, and no deadlock runs through it). A read of the
 * log inside the transaction inserts the queue first, so the transaction sees its own events.
 *
 * Every append also sends `NOTIFY spindle_events_<schema>` (pg_notify) with the new last id as
 * payload, in the same transaction, so it is delivered when (and only if) the events are
 * committed. Readers on other hosts LISTEN to it to read at once instead of polling; the schema in
 * its name keeps installations in two schemas of one database from waking each other.
 */
import type { PgBridge } from './bridge.js'
import { assertRestorable } from '../eventLog.js'
import type { EventLog, NewEvent, StoredEvent } from '../eventLog.js'

/** The channel every append notifies. */
export function eventsChannel(schema: string): string {
  return `spindle_events_${schema}`
}

const APPEND = `WITH counter AS (
    UPDATE event_counter SET last_id = last_id + $5 RETURNING last_id
  ), inserted AS (
    INSERT INTO events (id, thread_id, type, at, data)
    SELECT counter.last_id - $5 + e.n, e.thread_id, e.type, e.at, e.data::json
    FROM counter, unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) WITH ORDINALITY AS e(thread_id, type, at, data, n)
  )
  SELECT pg_notify('spindle_events_' || current_schema(), last_id::text) FROM counter`

/** An event ready to insert: its data already JSON, so a caller's later change to its object changes nothing. */
interface Queued {
  threadId: string
  type: string
  at: number
  data: string
}

/** Where a transaction's events stood when it began: what to put back when it rolls back. */
export interface QueueMark {
  /** Events of the outermost transaction sent by then. */
  sent: number
  /** Events of the outermost transaction appended by then, sent or queued. */
  appended: number
}

export interface EventLogHooks {
  /** Whether a registry transaction is under way (appends are queued to its end). */
  inTransaction(): boolean
  assertOpen(): void
  /** Runs a statement, turning a PostgreSQL failure into the registry's REGISTRY_FAILED. */
  guard<T>(action: string, fn: () => T): T
  /** Checks an event before it is queued; throws the registry's error. */
  check(event: NewEvent): void
}

export class PgEventLog implements EventLog {
  private queue: Queued[] = []
  /** Events the transaction under way has sent so far (a rollback to a savepoint may take some back). */
  private sent: Queued[] = []

  constructor(
    private readonly db: PgBridge,
    private readonly hooks: EventLogHooks,
  ) {}

  append(events: readonly NewEvent[]): void {
    this.hooks.assertOpen()
    if (events.length === 0) return
    for (const event of events) this.hooks.check(event)
    const queued = events.map((e) => ({ threadId: e.threadId, type: e.type, at: e.at, data: JSON.stringify(e.data) ?? '{}' }))
    this.queue.push(...queued)
    if (!this.hooks.inTransaction()) this.hooks.guard('append events', () => this.flush())
  }

  after(after: number, limit: number): StoredEvent[] {
    this.hooks.assertOpen()
    return this.hooks.guard('read events', () => {
      this.flush()
      const rows = this.db.querySync('SELECT id, thread_id, type, at, data FROM events WHERE id > $1 ORDER BY id LIMIT $2', [after, limit < 0 ? null : limit])
      return rows.map((row) => ({ id: row.id as number, threadId: row.thread_id as string, type: row.type as string, at: row.at as number, data: (row.data ?? {}) as Record<string, unknown> }))
    })
  }

  lastId(): number {
    this.hooks.assertOpen()
    return this.hooks.guard('read the last event id', () => {
      this.flush()
      return (this.db.querySync('SELECT last_id FROM event_counter')[0]?.last_id as number | undefined) ?? 0
    })
  }

  prune(options: { before: number; keep: number }): number {
    this.hooks.assertOpen()
    return this.hooks.guard('prune events', () => {
      this.flush()
      // One statement: the newest `keep` are counted from the largest id, as ids have no gaps.
      return this.db.changeSync('DELETE FROM events WHERE at < $1 OR id <= (SELECT max(id) FROM events) - $2', [options.before, options.keep])
    })
  }

  restore(events: readonly StoredEvent[], lastId: number): void {
    this.hooks.assertOpen()
    this.hooks.guard('restore events', () => {
      this.flush()
      for (const event of events) this.hooks.check(event)
      // The counter row locked first, as every append locks it: no append numbers an event between
      // the check and the insert, and the ids commit with the counter past them.
      const run = () => {
        const last = (this.db.querySync('SELECT last_id FROM event_counter FOR UPDATE')[0]?.last_id as number | undefined) ?? 0
        assertRestorable(events, last, `schema ${this.db.schema ?? 'public'}`)
        this.db.execSync(
          `WITH inserted AS (
             INSERT INTO events (id, thread_id, type, at, data)
             SELECT e.id, e.thread_id, e.type, e.at, e.data::json FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[]) AS e(id, thread_id, type, at, data)
           )
           UPDATE event_counter SET last_id = GREATEST(last_id, $6::bigint, (SELECT coalesce(max(id), 0) FROM unnest($1::bigint[]) AS i(id)))`,
          [events.map((e) => e.id), events.map((e) => e.threadId), events.map((e) => e.type), events.map((e) => e.at), events.map((e) => JSON.stringify(e.data) ?? '{}'), lastId],
        )
      }
      if (this.hooks.inTransaction()) run()
      else this.db.transactionSync(run)
    })
  }

  /** Sends the queued events: at once outside a transaction, else with the transaction's next statement. */
  flush(): void {
    if (this.queue.length === 0) return
    const events = this.queue
    this.queue = []
    if (this.hooks.inTransaction()) this.sent.push(...events)
    this.db.execSync(APPEND, [events.map((e) => e.threadId), events.map((e) => e.type), events.map((e) => e.at), events.map((e) => e.data), events.length])
  }

  /** A transaction begins (`outermost`: no other is under way). */
  mark(outermost: boolean): QueueMark {
    if (outermost) this.sent = []
    return { sent: this.sent.length, appended: this.sent.length + this.queue.length }
  }

  /**
   * A transaction begun at `mark` rolled back. What it sent the database rolls back, and with it
   * whatever the enclosing transaction had queued before it began and a flush inside it sent: that
   * is queued again. What it queued itself goes.
   */
  rollbackTo(mark: QueueMark): void {
    const appended = [...this.sent, ...this.queue]
    this.sent = appended.slice(0, mark.sent)
    this.queue = appended.slice(mark.sent, mark.appended)
  }
}
