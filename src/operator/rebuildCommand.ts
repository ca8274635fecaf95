/**
 * `spindle rebuild <id> [--apply] [--compact]`: replays a thread's transcript and compares it with
 * its stored checkpoint (state.json on a directory, its checkpoint row on a database); `--apply`
 * writes the rebuilt one. Apart from cli.ts, which only prints and exits.
 */
import type { Command, Option } from 'commander'
import { SpindleError } from '../base/errors.js'
import { compactThread } from './compact.js'
import { rebuildInDatabase } from './databaseRebuild.js'
import { dbOption, placeOf, schemaOption } from './databaseStores.js'
import { rebuildThread } from './operator.js'
import type { RebuildReport } from './rebuildReport.js'

export interface RebuildCommandContext {
  dirOption: () => Option
  out: (text: string) => void
  json: (value: unknown) => void
  colour: (status: string) => string
  plural: (n: number, one: string, many?: string) => string
  setExit: (code: number) => void
}

type Options = { dir: string; db?: string; schema?: string; apply?: boolean; compact?: boolean; json?: boolean }

export function addRebuildCommand(cli: Command, { dirOption, out, json, colour, plural, setExit }: RebuildCommandContext): void {
  cli
    .command('rebuild <id>')
    .description("replay a thread's transcript and compare with its state.json (its checkpoint on a database); --apply writes the rebuilt one")
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--apply', 'write the rebuilt state.json (atomically) and update the registry; not while a runtime runs the thread')
    .option('--compact', 'with --apply: also write a deduplicated transcript (the old one is kept beside it); alone: say what it would drop')
    .option('--json', 'print JSON')
    .action(async (id: string, o: Options, command: Command) => {
      const { database } = placeOf(o, command)
      if (database && o.compact) {
        throw new SpindleError('INVALID_OPTIONS', '--compact rewrites a transcript file of a data directory; a database holds no lines to drop (a writer that lost its thread never writes). Leave --compact out.', {
          details: { field: 'compact' },
        })
      }
      if (o.compact) {
        const compacted = compactThread(o.dir, id, { apply: o.apply === true })
        if (!o.apply) {
          if (o.json) return json(compacted)
          return out(`${id}: ${plural(compacted.before, 'entry', 'entries')}, ${compacted.after} after compaction (dropping ${JSON.stringify(compacted.dropped)}). Dry run: --apply writes it.`)
        }
        if (!o.json) out(compacted.applied ? `${id}: transcript compacted from ${compacted.before} to ${plural(compacted.after, 'entry', 'entries')}; the old one is ${compacted.keptAs}.` : `${id}: nothing to compact.`)
      }
      const report = database ? await rebuildInDatabase(database, id, { apply: o.apply === true }) : rebuildThread(o.dir, id, { apply: o.apply === true })
      if (!report.matches && !report.applied) setExit(5)
      if (report.findings.some((f) => f.kind !== 'unknown_type')) setExit(5)
      if (o.json) return json(report)
      for (const line of reportLines(report, database ? 'checkpoint' : 'state.json', { colour, plural })) out(line)
    })
}

/** The report for a person; `stored`: what the stored checkpoint is called there. */
function reportLines(report: RebuildReport, stored: string, { colour, plural }: Pick<RebuildCommandContext, 'colour' | 'plural'>): string[] {
  const lines = report.findings.map((f) => `${f.kind === 'unknown_type' ? 'note' : 'damage'}  [${f.kind}] ${f.message}`)
  const label = stored.padEnd(11)
  lines.push(`rebuilt     ${colour(report.rebuilt.status)} ${JSON.stringify(report.rebuilt.value)} replayed through transcript seq ${report.rebuilt.appliedSeq}`)
  const was = report.stored
  if (was === null) lines.push(`${label} missing`)
  else if ('problem' in was) lines.push(`${label} unreadable: [${was.problem.code}] ${was.problem.message}`)
  else lines.push(`${label} ${colour(was.status)} ${JSON.stringify(was.value)} at transcript seq ${was.transcriptSeq}`)
  lines.push(
    report.matches
      ? `${stored} matches its transcript${report.behind ? ` (${plural(report.behind, 'later entry is', 'later entries are')} replayed on recovery)` : ''}.`
      : report.applied
        ? `${stored} differed from its transcript and was rewritten.`
        : `${stored} does not match its transcript: run again with --apply to rewrite it.`,
  )
  if (report.applied && report.matches) lines.push(`${stored} rewritten from the transcript.`)
  const where = stored === 'checkpoint' ? 'its decision' : 'its decision file'
  for (const d of report.decisions) lines.push(`approval    ${d.requestId}: ${d.decision} by its transcript; ${where} ${d.written ? 'is written' : 'is missing: --apply writes it'}.`)
  return lines
}
