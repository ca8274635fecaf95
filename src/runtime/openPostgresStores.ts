/**
 * The stores on a PostgreSQL database: every runtime process on every host that opens the same
 * database (and schema) shares its threads, with no directory in common. A process holds a few
 * connections (persistence/postgres/bridge.ts); the schema is migrated on open.
 */
import { SpindleError } from '../base/errors.js'
import { PgBridge, redact } from '../../persistence/postgres/bridge.js'
import { createPgCheckpointStore } from '../../persistence/postgres/pgCheckpoints.js'
import { openPgLeases } from '../../persistence/postgres/pgLeases.js'
import { openPgLedger } from '../../persistence/postgres/pgLedger.js'
import { openPgRecovery } from '../../persistence/postgres/pgRecovery.js'
import { openPgRegistry } from '../../persistence/postgres/pgRegistry.js'
import { createPgRequestInbox } from '../../persistence/postgres/pgRequestInbox.js'
import { createPgThreadFolders } from '../../persistence/postgres/pgThreadFolders.js'
import { createPgTranscriptStore } from '../../persistence/postgres/pgTranscript.js'
import { migrate } from '../../persistence/postgres/schema.js'
import type { Stores, StorePorts } from './stores.js'

export interface DatabaseOptions {
  /** `postgres://user:password@host:port/database`. */
  url: string
  /** The schema spindle's tables live in (default `public`): several spindle installations can share one database. */
  schema?: string
  /**
   * How many connections this process holds at most (default 3): one for its statements and
   * notifications, one for its transcript rounds, one for its checkpoint rounds. 1 puts them all
   * on one connection, for a server with few connections to spare.
   */
  connections?: number
}

/** `database` as given to createRuntime or the CLI: a URL, or `{ url, schema }`. */
export function databaseOptions(given: unknown, field: string): DatabaseOptions {
  const options = typeof given === 'string' ? { url: given } : given
  const url = (options as { url?: unknown } | null)?.url
  if (typeof url !== 'string' || !/^postgres(ql)?:\/\//.test(url)) {
    throw new SpindleError('INVALID_OPTIONS', `${field} must be a PostgreSQL URL like postgres://user:password@host:5432/db (got ${typeof url === 'string' ? JSON.stringify(redact(url)) : typeof url}).`, {
      details: { field },
    })
  }
  const schema = (options as { schema?: unknown }).schema
  if (schema !== undefined && (typeof schema !== 'string' || !/^[a-z_][a-z0-9_]{0,62}$/.test(schema))) {
    throw new SpindleError('INVALID_OPTIONS', `${field}.schema must be a lower-case PostgreSQL identifier such as "spindle" (got ${JSON.stringify(schema)}).`, { details: { field: `${field}.schema` } })
  }
  const connections = (options as { connections?: unknown }).connections
  if (connections !== undefined && (typeof connections !== 'number' || !Number.isInteger(connections) || connections < 1 || connections > 16)) {
    throw new SpindleError('INVALID_OPTIONS', `${field}.connections must be a whole number from 1 to 16 (got ${JSON.stringify(connections)}).`, { details: { field: `${field}.connections` } })
  }
  return { url, ...(schema === undefined ? {} : { schema }), ...(connections === undefined ? {} : { connections }) }
}

/** How messages name the database: its URL without the password, and the schema. */
export function databaseName(options: DatabaseOptions): string {
  return `${redact(options.url)}${options.schema ? `#${options.schema}` : ''}`
}

/** NOTIFY channels: new or freed threads for workers, requests left for threads, new events. */
export const CHANNELS = ['work', 'requests', 'events'] as const
export type Channel = (typeof CHANNELS)[number]

/**
 * A channel's name in the database: `spindle_<channel>_<schema>` (stores that notify from SQL
 * write `'spindle_events_' || current_schema()`), so installations in two schemas of one
 * database do not wake each other.
 */
export function channelName(channel: Channel, schema?: string): string {
  return `spindle_${channel}_${schema ?? 'public'}`
}

export function openPostgresStores(options: DatabaseOptions, ports: StorePorts): Stores {
  const db = new PgBridge({
    url: options.url,
    ...(options.schema ? { schema: options.schema } : {}),
    ...(options.connections ? { connections: options.connections } : {}),
    onNotify: (name, payload) => {
      const channel = CHANNELS.find((c) => name === channelName(c, options.schema))
      if (channel) ports.notified?.(channel, payload)
    },
  })
  try {
    migrate(db)
    // What other processes tell this one at once (the polls stay, as a safety net): the schema's
    // own channels, so two installations in one database do not wake each other.
    for (const channel of CHANNELS) db.listenSync(channelName(channel, options.schema))
  } catch (error) {
    db.close()
    throw error
  }
  const fence = { owner: () => ports.owner?.() ?? null, fenced: (threadId: string) => ports.fenced?.(threadId) }
  const transcripts = createPgTranscriptStore({ db, fence })
  const registry = openPgRegistry({ db })
  const stores = {
    transcripts,
    checkpoints: createPgCheckpointStore({ db, fence }),
    registry,
    ledger: openPgLedger({ db }),
    leases: openPgLeases({ db }),
    recovery: openPgRecovery({ db }),
  }
  return {
    root: databaseName(options),
    shared: true,
    ...stores,
    folders: createPgThreadFolders({ db, transcripts }),
    announce: (channel: Channel, payload: string) => db.execSync('SELECT pg_notify($1, $2)', [channelName(channel, options.schema), payload]),
    inbox: createPgRequestInbox({ db, onProblem: (error: unknown, threadId?: string) => ports.problem(error, threadId) }),
    close: () => {
      try {
        stores.transcripts.closeAll()
        stores.registry.close()
        stores.ledger.close()
        stores.leases.close()
        stores.recovery.close()
      } finally {
        db.close()
      }
    },
  }
}
