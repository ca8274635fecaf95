/**
 * The deadline of a model call (`timeouts.modelMs`), kept whatever the adapter does: the call is
 * raced against it, so an adapter that ignores its abort signal cannot hold a thread, and what it
 * answers after the deadline is never read. Side effects. Not imported by machines/.
 */
import { SpindleError } from '../src/base/errors.js'

/**
 * The error a model call gets at `timeouts.modelMs`: classified transient (classifyError), so the
 * call is retried under `retry`.
 */
export function modelTimeout(ms: number): SpindleError {
  return new SpindleError(
    'MODEL_TIMEOUT',
    `The model call did not answer within ${ms} ms (timeouts.modelMs) and was abandoned; it is retried under \`retry\`. ` +
      'If replies of the model take longer, raise timeouts.modelMs.',
    { details: { timeoutMs: ms } },
  )
}

/**
 * `work`, or the abort reason of `signal` as soon as it aborts: an adapter that ignores its signal
 * must not hold the thread for ever, and what it answers afterwards is left unread.
 */
export function abandonable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  // A late answer or failure of work that was abandoned is nobody's: never an unhandled rejection.
  work.catch(() => {})
  if (signal.aborted) return Promise.reject(signal.reason as Error)
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error)
    signal.addEventListener('abort', onAbort, { once: true })
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort)
        resolve(value)
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort)
        reject(error)
      },
    )
  })
}
