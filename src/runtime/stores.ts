/**
 * The stores a runtime uses, as one bundle (opened by openStores.ts for files or memory, by
 * openPostgresStores.ts for a database), and the ports through which they tell the runtime what
 * they find.
 */
import type { SpindleError } from '../base/errors.js'
import type { CheckpointStore, LeaseStore, Ledger, RecoveryStore, Registry, RequestInbox, ThreadFolders, TranscriptStore } from '../../persistence/types.js'

export interface Stores {
  /** The data directory's root (a memory backend names the directory it was given). */
  root: string
  /**
   * Whether other processes can open these stores too (a data directory on disk): then this
   * process renews its leases, fences itself when it could not, takes over orphans, and polls its
   * inbox for requests they leave. A memory backend is this process's alone.
   */
  shared: boolean
  transcripts: TranscriptStore
  checkpoints: CheckpointStore
  registry: Registry
  ledger: Ledger
  leases: LeaseStore
  recovery: RecoveryStore
  folders: ThreadFolders
  inbox: RequestInbox
  /** Tells every process on the stores at once (a database's NOTIFY); absent where nothing can. */
  announce?(channel: 'work' | 'requests' | 'events', payload: string): void
  close(): void
}

/** What the stores tell the runtime while it runs: wired in the composition root. */
export interface StorePorts {
  /** A problem a store found that stopped no thread. */
  problem(error: unknown, threadId?: string): void
  /** A thread's folder was no real directory when its checkpoint was due: nothing was written through it. */
  folderInvalid(threadId: string, error: SpindleError): void
  /**
   * The lease owner this process writes as (null before it holds any lease): a database backend
   * writes a thread's lines only while no other owner holds its lease.
   */
  owner?(): string | null
  /** A write of the thread was refused because another process holds its lease now. */
  fenced?(threadId: string): void
  /** Another process announced something on a channel (see `Stores.announce`). */
  notified?(channel: 'work' | 'requests' | 'events', payload: string): void
}
