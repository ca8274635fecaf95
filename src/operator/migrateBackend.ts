/**
 * `spindle migrate`: copies every thread of a data directory into a PostgreSQL database, or of a
 * database into a directory, through the stores of both ends, so that a team that started
 * embedded moves without losing a thread. The source is read and checked whole before anything is
 * written (migrateSurvey.ts), copied (migrateCopy.ts), and the target read back and compared with
 * it (migrateVerify.ts). The source is never changed.
 *
 * Caveats: no runtime may run on either end meanwhile. One that holds a lease on the source is
 * refused; one on the target holds none until it has threads, so it cannot be seen — stop it.
 * Leases are not copied (the target's runtimes take the threads on afresh), nor are the request
 * log, recovery escalations, or claimed requests a stopped runtime never carried out.
 */
import { SpindleError, isSpindleError, describeError } from '../base/errors.js'
import type { Stores, StorePorts } from '../runtime/openStores.js'
import { copyStores } from './migrateCopy.js'
import { endName, migrateEnds, openSource, openTarget, targetExists, type MigrateEnd } from './migrateEnds.js'
import { surveySource, type SourceSurvey } from './migrateSurvey.js'
import { differences } from './migrateVerify.js'

export interface MigrateOptions {
  /** A data directory or a `postgres://` URL; the other end is the other kind. */
  from: string
  to: string
  /** The schema of the database end (default public). */
  schema?: string
  /** Read and check the source (and whether the target is empty), count, write nothing. */
  dryRun?: boolean
}

export interface MigrateSummary {
  from: string
  to: string
  /** 'copied'; 'checked' (a dry run); 'done already' (the target holds exactly the source's threads). */
  outcome: 'copied' | 'checked' | 'done already'
  threads: number
  /** Transcript entries, and the bytes they take as JSON lines (what a file holds). */
  entries: number
  bytes: number
  checkpoints: number
  events: number
  accounts: number
  approvals: number
  requests: number
  decisions: number
  ms: number
  /** What was left out or adjusted, and problems the stores reported. */
  notes: string[]
}

/** How to empty a target that holds a partial copy. */
function clearing(end: MigrateEnd): string {
  return end.kind === 'dir' ? `remove ${end.paths.root}` : `drop its schema (DROP SCHEMA "${end.database.schema ?? 'public'}" CASCADE)`
}

/** Where else a copy can go. */
function elsewhere(end: MigrateEnd): string {
  return end.kind === 'dir' ? 'to another --to directory' : 'to another --schema'
}

/**
 * 'empty', or 'same' when the target holds exactly the threads of the source already (a migration
 * run twice); any other target is refused (MIGRATION_TARGET_NOT_EMPTY).
 */
function targetState(survey: SourceSurvey, source: Stores, target: Stores, end: MigrateEnd): 'empty' | 'same' {
  const threads = target.registry.list({ limit: 1 }).length
  if (threads === 0) {
    const leftovers =
      target.checkpoints.list().length > 0 ||
      target.ledger.accounts().length > 0 ||
      target.registry.events.lastId() > 0 ||
      survey.threads.some((t) => target.folders.transcriptBytes(t.record.id) !== null)
    if (!leftovers) return 'empty'
    throw new SpindleError(
      'MIGRATION_TARGET_NOT_EMPTY',
      `${endName(end)} holds no threads, but transcripts, checkpoints, budget accounts or events (an earlier spindle migrate that was interrupted leaves them): ` +
        `${clearing(end)} and migrate again, or migrate ${elsewhere(end)}. Nothing was written.`,
      { details: { target: endName(end) } },
    )
  }
  const found = differences(survey, source, target)
  if (found.length === 0) return 'same'
  throw new SpindleError(
    'MIGRATION_TARGET_NOT_EMPTY',
    `${endName(end)} holds threads already, and not exactly the source's (${found[0]}): spindle migrate copies into a target without threads. ` +
      `Migrate ${elsewhere(end)}, or ${clearing(end)} if nothing there is needed. Nothing was written.`,
    { details: { target: endName(end), difference: found[0] } },
  )
}

