/**
 * The commands that decide for a thread from another process — `spindle cancel | approve | deny |
 * answer | resume` — each writing a request file that the runtime running the directory acts on, or
 * leaving a request in a database's inbox for the worker running the thread (databaseRequests.ts).
 * Apart from cli.ts, which only prints and exits, so that these read as one set.
 */
import type { Command, Option } from 'commander'
import { SpindleError } from '../base/errors.js'
import { answerQuestionInDatabase, approveInDatabase, cancelInDatabase, denyInDatabase, resumeInDatabase } from './databaseRequests.js'
import type { DatabasePlace, Place } from './databaseStores.js'
import { dbOption, placeOf, schemaOption } from './databaseStores.js'
import type { RequestWritten } from './operatorActions.js'
import { answerThread, approveThread, cancelThread, denyThread, resumeThread } from './operatorActions.js'

export interface DecisionCommandsContext {
  dirOption: () => Option
  /** Prints what was written, as text or JSON. */
  written: (result: RequestWritten, asJson: boolean | undefined) => void
  /** Who decides, as the response files record it. */
  operator: string
}

/** The options that say where the thread is: `--dir`, or `--db` and `--schema`. */
type Where = { dir: string; db?: string; schema?: string }

const inDatabase = (place: Place): place is DatabasePlace => place.database !== undefined

const positive = (name: string) => (value: string): number => {
  const n = Number(value)
  if (!Number.isFinite(n) || n <= 0) throw new SpindleError('INVALID_OPTIONS', `--${name} must be a positive number (got ${JSON.stringify(value)}).`, { details: { field: name } })
  return n
}

/** JSON given on the command line, or INVALID_OPTIONS (exit 3) saying where it broke and how to quote it. */
export function jsonArgument(what: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown
  } catch (error) {
    throw new SpindleError(
      'INVALID_OPTIONS',
      `${what} is not valid JSON (${(error as Error).message}): ${JSON.stringify(text)}. Quote it for the shell, e.g. '{"env":"staging"}'. Nothing was written.`,
      { details: { field: what } },
    )
  }
}

export function addDecisionCommands(cli: Command, { dirOption, written, operator }: DecisionCommandsContext): void {
  cli
    .command('cancel <id>')
    .description('ask the runtime running a thread (or the next one) to cancel it: a nonce-checked cancel request file')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--reason <text>', 'recorded with the cancel')
    .option('--json', 'print JSON')
    .action((id: string, o: Where & { reason?: string; json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      written(inDatabase(place) ? cancelInDatabase(place, id, o.reason, operator) : cancelThread(o.dir, id, o.reason, operator), o.json)
    })

  cli
    .command('approve <id>')
    .description(
      "approve what a suspended thread waits at, by writing the response to its request: a limit escalation (default: the proposed limit; the limit options set others) or a tool call (it runs, with --input in place of the model's input if given)",
    )
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--turns <n>', 'at a limit: new turns limit', positive('turns'))
    .option('--tokens <n>', 'at a limit: new tokens limit', positive('tokens'))
    .option('--spend <usd>', 'at a limit: new spend limit in US dollars', positive('spend'))
    .option('--duration-ms <ms>', 'at a limit: new active-time limit', positive('duration-ms'))
    .option('--input <json>', "at a tool approval: run the call with this input (JSON) instead of the model's; the tool's schema checks it")
    .option('--message <text>', 'recorded with the decision')
    .option('--replace', 'write over an answer already waiting for the runtime (refused without it)')
    .option('--json', 'print JSON')
    .action((id: string, o: Where & { turns?: number; tokens?: number; spend?: number; durationMs?: number; input?: string; message?: string; replace?: boolean; json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      const limits = {
        ...(o.turns !== undefined ? { turns: Math.round(o.turns) } : {}),
        ...(o.tokens !== undefined ? { tokens: Math.round(o.tokens) } : {}),
        ...(o.spend !== undefined ? { spend: o.spend } : {}),
        ...(o.durationMs !== undefined ? { durationMs: Math.round(o.durationMs) } : {}),
      }
      const approval = { limits, ...(o.input !== undefined ? { input: jsonArgument('--input', o.input) } : {}), ...(o.message !== undefined ? { message: o.message } : {}) }
      const replace = { replace: o.replace === true }
      written(inDatabase(place) ? approveInDatabase(place, id, approval, operator, replace) : approveThread(o.dir, id, approval, operator, replace), o.json)
    })

  cli
    .command('deny <id>')
    .description(
      'deny what a suspended thread waits at: at a limit escalation it ends cancelled with its partial result; at a tool approval the tool does not run, the model gets the denial (and --reason) as the call\'s result, and the thread goes on',
    )
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--reason <text>', 'recorded with the decision; at a tool approval the model reads it')
    .option('--replace', 'write over an answer already waiting for the runtime (refused without it)')
    .option('--json', 'print JSON')
    .action((id: string, o: Where & { reason?: string; replace?: boolean; json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      const replace = { replace: o.replace === true }
      written(inDatabase(place) ? denyInDatabase(place, id, o.reason, operator, replace) : denyThread(o.dir, id, o.reason, operator, replace), o.json)
    })

  cli
    .command('answer <id> <answer>')
    .description('answer the question a thread waits at (ask_human, a tool that waits for an answer): the answer becomes the call\'s result and the thread goes on')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--json', 'parse <answer> as JSON (an object, a number …) instead of taking it as text; also print JSON')
    .option('--replace', 'write over an answer already waiting for the runtime (refused without it)')
    .action((id: string, answer: string, o: Where & { json?: boolean; replace?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      const value = o.json ? jsonArgument('<answer>', answer) : answer
      const replace = { replace: o.replace === true }
      written(inDatabase(place) ? answerQuestionInDatabase(place, id, value, operator, replace) : answerThread(o.dir, id, value, operator, replace), o.json)
    })

  cli
    .command('resume <id>')
    .description('carry on a thread suspended for an error or a budget (not at a limit or a tool call: approve, deny or answer those)')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--json', 'print JSON')
    .action((id: string, o: Where & { json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      written(inDatabase(place) ? resumeInDatabase(place, id, operator) : resumeThread(o.dir, id, operator), o.json)
    })
}
