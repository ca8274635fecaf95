/**
 * The thread event stream: every lifecycle change of every thread of the data directory, from
 * whichever process made it. Writing: each change is staged with the registry change it describes
 * (GroupCommit), so it commits in the same transaction and is dropped with it when the thread was
 * lost to another process. Reading: the registry's event log, read after a cursor — every
 * `events.pollMs`, and at once when this process has appended — by async iterators
 * (`rt.events()`) and listeners (`rt.on('thread.…')`). Old events are pruned (`events.retentionDays`,
 * `events.maxEvents`).
 */
import type { Clock } from '../base/clock.js'
import { SpindleError } from '../base/errors.js'
import type { Config } from '../../config/schema.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { ThreadEvent as MachineEvent } from '../../machines/threadEvents.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { NewEvent, StoredEvent } from '../../persistence/eventLog.js'
import type { Registry, ThreadStatus } from '../../persistence/types.js'
import type { Lifecycle, Reporter } from './events.js'
import { STREAM_EVENT_TYPES, eventOfDecision, eventsOfTransition, toStreamEvent } from './streamEvents.js'
import type { EventsOptions, ThreadStreamEvent, ThreadStreamEventType } from './streamEvents.js'

export interface EventStreamDeps {
  registry: Pick<Registry, 'events'>
  commit: Pick<GroupCommit, 'stageRegistry'>
  owner: { id: string; pid: number; host: string }
  clock: Clock
  config: Config
  bus: Reporter
  life: Lifecycle
}

/** Events read from the log at once: a reader far behind catches up page by page. */
const PAGE = 256
/** How often the log is pruned while the runtime runs (and once when it opens). */
const PRUNE_EVERY_MS = 10 * 60_000
const DAY_MS = 24 * 60 * 60_000

interface Reader {
  cursor: number
  wants(row: StoredEvent): boolean
}

interface Listener extends Reader {
  deliver(event: ThreadStreamEvent): void
}

function cursorOf(after: string | undefined, fallback: () => number): number {
  if (after === undefined) return fallback()
  if (typeof after !== 'string' || !/^\d{1,15}$/.test(after)) {
    throw new SpindleError('INVALID_OPTIONS', `events: after must be a cursor taken from an event (got ${JSON.stringify(after)}).`, { details: { field: 'after' } })
  }
  return Number(after)
}

function filterOf(options: EventsOptions): (row: StoredEvent) => boolean {
  const { threadId, types } = options
  if (types !== undefined) {
    for (const type of types) {
      if (!STREAM_EVENT_TYPES.has(type)) {
        throw new SpindleError('INVALID_OPTIONS', `events: ${JSON.stringify(type)} is no event type; the types are ${[...STREAM_EVENT_TYPES].join(', ')}.`, {
          details: { field: 'types' },
        })
      }
    }
  }
  const only = types ? new Set<string>(types) : null
  return (row) => (threadId === undefined || row.threadId === threadId) && (only === null || only.has(row.type))
}

export class EventStream {
  private readonly listeners = new Set<Listener>()
  /** Iterators waiting for the log to grow: woken by the poll, by this process's appends, by close. */
  private readonly waiting = new Set<() => void>()
  private poll: NodeJS.Timeout | null = null
  private pruning: NodeJS.Timeout | null = null
  private woken = false
  private closed = false

  constructor(private readonly deps: EventStreamDeps) {}

  // ── Writing: each change staged with the registry change it describes ──

  /** A checkpointed transition of a live thread (threadServices' `observe`). */
  observe(threadId: string, snapshot: { value: unknown; context: ThreadContext }, previous: { status: ThreadStatus | null; value: unknown }): void {
    const events = eventsOfTransition(threadId, this.deps.clock.now(), snapshot, previous)
    if (events) this.stage(threadId, events)
  }

  /** A decision that wakes a suspended thread, before the thread acts on it (decisions.ts `wake`). */
  decided(threadId: string, context: ThreadContext, note: [string, unknown] | null, event: MachineEvent): void {
    const decided = eventOfDecision(threadId, context, note, event)
    if (decided) this.stage(threadId, [decided])
  }

  /** A new thread, staged with its registration (threadStarter.ts). */
  spawned(threadId: string, fields: { directive: string; parentId: string | null; previousThreadId: string | null }): void {
    this.stage(threadId, [{ threadId, type: 'thread.spawned', at: this.deps.clock.now(), data: fields }])
  }

  /** A thread ended in `error` without a transition: its files are damaged, or recovery could not read them. */
  failed(threadId: string, error: { code: string; message: string }): void {
    this.stage(threadId, [{ threadId, type: 'thread.error', at: this.deps.clock.now(), data: { error: { code: error.code, message: error.message } } }])
  }

  /** This process carries on a thread another process left (recovery at open, orphan takeover). */
  takenOver(threadId: string, at: number): void {
    const { id, pid, host } = this.deps.owner
    this.stage(threadId, [{ threadId, type: 'thread.taken_over', at, data: { owner: id, pid, host } }])
  }

  private stage(threadId: string, events: NewEvent[]): void {
    this.deps.commit.stageRegistry(threadId, { events })
  }

