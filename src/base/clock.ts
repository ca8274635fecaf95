/**
 * Time, as every floor sees it: a `Clock` stamps events and arms timers, so tests can swap in
 * XState's `SimulatedClock`. Deadlines are armed in steps, whatever their distance. Side effects
 * (timers) only.
 */

/** The clock effects use. `now()` stamps events; timers wait for deadlines. */
export interface Clock {
  now(): number
  setTimeout(fn: () => void, ms: number): unknown
  clearTimeout(handle: unknown): void
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
}

/**
 * The longest delay a Node timer takes; a longer one fires after 1 ms instead. Node's timers hold
 * at most 2^31 − 1 ms (24.8 days), so a Retry-After of weeks, a long tool or wait timeout would end
 * at once.
 */
export const MAX_TIMER_MS = 2_147_483_647

/**
 * Calls `fire` once `clock` reaches `deadline` (at once if it has passed), arming the timer in
 * steps when the deadline lies beyond a timer's range. Returns the function that stops it.
 */
export function atDeadline(clock: Clock, deadline: number, fire: () => void): () => void {
  let handle: unknown
  const arm = (): void => {
    const remaining = Math.max(0, deadline - clock.now())
    handle = clock.setTimeout(() => (remaining > MAX_TIMER_MS && deadline - clock.now() > 0 ? arm() : fire()), Math.min(remaining, MAX_TIMER_MS))
  }
  arm()
  return () => clock.clearTimeout(handle)
}
