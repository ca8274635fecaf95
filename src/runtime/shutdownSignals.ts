/**
 * The process signals on which open runtimes close by themselves (`shutdownSignals`, SIGINT and
 * SIGTERM by default). A process stopped by one — a deploy, `docker stop`, Ctrl-C, a file watcher
 * restarting it — then stops its threads where they stand, as `rt.close()` does, instead of dying
 * mid-step: the next process counts no crash against them and tells no model that its tool call
 * crashed.
 *
 * One listener per signal for the whole process, however many runtimes are open, put first so that
 * it sees every other listener still in place. When the runtimes have closed it leaves the process
 * to whoever else listens: a host that listens itself (like the README's host program, which exits
 * 0) decides what happens next. When nobody else does, the signal is raised again, and the process
 * ends as it would have without spindle, only after a clean close. A second signal while closing
 * ends the grace of the tool calls under way at once.
 */
import os from 'node:os'
import { SpindleError } from '../base/errors.js'

/** What a runtime gives the listeners: how to close it, whether it is closing, how to hurry a close. */
export interface SignalCloser {
  readonly signals: ReadonlySet<NodeJS.Signals>
  close(): Promise<void>
  closing(): boolean
  hurry(): void
}

/** Signals a process cannot catch: a listener for them fails (or never runs). */
const UNCATCHABLE = new Set(['SIGKILL', 'SIGSTOP'])

/** The signals a runtime closes on when its options name none. */
export const DEFAULT_SHUTDOWN_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM']

const closers = new Set<SignalCloser>()
const listeners = new Map<NodeJS.Signals, () => void>()
/** Signals raised again once the runtimes closed; a second one while that is pending is not. */
const reraising = new Set<NodeJS.Signals>()

/** `signals` as given to createRuntime, checked: a list of catchable signal names. */
export function validShutdownSignals(signals: unknown): NodeJS.Signals[] {
  if (signals === undefined) return [...DEFAULT_SHUTDOWN_SIGNALS]
  const known = os.constants.signals as Record<string, number>
  const bad = Array.isArray(signals) ? signals.find((s) => typeof s !== 'string' || known[s] === undefined || UNCATCHABLE.has(s)) : signals
  if (!Array.isArray(signals) || bad !== undefined) {
    throw new SpindleError(
      'INVALID_OPTIONS',
      `shutdownSignals must be a list of signal names the process can catch, such as ['SIGINT', 'SIGTERM'], or [] to close the runtime yourself (got ${JSON.stringify(bad ?? signals)}).`,
      { details: { field: 'shutdownSignals' } },
    )
  }
  return [...new Set(signals as NodeJS.Signals[])]
}

function onSignal(signal: NodeJS.Signals): void {
  const own = listeners.get(signal)
  // Read now, while every listener is in place (ours runs first): a `once` one is gone after it ran.
  const hostListens = process.listeners(signal).some((listener) => listener !== own)
  const targets = [...closers].filter((closer) => closer.signals.has(signal))
  for (const closer of targets) if (closer.closing()) closer.hurry()
  void Promise.allSettled(targets.map((closer) => closer.close())).then(() => {
    if (hostListens || reraising.has(signal)) return
    reraising.add(signal)
    // After the host's own reactions to the close (a `.then` of rt.close()) have run.
    setImmediate(() => reraise(signal))
  })
}

/** Ends the process by `signal`'s default action, as if spindle had never listened for it. */
function reraise(signal: NodeJS.Signals): void {
  reraising.delete(signal)
  // A runtime opened meanwhile listens again: the signal is its to handle, not a reason to die.
  if (listeners.has(signal)) return
  process.kill(process.pid, signal)
  // Still alive: the signal was ignored (the first process of a container ignores what it does
  // not handle). Exit with the status a shell gives a process the signal ended.
  const number = (os.constants.signals as Record<string, number>)[signal] ?? 0
  setTimeout(() => process.exit(128 + number), 1000).unref()
}

/** Closes `closer` on each of its signals until the returned function is called. */
export function closeOnSignals(closer: SignalCloser): () => void {
  if (closer.signals.size === 0) return () => {}
  closers.add(closer)
  for (const signal of closer.signals) {
    if (listeners.has(signal)) continue
    const listener = (): void => onSignal(signal)
    listeners.set(signal, listener)
    process.prependListener(signal, listener)
  }
  return () => {
    if (!closers.delete(closer)) return
    for (const signal of closer.signals) {
      if ([...closers].some((other) => other.signals.has(signal))) continue
      const listener = listeners.get(signal)
      listeners.delete(signal)
      if (listener) process.removeListener(signal, listener)
    }
  }
}
