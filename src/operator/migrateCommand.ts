/**
 * `spindle migrate --from <dir|url> --to <url|dir>`: the command around migrateBackend.ts, which
 * does the work. Apart from cli.ts, which only wires it.
 */
import type { Command } from 'commander'
import { migrateBackend, type MigrateSummary } from './migrateBackend.js'
import { plural } from './terminalText.js'

export interface MigrateCommandContext {
  /** Prints a line of text. */
  out: (text: string) => void
  /** Prints a value as JSON. */
  json: (value: unknown) => void
}

function size(bytes: number): string {
  if (bytes < 1024) return plural(bytes, 'byte')
  const units = ['KiB', 'MiB', 'GiB', 'TiB']
  let value = bytes / 1024
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return `${value.toFixed(1)} ${units[unit]}`
}

/** The summary as a person reads it. */
export function migrateSummaryText(summary: MigrateSummary): string[] {
  const { threads, entries, bytes } = summary
  const counts = [
    plural(summary.checkpoints, 'checkpoint'),
    plural(summary.events, 'event'),
    plural(summary.accounts, 'budget account'),
    plural(summary.approvals, 'approval request'),
    plural(summary.requests, 'waiting request'),
    plural(summary.decisions, 'recovery decision'),
  ].join(', ')
  const what = `${plural(threads, 'thread')} (${plural(entries, 'transcript entry', 'transcript entries')}, ${size(bytes)}; ${counts})`
  const seconds = `${(summary.ms / 1000).toFixed(1)} s`
  const lines =
    summary.outcome === 'copied'
      ? [`Migrated ${what} from ${summary.from} to ${summary.to} in ${seconds}.`, 'Every chain and every replay verified on the target. The source is unchanged: keep it until the target runs.']
      : summary.outcome === 'done already'
        ? [`${summary.to} holds exactly the ${plural(threads, 'thread')} of ${summary.from} already, every chain and replay verified (${seconds}): nothing to do.`]
        : [`Checked ${what} in ${summary.from} (${seconds}): every chain verifies and every checkpoint replays. Dry run: nothing was written; without --dry-run they are copied to ${summary.to}.`]
  return [...lines, ...summary.notes.map((note) => `note: ${note}`)]
}

export function addMigrateCommand(cli: Command, { out, json }: MigrateCommandContext): void {
  cli
    .command('migrate')
    .description('copy every thread of a data directory into a PostgreSQL database (or of a database into a directory), verifying every chain; no runtime may run on either meanwhile')
    .requiredOption('--from <dir|url>', 'where the threads are: a data directory, or a postgres:// URL')
    .requiredOption('--to <url|dir>', 'where they go: a postgres:// URL, or a new directory (the other kind than --from)')
    .option('--schema <name>', 'the schema of the database end (default public)')
    .option('--dry-run', 'read and check everything, count it, write nothing')
    .option('--json', 'print the summary as JSON')
    .action(async (o: { from: string; to: string; schema?: string; dryRun?: boolean; json?: boolean }) => {
      const summary = await migrateBackend({ from: o.from, to: o.to, ...(o.schema !== undefined ? { schema: o.schema } : {}), dryRun: o.dryRun === true })
      if (o.json) return json(summary)
      for (const line of migrateSummaryText(summary)) out(line)
    })
}
