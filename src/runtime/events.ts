/**
 * The event bus: lifecycle events to host listeners, problems to `onProblem`. Every part reports
 * through it; nothing a listener does can stop the part that told it.
 */
import { SpindleError, describeError } from '../base/errors.js'
import type { LifecycleEvent, LifecycleEventType, Problem } from './api.js'

/** What a part needs to tell the host: a problem it met, or a lifecycle event. */
export interface Reporter {
  report(error: unknown, threadId?: string): void
}
export interface Emitter {
  emit(event: LifecycleEvent): void
}

export class EventBus implements Reporter, Emitter {
  private readonly listeners = new Map<string, Set<(event: LifecycleEvent) => void>>()

  constructor(
    private readonly onLifecycle: ((event: LifecycleEvent) => void) | undefined,
    private readonly onProblem: ((problem: Problem) => void) | undefined,
  ) {}

  on<T extends LifecycleEventType | '*'>(type: T, listener: (event: any) => void): () => void {
    let set = this.listeners.get(type)
    if (!set) this.listeners.set(type, (set = new Set()))
    set.add(listener)
    return () => set.delete(listener)
  }

  emit(event: LifecycleEvent): void {
    const targets = [this.onLifecycle, ...(this.listeners.get(event.type) ?? []), ...(this.listeners.get('*') ?? [])]
    for (const listener of targets) {
      if (!listener) continue
      try {
        listener(event)
      } catch (error) {
        // A failing listener is the host's problem, reported; it must not stop the orchestrator.
        this.report(error)
      }
    }
  }

  report(error: unknown, threadId?: string): void {
    const { code, message } = describeError(error)
    const problem: Problem = { code, message, ...(threadId ? { threadId } : {}) }
    try {
      this.onProblem?.(problem)
    } catch {
      // A failing problem handler must not turn one thread's problem into everyone's.
    }
  }
}

/**
 * Whether the runtime is closing: set once, first thing in `close()`, read by every part that must
 * not start anything new after it (a timer that fires late, a request found mid-poll).
 */
export class Lifecycle {
  closed = false
  /** createRuntime has finished opening the directory (recovery and the first sweep are done). */
  opened = false

  assertOpen(): void {
    if (this.closed) throw new SpindleError('RUNTIME_CLOSED', 'This runtime is closed. Open a new one with createRuntime().')
  }
}
