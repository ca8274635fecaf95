/**
 * Registry rows as the CLI prints them. Two things differ from `Registry.list()`: the nonce — the
 * secret a request file must carry — is never among them, and a row a crash left behind shows
 * what its thread's last checkpoint says. The registry row of a running thread is written at its
 * status changes and turns, state.json at every transition, so after a kill the row still has the
 * time the thread started; the checkpoint has its last step.
 */
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { dataPaths } from '../../persistence/paths.js'
import type { CheckpointStore, Cost, Registry, ThreadRecord, ThreadStatus } from '../../persistence/types.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { isActive } from '../thread/threadStatus.js'
import { withRegistry } from './registryAccess.js'

/** A thread as the CLI shows it: its registry row without the nonce. */
export type ThreadListing = Omit<ThreadRecord, 'nonce'>

/** `record` without its nonce: what every command that prints a row prints. */
export function withoutNonce(record: ThreadRecord): ThreadListing {
  const { nonce: _secret, ...printable } = record
  return printable
}

/**
 * An unfinished thread's row brought up to its last checkpoint when that is newer: its status (and
 * why it waits), usage and time. Finished rows are final, and written with their last checkpoint.
 * A checkpoint that cannot be read leaves the row as it is (`spindle show` and `doctor` report it).
 */
function upToCheckpoint(row: ThreadListing, checkpoints: CheckpointStore): ThreadListing {
  if (!isActive(row.status)) return row
  let envelope
  try {
    envelope = checkpoints.load(row.id)
  } catch {
    return row
  }
  const savedAt = envelope ? Date.parse(envelope.savedAt) : Number.NaN
  if (!envelope || !(savedAt > row.updatedAt)) return row
  const context = (envelope.snapshot as { context?: Partial<ThreadContext> }).context
  const usage: Cost | undefined = context?.usage
  return {
    ...row,
    status: envelope.status,
    suspendReason: envelope.status === 'suspended' ? (context?.suspendReason ?? null) : null,
    updatedAt: savedAt,
    ...(usage ? { cost: { turns: usage.turns, inputTokens: usage.inputTokens, outputTokens: usage.outputTokens, spend: usage.spend } } : {}),
  }
}

/**
 * The threads of a data directory, oldest first, each as its registry row says — or its last
 * checkpoint, when that is newer — without the nonce. `status` filters on what is shown.
 */
export function listThreads(dir: string, filter: { status?: ThreadStatus[] } = {}): ThreadListing[] {
  return withRegistry(dir, (registry) => listedThreads(registry, createFileCheckpointStore({ paths: dataPaths(dir), durability: 'process' }), filter))
}

/** `listThreads` of any backend's registry and checkpoints. */
export function listedThreads(registry: Pick<Registry, 'list'>, checkpoints: CheckpointStore, filter: { status?: ThreadStatus[] } = {}): ThreadListing[] {
  const wanted = filter.status?.length ? new Set(filter.status) : null
  // A row the registry calls created or running may show another status once brought up to date.
  const query = wanted ? { status: [...new Set<ThreadStatus>([...wanted, 'created', 'running'])] } : {}
  const rows = registry.list(query).map((record) => upToCheckpoint(withoutNonce(record), checkpoints))
  return wanted ? rows.filter((row) => wanted.has(row.status)) : rows
}