function summarise(survey: SourceSurvey, source: MigrateEnd, target: MigrateEnd, outcome: MigrateSummary['outcome'], started: number, problems: unknown[]): MigrateSummary {
  const sum = (pick: (t: SourceSurvey['threads'][number]) => number) => survey.threads.reduce((n, t) => n + pick(t), 0)
  return {
    from: endName(source),
    to: endName(target),
    outcome,
    threads: survey.threads.length,
    entries: sum((t) => t.entries),
    bytes: sum((t) => t.position.bytes),
    checkpoints: sum((t) => (t.envelope === null ? 0 : 1)),
    events: survey.events.count,
    accounts: survey.accounts.length,
    approvals: sum((t) => t.approvals.length),
    requests: sum((t) => t.requests.length),
    decisions: survey.decisions.length,
    ms: Math.round(performance.now() - started),
    notes: [...survey.notes, ...problems.map((p) => describeError(p).message)],
  }
}

/** A failure in the middle of the copy: the target holds part of it, which the next run refuses. */
function interrupted(error: unknown, end: MigrateEnd): unknown {
  const then = `The source is unchanged; ${endName(end)} holds part of the copy: ${clearing(end)} and migrate again.`
  if (!isSpindleError(error)) return new SpindleError('STORAGE_FAILED', `The copy stopped: ${describeError(error).message}. ${then}`, { cause: error })
  return new SpindleError(error.code, `The copy stopped: ${error.message} ${then}`, { cause: error, details: error.details })
}

/**
 * Copies the threads of `from` to `to` and verifies the copy; see the file comment.
 *
 * @throws SpindleError INVALID_OPTIONS (two ends of one kind), DATA_DIR_NOT_FOUND (no source),
 *   THREAD_LEASED (a live runtime on the source), TRANSCRIPT_CHAIN_BROKEN / TRANSCRIPT_CORRUPT /
 *   STATE_CORRUPT / REPLAY_DIVERGED / TRANSCRIPT_BEHIND_JOURNAL (a thread that would not survive
 *   the copy: nothing written), MIGRATION_TARGET_NOT_EMPTY, MIGRATION_MISMATCH (the copy read back
 *   differs), DATABASE_UNAVAILABLE.
 * @example
 * const summary = await migrateBackend({ from: '.spindle', to: 'postgres://spindle@db/spindle', schema: 'agents' })
 * summary.threads // every thread of .spindle, now in schema agents
 */
export async function migrateBackend(options: MigrateOptions): Promise<MigrateSummary> {
  const started = performance.now()
  const ends = migrateEnds(options.from, options.to, options.schema)
  const problems: unknown[] = []
  const ports: StorePorts = { problem: (error) => problems.push(error), folderInvalid: (_threadId, error) => problems.push(error) }
  const source = openSource(ends.source, ports)
  try {
    const survey = surveySource(source, ends.source, endName(ends.target))
    // A dry run creates nothing: a target that does not exist yet is empty.
    if (!targetExists(ends.target) && options.dryRun) return summarise(survey, ends.source, ends.target, 'checked', started, problems)
    const target = openTarget(ends.target, ports)
    try {
      const state = targetState(survey, source, target, ends.target)
      if (state === 'same') return summarise(survey, ends.source, ends.target, 'done already', started, problems)
      if (options.dryRun) return summarise(survey, ends.source, ends.target, 'checked', started, problems)
      try {
        await copyStores(survey, source, target)
      } catch (error) {
        throw interrupted(error, ends.target)
      }
      const found = differences(survey, source, target)
      if (found.length > 0) {
        throw new SpindleError(
          'MIGRATION_MISMATCH',
          `The copy on ${endName(ends.target)} differs from ${endName(ends.source)}: ${found.join('; ')}. The source is unchanged; ${clearing(ends.target)} and report this as a bug in spindle.`,
          { details: { differences: found } },
        )
      }
      return summarise(survey, ends.source, ends.target, 'copied', started, problems)
    } finally {
      target.close()
    }
  } finally {
    source.close()
  }
}
