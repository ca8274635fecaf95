/**
 * Deadlines on a clock, whatever their distance. Node's timers hold at most 2^31 − 1 ms (24.8
 * days); a longer delay fires after 1 ms, so a Retry-After of weeks, a long tool or wait timeout
 * would end at once. Side effects (timers) only.
 */
import type { Clock } from './threadEffects.js'

/** The longest delay a Node timer takes; a longer one fires after 1 ms instead. */
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
