/**
 * A runtime's clean close, as workers that run other people's side effects do it (Temporal's
 * `shutdownGraceTime` and `shutdownSignals`): the tool calls under way when it closes may finish
 * within `timeouts.shutdownGraceMs` and have their results recorded; only what is still running
 * after that is aborted, and the thread's transcript says so, so that the next process tells the
 * model the process shut down rather than crashed. Also the signals the runtime closes on.
 */
import { atDeadline, systemClock } from '../base/clock.js'
import { closeOnSignals } from './shutdownSignals.js'

/** A tool call under way: its intent is recorded, its result is not yet. */
export interface CallUnderWay {
  key: string
  callId: string
  name: string
}

/** The transcript note of a tool call a closing runtime aborted: the next process reads it (intentsOf). */
export const TOOL_ABORTED_AT_SHUTDOWN = 'tool_aborted_at_shutdown'

export class Shutdown {
  /** By thread: a thread runs one tool call at a time. */
  private readonly underWay = new Map<string, CallUnderWay>()
  /** Ends the wait of `drain`: the last call under way settled, or the grace was cut short. */
  private endWait: (() => void) | null = null
  private hurried = false
  private stopListening: (() => void) | null = null

  /** A tool call of `threadId` is under way; the returned function says it no longer is. */
  toolStarted(threadId: string, call: CallUnderWay): () => void {
    const entry = { ...call }
    this.underWay.set(threadId, entry)
    return () => {
      // A restarted thread may have started another call since: that one stays under way.
      if (this.underWay.get(threadId) !== entry) return
      this.underWay.delete(threadId)
      if (this.underWay.size === 0) this.endWait?.()
    }
  }

  /** Whether `threadId` has a tool call under way. */
  runsTool(threadId: string): boolean {
    return this.underWay.has(threadId)
  }

  /**
   * Waits until no tool call is under way, for `graceMs` at most (on the wall clock: it is the
   * process manager's patience it must fit in, not the runtime's time), or until `hurry`. Returns
   * the calls still under way, by thread.
   */
  async drain(graceMs: number): Promise<Map<string, CallUnderWay>> {
    if (this.underWay.size > 0 && graceMs > 0 && !this.hurried) {
      await new Promise<void>((resolve) => {
        const stop = atDeadline(systemClock, Date.now() + graceMs, () => this.endWait?.())
        this.endWait = () => {
          this.endWait = null
          stop()
          resolve()
        }
      })
    }
    return new Map(this.underWay)
  }

  /** Ends the grace now (a second signal while closing): what is still running is aborted. */
  hurry(): void {
    this.hurried = true
    this.endWait?.()
  }

  /** Closes the runtime (`close`) on each of `signals`, until `close()` here. */
  listen(signals: readonly NodeJS.Signals[], runtime: { close(): Promise<void>; closing(): boolean }): void {
    this.stopListening = closeOnSignals({
      signals: new Set(signals),
      close: () => runtime.close(),
      closing: () => runtime.closing(),
      hurry: () => this.hurry(),
    })
  }

  /** Stops listening for signals: a closed runtime is not closed again, nor held by the process. */
  close(): void {
    this.stopListening?.()
    this.stopListening = null
  }
}