  // ── Reading ──

  /** `rt.events()`: an async iterator over the log after a cursor, filtered. */
  iterate(options: EventsOptions = {}): AsyncIterableIterator<ThreadStreamEvent> {
    this.deps.life.assertOpen()
    const reader: Reader = { cursor: cursorOf(options.after, () => this.lastId()), wants: filterOf(options) }
    const buffered: ThreadStreamEvent[] = []
    let done = options.signal?.aborted ?? false
    let wake: (() => void) | null = null
    const finish = (): void => {
      done = true
      wake?.()
    }
    options.signal?.addEventListener('abort', finish, { once: true })
    const end = (): IteratorResult<ThreadStreamEvent> => {
      options.signal?.removeEventListener('abort', finish)
      return { done: true, value: undefined }
    }
    const next = async (): Promise<IteratorResult<ThreadStreamEvent>> => {
      for (;;) {
        if (done || this.closed) return end()
        const event = buffered.shift()
        if (event) return { done: false, value: event }
        if (this.readInto(reader, buffered)) continue
        await new Promise<void>((resolve) => {
          wake = resolve
          this.waiting.add(resolve)
          this.schedule()
        })
        wake = null
      }
    }
    const iterator: AsyncIterableIterator<ThreadStreamEvent> = {
      next,
      return: async () => {
        finish()
        return end()
      },
      [Symbol.asyncIterator]: () => iterator,
    }
    return iterator
  }

  /** `rt.on('thread.…')`: `listener` gets the events of `type` (or 'thread.*': all) from now on. */
  listen(type: ThreadStreamEventType | 'thread.*', listener: (event: ThreadStreamEvent) => void): () => void {
    if (type !== 'thread.*') filterOf({ types: [type] })
    const entry: Listener = {
      cursor: this.lastId(),
      wants: (row) => type === 'thread.*' || row.type === type,
      deliver: listener,
    }
    this.listeners.add(entry)
    this.schedule()
    return () => {
      this.listeners.delete(entry)
      this.schedule()
    }
  }

  /** This process appended events: its readers read them now rather than at the next poll. */
  wake(): void {
    if (this.woken || this.closed) return
    this.woken = true
    // Not inside the round that committed them: readers run on a turn of their own.
    setImmediate(() => {
      this.woken = false
      this.tick()
    })
  }

  /** Prunes now and every PRUNE_EVERY_MS. */
  start(): void {
    this.prune()
    this.pruning = setInterval(() => this.prune(), PRUNE_EVERY_MS)
    this.pruning.unref()
  }

  /** Ends every iterator (done) and stops polling; listeners hear nothing more. */
  close(): void {
    if (this.closed) return
    // Listeners hear what was committed up to the close; iterators end (a host resumes from its last cursor).
    this.tick()
    this.closed = true
    this.listeners.clear()
    if (this.pruning) clearInterval(this.pruning)
    this.pruning = null
    this.tick()
  }

  private tick(): void {
    const waiting = [...this.waiting]
    this.waiting.clear()
    for (const resolve of waiting) resolve()
    // Iterators still reading wait again (and schedule); one its host stopped reading keeps nothing alive.
    this.schedule()
    if (this.closed) return
    for (const listener of [...this.listeners]) {
      const events: ThreadStreamEvent[] = []
      // Drained page by page: a listener is pushed to, so it catches up at once.
      while (this.readInto(listener, events)) {
        for (const event of events.splice(0)) {
          if (!this.listeners.has(listener)) break
          try {
            listener.deliver(event)
          } catch (error) {
            // A failing listener is the host's problem, reported; the others still hear.
            this.deps.bus.report(error, event.threadId)
          }
        }
      }
    }
  }

  /** Reads one page after the reader's cursor into `into`; false when the log had nothing new. */
  private readInto(reader: Reader, into: ThreadStreamEvent[]): boolean {
    let rows: StoredEvent[]
    try {
      rows = this.deps.registry.events.after(reader.cursor, PAGE)
    } catch (error) {
      // Tried again at the next poll; the reader's place is kept.
      this.deps.bus.report(error)
      return false
    }
    if (rows.length === 0) return false
    reader.cursor = rows.at(-1)!.id
    for (const row of rows) if (reader.wants(row)) into.push(toStreamEvent(row))
    return true
  }

  /** Polls while anyone reads; the timer keeps the process alive only while an iterator waits. */
  private schedule(): void {
    const needed = !this.closed && (this.listeners.size > 0 || this.waiting.size > 0)
    if (!needed) {
      if (this.poll) clearInterval(this.poll)
      this.poll = null
      return
    }
    this.poll ??= setInterval(() => this.tick(), this.deps.config.events.pollMs)
    if (this.waiting.size > 0) this.poll.ref()
    else this.poll.unref()
  }

  private lastId(): number {
    return this.deps.registry.events.lastId()
  }

  private prune(): void {
    const { retentionDays, maxEvents } = this.deps.config.events
    try {
      this.deps.registry.events.prune({ before: this.deps.clock.now() - retentionDays * DAY_MS, keep: maxEvents })
    } catch (error) {
      this.deps.bus.report(error)
    }
  }
}
