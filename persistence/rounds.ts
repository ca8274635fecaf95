/**
 * Rounds of work that many waiters share (group commit's transcript, checkpoint and settle
 * rounds): who arrives while a round is in flight is served by a later one.
 */

/**
 * After a failed round (a full disk, an I/O error) the next waits 100 ms, doubling up to this:
 * its waiters are still served as soon as the disk takes writes again, without a round per
 * event-loop turn hammering it meanwhile.
 */
export const FAILED_ROUND_BACKOFF_MAX_MS = 5000

type Waiter = { resolve: () => void; reject: (e: unknown) => void }

/**
 * Runs `work` in rounds: waiters that arrive while rounds are in flight are served by a later one.
 * Up to `concurrency` rounds may be in flight (each covers what was written before it started).
 */
export class Rounds {
  private waiting: Waiter[] = []
  private inFlight = 0
  private scheduled = false
  private spacing: ReturnType<typeof setTimeout> | null = null
  /** When the timer in `spacing` fires. */
  private spacingDue = 0
  private lastEnd = Number.NEGATIVE_INFINITY
  /** Rounds failed in a row; 0 after one succeeds. */
  failures = 0

  constructor(
    private readonly work: () => Promise<void>,
    private readonly concurrency = 1,
  ) {}

  wait(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject })
      // Enough waiters to be worth a round: start it now, so its fsyncs run on the pool while the
      // threads that are still busy finish their steps (they join a later round).
      if (!this.startEagerly()) this.schedule()
    })
  }

  /** Waiters that start a round at once rather than at the end of the event-loop turn. */
  eager = Number.POSITIVE_INFINITY

  /**
   * A round with nobody waiting and nothing `urgent` starts at least this long after the previous
   * round ended; anything else starts one at once. Each round rewrites every file changed since
   * the last, so spaced rounds write fewer files for the same transitions.
   */
  spacingMs = 0

  /** Starts a round even with nobody waiting (background work). */
  poke(): void {
    this.schedule()
  }

  pending: () => boolean = () => false
  /** Pending background work that should not wait for the spacing. */
  urgent: () => boolean = () => false

  /** Starts a round now if enough are waiting and one may start (see `eager`). */
  private startEagerly(): boolean {
    if (this.waiting.length < this.eager || this.inFlight >= this.concurrency || this.failures > 0) return false
    this.startNow()
    return true
  }

  /** When the next round is due (a `performance.now()` time), or null when there is nothing to do. */
  private dueAt(): number | null {
    const now = this.waiting.length > 0 || this.urgent()
    // Nothing to do (a closed commit, or a round that took everything): no timer keeps the process up.
    if (!now && !this.pending()) return null
    const backoff = this.failures > 0 ? this.lastEnd + Math.min(FAILED_ROUND_BACKOFF_MAX_MS, 100 * 2 ** (this.failures - 1)) : 0
    return Math.max(now ? 0 : this.lastEnd + this.spacingMs, backoff)
  }

  private schedule(): void {
    if (this.inFlight >= this.concurrency) return
    const due = this.dueAt()
    if (due === null) return
    if (this.spacing !== null) {
      if (this.spacingDue <= due) return
      clearTimeout(this.spacing)
      this.spacing = null
    }
    if (this.scheduled) return
    const wait = due - performance.now()
    if (wait > 0) {
      this.spacingDue = due
      this.spacing = setTimeout(() => {
        this.spacing = null
        this.schedule()
      }, wait)
      return
    }
    this.scheduled = true
    // setImmediate lets every thread that transitions in this turn of the event loop join the round.
    setImmediate(() => {
      this.scheduled = false
      if (this.inFlight >= this.concurrency) return
      // Asked again: what made the round urgent may have been taken since (a settle round took a
      // stopped thread's status), and then it waits for its spacing after all.
      const at = this.dueAt()
      if (at === null) return
      if (at <= performance.now()) this.startNow()
      else this.schedule()
    })
  }

  private startNow(): void {
    this.inFlight++
    const waiters = this.waiting
    this.waiting = []
    this.work()
      .then(
        () => {
          this.failures = 0
          waiters.forEach((w) => w.resolve())
        },
        (error: unknown) => {
          this.failures++
          waiters.forEach((w) => w.reject(error))
        },
      )
      .finally(() => {
        this.inFlight--
        this.lastEnd = performance.now()
        // Who came while it ran: at once if enough for an eager start, else at the end of the turn.
        if (this.startEagerly()) return
        if (this.waiting.length > 0 || this.pending()) this.schedule()
      })
  }
}
