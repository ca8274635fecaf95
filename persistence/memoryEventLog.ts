/**
 * The event log in an array, for the memory registry (persistence/memoryRegistry.ts): the same
 * numbering and pruning as the SQLite one, within one process.
 */
import { assertRestorable } from './eventLog.js'
import type { EventLog, NewEvent, StoredEvent } from './eventLog.js'

export class MemoryEventLog implements EventLog {
  private rows: StoredEvent[] = []
  private nextId = 1

  /**
   * @param remember - Records how to undo an append made inside the registry's transaction, so a
   *   rolled-back transaction takes its events with it.
   */
  constructor(
    private readonly assertOpen: () => void,
    private readonly remember: (undo: () => void) => void,
  ) {}

  append(events: readonly NewEvent[]): void {
    this.assertOpen()
    if (events.length === 0) return
    const count = this.rows.length
    const firstId = this.nextId
    for (const event of events) {
      // Copied as JSON, as SQLite stores it: a caller's later change to its object changes nothing here.
      this.rows.push({ id: this.nextId++, threadId: event.threadId, type: event.type, at: event.at, data: JSON.parse(JSON.stringify(event.data)) as Record<string, unknown> })
    }
    this.remember(() => {
      this.rows.length = count
      this.nextId = firstId
    })
  }

  after(after: number, limit: number): StoredEvent[] {
    this.assertOpen()
    let low = 0
    let high = this.rows.length
    // Ids increase along the array: the first one past `after` by bisection.
    while (low < high) {
      const mid = (low + high) >>> 1
      if (this.rows[mid]!.id <= after) low = mid + 1
      else high = mid
    }
    return this.rows.slice(low, low + limit).map((row) => ({ ...row, data: structuredClone(row.data) }))
  }

  lastId(): number {
    this.assertOpen()
    // Not the last row's: a log pruned to nothing still says how far it had got.
    return this.nextId - 1
  }

  restore(events: readonly StoredEvent[], lastId: number): void {
    this.assertOpen()
    assertRestorable(events, this.nextId - 1, 'this process (memory)')
    const count = this.rows.length
    const nextId = this.nextId
    for (const event of events) this.rows.push({ id: event.id, threadId: event.threadId, type: event.type, at: event.at, data: JSON.parse(JSON.stringify(event.data)) as Record<string, unknown> })
    this.nextId = Math.max(this.nextId, (events.at(-1)?.id ?? 0) + 1, lastId + 1)
    this.remember(() => {
      this.rows.length = count
      this.nextId = nextId
    })
  }

  prune(options: { before: number; keep: number }): number {
    this.assertOpen()
    const floor = this.rows.length - options.keep
    const kept = this.rows.filter((row, index) => index >= floor && row.at >= options.before)
    const dropped = this.rows.length - kept.length
    this.rows = kept
    return dropped
  }
}
