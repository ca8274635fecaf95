/**
 * Streamed replies: the fan-out of what model calls emit to the host's listeners (`rt.onReply`)
 * and iterators (`rt.replies`, `handle.replies`). Nothing here is recorded: the transcript keeps
 * the finished reply alone, so replay and recovery never see a delta. A call nobody listens to
 * gets no sink at all (`sink` returns null), and streams nothing.
 */
import type { ErrorCategory } from '../../machines/threadEvents.js'
import type { ModelStreamPart } from '../../actors/model.js'
import type { ReplyAttempt, ReplyDelta, ReplyDiscardReason, ReplySink } from '../../actors/replyDelta.js'

/**
 * How many deltas an iterator keeps for a consumer that has not asked for them yet. Pieces of text
 * (and of a tool call's input) of one attempt that arrive back to back are joined into one delta
 * while they wait, so a slow consumer gets fewer, longer pieces and the same text; past this many
 * waiting deltas the oldest are dropped.
 */
export const REPLY_BUFFER_LIMIT = 1000

type Listener = (delta: ReplyDelta) => void

export interface ReplyStreamDeps {
  /** Resolves once what was appended so far is durable (the group commit's `whenLogged`). */
  whenLogged(): Promise<void>
  /** Where a listener's exception goes (the event bus's `report`). */
  report(error: unknown, threadId: string): void
}

export interface RepliesOptions {
  /** Only this thread's deltas (default: every thread's). */
  threadId?: string
  /** Ends the iterator when aborted. */
  signal?: AbortSignal
}

/** An iterator's queue: what it was given and its consumer has not taken yet, at most REPLY_BUFFER_LIMIT. */
class DeltaQueue implements AsyncIterableIterator<ReplyDelta> {
  private readonly buffered: ReplyDelta[] = []
  private head = 0
  private waiting: ((result: IteratorResult<ReplyDelta>) => void) | null = null
  private ended = false

  constructor(private readonly onEnd: () => void) {}

  push = (delta: ReplyDelta): void => {
    if (this.ended) return
    if (this.waiting) {
      const resolve = this.waiting
      this.waiting = null
      resolve({ value: delta, done: false })
      return
    }
    const last = this.buffered.length > this.head ? this.buffered[this.buffered.length - 1]! : null
    if (last && joins(last, delta)) {
      this.buffered[this.buffered.length - 1] = { ...last, text: (last as { text: string }).text + (delta as { text: string }).text } as ReplyDelta
      return
    }
    this.buffered.push(delta)
    if (this.buffered.length - this.head > REPLY_BUFFER_LIMIT) this.head++
    // Drops what was taken, now and then: the array does not grow with a consumer that keeps up.
    if (this.head > 1024 && this.head * 2 > this.buffered.length) {
      this.buffered.splice(0, this.head)
      this.head = 0
    }
  }

  /** No more deltas: the consumer gets what is buffered, then the end. */
  end(): void {
    if (this.ended) return
    this.ended = true
    this.onEnd()
    if (this.waiting) {
      const resolve = this.waiting
      this.waiting = null
      resolve({ value: undefined, done: true })
    }
  }

  next(): Promise<IteratorResult<ReplyDelta>> {
    if (this.head < this.buffered.length) {
      const value = this.buffered[this.head]!
      this.head++
      if (this.head === this.buffered.length) {
        this.buffered.length = 0
        this.head = 0
      }
      return Promise.resolve({ value, done: false })
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true })
    return new Promise((resolve) => (this.waiting = resolve))
  }

  return(): Promise<IteratorResult<ReplyDelta>> {
    this.buffered.length = 0
    this.head = 0
    this.end()
    return Promise.resolve({ value: undefined, done: true })
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<ReplyDelta> {
    return this
  }
}

/** Whether `next` continues the text (or tool input) of the delta buffered just before it. */
function joins(last: ReplyDelta, next: ReplyDelta): boolean {
  if (last.type !== next.type || last.threadId !== next.threadId || last.turn !== next.turn || last.attempt !== next.attempt) return false
  if (next.type === 'text') return true
  return next.type === 'tool_input' && (last as { callId: string }).callId === next.callId
}

/** One attempt's sink: open until its reply is recorded or discarded. */
class AttemptSink implements ReplySink {
  private open = true

  constructor(
    private readonly stream: ReplyStream,
    readonly at: ReplyAttempt,
  ) {}

  emit = (part: ModelStreamPart): void => {
    if (!this.open) return
    // One object for every listener; the fields are copied so an adapter's part is not kept.
    switch (part.type) {
      case 'text':
        if (typeof part.text === 'string' && part.text !== '') this.stream.publish({ ...this.at, type: 'text', text: part.text })
        return
      case 'tool_call':
        this.stream.publish({ ...this.at, type: 'tool_call', callId: String(part.callId), toolName: String(part.toolName) })
        return
      case 'tool_input':
        if (typeof part.text === 'string' && part.text !== '') this.stream.publish({ ...this.at, type: 'tool_input', callId: String(part.callId), text: part.text })
        return
    }
  }

  recorded(): void {
    if (!this.close()) return
    this.stream.afterLogged(this.at)
  }

