/**
 * `spindle orphans [scan] | recover <id> --action … | auto`: created or running threads no live
 * runtime process holds, on a data directory or a database, and what to do with them. Apart from
 * cli.ts, which only prints and exits.
 *
 * On a database a lease held by a process on another host cannot be seen dead, so an orphan there
 * is a thread with no lease or an expired one; the workers take those over by themselves at their
 * next heartbeat (`orphans.autoTakeover`), within their `maxThreads`.
 */
import type { Command, Option } from 'commander'
import { Option as CommandOption } from 'commander'
import { scriptedModel } from '../../actors/scriptedModel.js'
import { SpindleError } from '../base/errors.js'
import { createRuntime } from '../runtime/createRuntime.js'
import { dbOption, placeOf, runtimePlace, schemaOption, withDatabase } from './databaseStores.js'
import type { Place } from './databaseStores.js'
import { locks, reviewLocks } from './locks.js'
import type { LocksOptions } from './locks.js'
import { orphansAmong, scanOrphans } from './operatorActions.js'
import type { Orphan } from './operatorActions.js'

export interface OrphanCommandsContext {
  dirOption: () => Option
  out: (text: string) => void
  json: (value: unknown) => void
  table: (rows: string[][]) => void
  colour: (status: string) => string
  plural: (n: number, one: string, many?: string) => string
}

type Where = { dir: string; db?: string; schema?: string }

/** The orphans of the place. */
function orphansOf(place: Place): Orphan[] {
  if (!place.database) return scanOrphans(place.dir)
  return withDatabase(place.database, (stores) => orphansAmong(stores.registry.listActive(), reviewLocks(stores.leases, {}, null).locks))
}

/** Frees the stale leases among `ids` (`spindle locks --apply` for those threads); the ids freed. */
function freeLeases(place: Place, ids: readonly string[]): string[] {
  const options: LocksOptions = { apply: true, only: ids }
  const report = place.database ? withDatabase(place.database, (stores) => reviewLocks(stores.leases, options, null)) : locks(place.dir, options)
  return report.reclaimed.map((l) => l.threadId)
}

/** Who takes orphans over there, for the messages. */
const takers = (place: Place): string => (place.database ? 'The workers on this database take' : 'Runtimes on this directory take')

export function addOrphanCommands(cli: Command, { dirOption, out, json, table, colour, plural }: OrphanCommandsContext): void {
  const where = (command: Command) => command.addOption(dirOption()).addOption(dbOption()).addOption(schemaOption())
  const orphans = cli.command('orphans').description('threads no live runtime process holds: scan (default), recover one, or auto')
  where(orphans.command('scan', { isDefault: true }))
    .description('list created or running threads whose lease is missing, expired, or held by a process that is gone')
    .option('--json', 'print JSON')
    .action((o: Where & { json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      const found = orphansOf(place)
      if (o.json) return json(found)
      if (found.length === 0) return out('No orphans: every unfinished thread is held by a live runtime process.')
      table([['THREAD', 'DIRECTIVE', 'STATUS', 'WHY', 'LAST OWNER'], ...found.map((f) => [f.id, f.directive, colour(f.status), f.why, f.owner ?? '-'])])
      out(`\n${plural(found.length, 'orphan')}. ${takers(place)} them over by themselves (orphans.autoTakeover), or: spindle orphans recover <id> --action resume|mark_error|mark_cancelled${place.argument}`)
    })
  where(orphans.command('recover <id>'))
    .description('resume: free its lease so a runtime takes it over now; mark_error / mark_cancelled: end it here without running it')
    .addOption(new CommandOption('--action <action>', 'what to do').choices(['resume', 'mark_error', 'mark_cancelled']).makeOptionMandatory())
    .option('--reason <text>', 'recorded with the decision')
    .option('--json', 'print JSON')
    .action(async (id: string, o: Where & { action: 'resume' | 'mark_error' | 'mark_cancelled'; reason?: string; json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      if (!orphansOf(place).some((f) => f.id === id)) {
        throw new SpindleError('THREAD_NOT_ACTIVE', `Thread ${id} is no orphan: it is finished, suspended, unknown, or a live runtime process holds it (\`spindle orphans${place.argument}\` lists orphans).`, {
          details: { threadId: id },
        })
      }
      if (o.action === 'resume') {
        const freed = freeLeases(place, [id]).length > 0
        const next = place.database
          ? 'A worker on this database takes it over at its next heartbeat, or when one next opens the database.'
          : 'A runtime on this directory takes it over at its next heartbeat, or when it next opens the directory.'
        const result = { threadId: id, action: o.action, leaseFreed: freed, next }
        return o.json ? json(result) : out(`${id}: ${result.next}`)
      }
      const rt = await createRuntime({ ...runtimePlace(place), model: scriptedModel([]), recover: false })
      try {
        const outcome = await rt.settleOrphan(id, o.action, o.reason)
        if (o.json) return json({ threadId: id, action: o.action, ...outcome })
        out(`${id}: ${colour(outcome.status)}${outcome.error ? ` — ${outcome.error.message}` : ''}`)
      } finally {
        await rt.close()
      }
    })
  where(orphans.command('auto'))
    .description('free the leases of every orphan so the runtimes on this directory (or database) take them over now')
    .option('--json', 'print JSON')
    .action((o: Where & { json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      const found = orphansOf(place).map((f) => f.id)
      const reclaimed = found.length > 0 ? freeLeases(place, found) : []
      const result = { orphans: found, leasesFreed: reclaimed }
      if (o.json) return json(result)
      out(`${plural(found.length, 'orphan')}; freed ${plural(reclaimed.length, 'lease')}. ${takers(place)} them over at their next heartbeat or start.`)
    })
}
