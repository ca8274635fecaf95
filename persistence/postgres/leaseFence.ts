/**
 * The lease fence of the transcript and checkpoint stores: a process writes a thread's rows only
 * while no other process holds the thread's lease. A process that stalled (stopped, starved, cut
 * off) past its lease may wake with a round in hand after another took its threads over; its
 * round must not write over the successor's.
 *
 * The round's transaction first locks the lease rows of its threads FOR SHARE: a takeover (an
 * UPDATE of the row) waits for the round to commit, and a round that starts after a takeover
 * committed reads the new owner. Either way the rows a round writes belong to the owner that
 * held the lease at its commit.
 */
import type { Statement } from './bridge.js'

export interface PgFence {
  /** The lease owner this process writes as (its runtime's owner id); null: no lease is looked at. */
  owner: () => string | null
  /**
   * Told of a thread whose rows a round did not write because another writer has it now, after
   * the round committed (the rest of it stands). It must not throw.
   */
  fenced?: (threadId: string) => void
}

/** Locks the lease rows of `threadIds` for the rest of the transaction and reads their owners. */
export function lockLeases(threadIds: readonly string[]): Statement {
  return { sql: 'SELECT thread_id, owner FROM leases WHERE thread_id = ANY($1) ORDER BY thread_id FOR SHARE', params: [threadIds] }
}

/**
 * A condition true of a row `alias` whose thread no other owner leases; `$ownerParam` is this
 * process's owner. The rows are locked already (`lockLeases`), so it reads what that read.
 */
export function notLeasedElsewhere(alias: string, ownerParam: number): string {
  return `NOT EXISTS (SELECT 1 FROM leases l WHERE l.thread_id = ${alias}.thread_id AND l.owner <> $${ownerParam})`
}
