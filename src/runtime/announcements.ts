/**
 * What other processes announce through a database (NOTIFY), acted on at once by the parts that
 * would otherwise find it at their next poll.
 */
import type { Parts } from './parts.js'

/**
 * What another process announced through the database: work to take (a new thread left for
 * workers), a request left for a thread, events appended. Each only hastens what a poll does anyway.
 */
export function notified(parts: Parts, channel: 'work' | 'requests' | 'events'): void {
  if (!parts.life.opened || parts.life.closed) return
  if (channel === 'work') {
    if (parts.table.size < parts.maxThreads) parts.leases.takeOrphans(Date.now())
  } else if (channel === 'requests') {
    parts.inbox.check({ sweep: false }).catch((error: unknown) => parts.bus.report(error))
  } else {
    parts.events.wake()
    parts.waiting.wakeAll()
  }
}
