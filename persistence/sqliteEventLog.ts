/**
 * The event log on SQLite: the `events` table of the registry database (migration 6), written
 * through the registry's connection so that an event commits in the transaction of the row change
 * it describes.
 */
import type Database from 'better-sqlite3'
import { assertRestorable } from './eventLog.js'
import type { EventLog, NewEvent, StoredEvent } from './eventLog.js'

interface EventRow {
  id: number
  thread_id: string
  type: string
  at: number
  data: string
}

function toEvent(row: EventRow): StoredEvent {
  let data: Record<string, unknown>
  try {
    data = JSON.parse(row.data) as Record<string, unknown>
  } catch {
    // A damaged cell must not stop every reader at this row: the event is read without its fields.
    data = {}
  }
  return { id: row.id, threadId: row.thread_id, type: row.type, at: row.at, data }
}

export class SqliteEventLog implements EventLog {
  private readonly insert: Database.Statement<[string, string, number, string]>
  private readonly select: Database.Statement<[number, number], EventRow>
  private readonly last: Database.Statement<[], { id: number | null }>
  private readonly pruneOld: (before: number, keep: number) => number
  private readonly appendMany: (events: readonly NewEvent[]) => void
  private readonly restoreMany: (events: readonly StoredEvent[], lastId: number) => void

  /** @param guard - Runs a statement, turning a SQLite failure into the registry's REGISTRY_FAILED. */
  constructor(
    db: Database.Database,
    private readonly guard: <T>(action: string, fn: () => T) => T,
  ) {
    this.insert = db.prepare('INSERT INTO events (thread_id, type, at, data) VALUES (?, ?, ?, ?)')
    this.select = db.prepare('SELECT id, thread_id, type, at, data FROM events WHERE id > ? ORDER BY id LIMIT ?')
    // sqlite_sequence too, not MAX(id) alone: a log pruned to nothing, or restored with a last id
    // past its events, still says how far it had got.
    this.last = db.prepare(`SELECT max(COALESCE((SELECT MAX(id) FROM events), 0), COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)) AS id`)
    // Two statements, so that each uses an index (at; the rowid) instead of one scan for an OR.
    const byAge = db.prepare<[number]>('DELETE FROM events WHERE at < ?')
    const byCount = db.prepare<[number]>('DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?')
    this.pruneOld = db.transaction((before: number, keep: number) => byAge.run(before).changes + byCount.run(keep).changes)
    // Nested inside a registry transaction better-sqlite3 makes this a savepoint: one commit either way.
    this.appendMany = db.transaction((events: readonly NewEvent[]) => {
      for (const event of events) this.insert.run(event.threadId, event.type, event.at, JSON.stringify(event.data))
    })
    const insertWithId = db.prepare<[number, string, string, number, string]>('INSERT INTO events (id, thread_id, type, at, data) VALUES (?, ?, ?, ?, ?)')
    // An explicit id raises sqlite_sequence by itself; a last id past every event (the other log
    // was pruned) is written there, where AUTOINCREMENT takes the next id from.
    const raiseSequence = db.prepare<[number]>(`UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'events'`)
    const startSequence = db.prepare<[number]>(`INSERT INTO sqlite_sequence (name, seq) SELECT 'events', ? WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')`)
    this.restoreMany = db.transaction((events: readonly StoredEvent[], lastId: number) => {
      assertRestorable(events, this.last.get()?.id ?? 0, 'the registry')
      for (const event of events) insertWithId.run(event.id, event.threadId, event.type, event.at, JSON.stringify(event.data))
      if (raiseSequence.run(lastId).changes === 0) startSequence.run(lastId)
    })
  }

  restore(events: readonly StoredEvent[], lastId: number): void {
    this.guard('restore events', () => this.restoreMany(events, lastId))
  }

  append(events: readonly NewEvent[]): void {
    if (events.length === 0) return
    this.guard('append events', () => this.appendMany(events))
  }

  after(after: number, limit: number): StoredEvent[] {
    return this.guard('read events', () => this.select.all(after, limit)).map(toEvent)
  }

  lastId(): number {
    return this.guard('read the last event id', () => this.last.get()?.id ?? 0)
  }

  prune(options: { before: number; keep: number }): number {
    return this.guard('prune events', () => this.pruneOld(options.before, options.keep))
  }
}