  discarded(reason: ReplyDiscardReason, category?: ErrorCategory): void {
    if (!this.close()) return
    this.stream.publish(category ? { ...this.at, type: 'reply_discarded', reason, category } : { ...this.at, type: 'reply_discarded', reason })
  }

  private close(): boolean {
    if (!this.open) return false
    this.open = false
    this.stream.closed(this)
    return true
  }
}

/** An iterator that has ended: the replies of a thread that does not run here. */
export function noReplies(): AsyncIterableIterator<ReplyDelta> {
  const queue = new DeltaQueue(() => {})
  queue.end()
  return queue
}

export class ReplyStream {
  /** Listeners of every thread's deltas: `onReply` and unfiltered iterators. */
  private readonly everyThread = new Set<Listener>()
  /** Listeners of one thread's deltas, by thread id. */
  private readonly byThread = new Map<string, Set<Listener>>()
  /** Attempts streaming now, by thread: discarded if their thread stops without saying. */
  private readonly attempts = new Map<string, Set<AttemptSink>>()
  /** Per thread, the last `reply_recorded` still waiting for the disk: a thread's iterators end after it. */
  private readonly logging = new Map<string, Promise<void>>()
  private readonly queues = new Set<DeltaQueue>()
  private closedFlag = false

  constructor(private readonly deps: ReplyStreamDeps) {}

  /** A sink for a model call of `threadId`, or null when nobody listens to that thread. */
  sink(threadId: string, at: { turn: number; attempt: number }): ReplySink | null {
    if (this.everyThread.size === 0 && !this.byThread.has(threadId)) return null
    const sink = new AttemptSink(this, { threadId, turn: at.turn, attempt: at.attempt })
    let open = this.attempts.get(threadId)
    if (!open) this.attempts.set(threadId, (open = new Set()))
    open.add(sink)
    return sink
  }

  onReply(listener: Listener): () => void {
    this.everyThread.add(listener)
    return () => void this.everyThread.delete(listener)
  }

  /** Every thread's deltas (or one thread's), until `signal`, `return()` or the runtime closes. */
  replies(options: RepliesOptions = {}): AsyncIterableIterator<ReplyDelta> {
    const { threadId, signal } = options
    let unlisten = (): void => {}
    const onAbort = (): void => queue.end()
    const queue = new DeltaQueue(() => {
      unlisten()
      signal?.removeEventListener('abort', onAbort)
      this.queues.delete(queue)
    })
    if (this.closedFlag || signal?.aborted) {
      queue.end()
      return queue
    }
    this.queues.add(queue)
    unlisten = threadId === undefined ? this.onReply(queue.push) : this.onThread(threadId, queue.push)
    signal?.addEventListener('abort', onAbort, { once: true })
    return queue
  }

  /** One live thread's deltas, ending once `stopped` settles (and its last reply is told). */
  ofThread(threadId: string, stopped: Promise<unknown>): AsyncIterableIterator<ReplyDelta> {
    const queue = this.replies({ threadId }) as DeltaQueue
    const end = (): void => void (this.logging.get(threadId) ?? Promise.resolve()).then(() => queue.end())
    stopped.then(end, end)
    return queue
  }

  /** Thread `threadId` stopped here: an attempt it left open says it is discarded. */
  threadStopped(threadId: string, closing: boolean): void {
    const open = this.attempts.get(threadId)
    if (!open) return
    for (const sink of [...open]) sink.discarded(closing ? 'closed' : 'cancelled')
  }

  /** The runtime closed: iterators end once their consumers have what they were given. */
  close(): void {
    this.closedFlag = true
    for (const queue of [...this.queues]) queue.end()
  }

  /** @internal */
  publish(delta: ReplyDelta): void {
    const one = this.byThread.get(delta.threadId)
    if (one) for (const listener of one) this.tell(listener, delta)
    for (const listener of this.everyThread) this.tell(listener, delta)
  }

  /** @internal A recorded reply is told once it is durable; one the disk refused is discarded. */
  afterLogged(at: ReplyAttempt): void {
    const told = this.deps.whenLogged().then(
      () => this.publish({ ...at, type: 'reply_recorded' }),
      () => this.publish({ ...at, type: 'reply_discarded', reason: 'failed' }),
    )
    this.logging.set(at.threadId, told)
    void told.then(() => {
      if (this.logging.get(at.threadId) === told) this.logging.delete(at.threadId)
    })
  }

  /** @internal */
  closed(sink: AttemptSink): void {
    const open = this.attempts.get(sink.at.threadId)
    if (!open) return
    open.delete(sink)
    if (open.size === 0) this.attempts.delete(sink.at.threadId)
  }

  private onThread(threadId: string, listener: Listener): () => void {
    let set = this.byThread.get(threadId)
    if (!set) this.byThread.set(threadId, (set = new Set()))
    set.add(listener)
    return () => {
      set.delete(listener)
      if (set.size === 0 && this.byThread.get(threadId) === set) this.byThread.delete(threadId)
    }
  }

  private tell(listener: Listener, delta: ReplyDelta): void {
    try {
      listener(delta)
    } catch (error) {
      // A failing listener is the host's problem, reported; the thread streams on.
      this.deps.report(error, delta.threadId)
    }
  }
}
