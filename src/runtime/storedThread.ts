/**
 * Threads this runtime does not run, as host code sees them: a handle over their stored state,
 * and the outcome their registry row and last checkpoint say they ended with.
 */
import { SpindleError } from '../base/errors.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import { outcomeOf } from '../../machines/threadOutcome.js'
import type { ThreadRecord, ThreadStatus } from '../../persistence/types.js'
import type { ThreadHandle, ThreadView } from '../thread/threadView.js'
import type { ReplyDelta } from '../../actors/replyDelta.js'
import { noReplies } from './replyStream.js'

/** How a stopped thread ended, from its last checkpoint's context, else from its registry row. */
export function storedOutcome(record: ThreadRecord, context: ThreadContext | null | undefined): ThreadOutcome {
  const status = record.status as ThreadOutcome['status']
  if (context) return outcomeOf(status, context)
  return {
    status,
    cost: record.cost ?? { turns: 0, inputTokens: 0, outputTokens: 0, spend: 0 },
    // Without a checkpoint the retries are not known: the registry row does not keep them.
    retries: 0,
    lastError: null,
    ...(typeof record.result === 'string' ? { result: record.result } : {}),
    ...(record.error ? { error: record.error } : {}),
  }
}

/** A handle of a thread this runtime does not run: its stored state, read once. */
export class StoredThread implements ThreadHandle {
  readonly done: Promise<ThreadOutcome>
  constructor(
    readonly id: string,
    readonly status: ThreadStatus,
    private readonly view: ThreadView | null,
    outcome: ThreadOutcome | null,
    /** How it settles where another worker runs it (a database's threads); without it, `done` rejects. */
    elsewhere?: Promise<ThreadOutcome>,
  ) {
    this.done = outcome
      ? Promise.resolve(outcome)
      : elsewhere ?? Promise.reject(
          new SpindleError(
            'THREAD_NOT_ACTIVE',
            `Thread ${id} is ${status} but no actor runs it in this process. Call rt.recover() to carry it on here.`,
            { details: { threadId: id, status } },
          ),
        )
    this.done.catch(() => {})
  }
  subscribe(listener: (view: ThreadView) => void): () => void {
    if (this.view) listener(this.view)
    return () => {}
  }
  /** Nothing streams here: another process runs the thread, or nothing does. */
  replies(): AsyncIterableIterator<ReplyDelta> {
    return noReplies()
  }
  getSnapshot(): ThreadView {
    if (!this.view) throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${this.id} has no stored snapshot.`)
    return this.view
  }
}
