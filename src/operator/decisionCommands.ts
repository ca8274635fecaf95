/**
 * The commands that decide for a thread from another process — `spindle cancel | approve | deny |
 * answer | resume` — each writing a request file that the runtime running the directory acts on.
 * Apart from cli.ts, which only prints and exits, so that these read as one set.
 */
import type { Command, Option } from 'commander'
import { SpindleError } from '../base/errors.js'
import type { RequestWritten } from './operatorActions.js'
import { answerThread, approveThread, cancelThread, denyThread, resumeThread } from './operatorActions.js'

export interface DecisionCommandsContext {
  dirOption: () => Option
  /** Prints what was written, as text or JSON. */
  written: (result: RequestWritten, asJson: boolean | undefined) => void
  /** Who decides, as the response files record it. */
  operator: string
}

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
    .option('--reason <text>', 'recorded with the cancel')
    .option('--json', 'print JSON')
    .action((id: string, o: { dir: string; reason?: string; json?: boolean }) => written(cancelThread(o.dir, id, o.reason, operator), o.json))

  cli
    .command('approve <id>')
    .description(
      "approve what a suspended thread waits at, by writing the response to its request: a limit escalation (default: the proposed limit; the limit options set others) or a tool call (it runs, with --input in place of the model's input if given)",
    )
    .addOption(dirOption())
    .option('--turns <n>', 'at a limit: new turns limit', positive('turns'))
    .option('--tokens <n>', 'at a limit: new tokens limit', positive('tokens'))
    .option('--spend <usd>', 'at a limit: new spend limit in US dollars', positive('spend'))
    .option('--duration-ms <ms>', 'at a limit: new active-time limit', positive('duration-ms'))
    .option('--input <json>', "at a tool approval: run the call with this input (JSON) instead of the model's; the tool's schema checks it")
    .option('--message <text>', 'recorded with the decision')
    .option('--replace', 'write over an answer already waiting for the runtime (refused without it)')
    .option('--json', 'print JSON')
    .action((id: string, o: { dir: string; turns?: number; tokens?: number; spend?: number; durationMs?: number; input?: string; message?: string; replace?: boolean; json?: boolean }) => {
      const limits = {
        ...(o.turns !== undefined ? { turns: Math.round(o.turns) } : {}),
        ...(o.tokens !== undefined ? { tokens: Math.round(o.tokens) } : {}),
        ...(o.spend !== undefined ? { spend: o.spend } : {}),
        ...(o.durationMs !== undefined ? { durationMs: Math.round(o.durationMs) } : {}),
      }
      const approval = { limits, ...(o.input !== undefined ? { input: jsonArgument('--input', o.input) } : {}), ...(o.message !== undefined ? { message: o.message } : {}) }
      written(approveThread(o.dir, id, approval, operator, { replace: o.replace === true }), o.json)
    })

  cli
    .command('deny <id>')
    .description(
      'deny what a suspended thread waits at: at a limit escalation it ends cancelled with its partial result; at a tool approval the tool does not run, the model gets the denial (and --reason) as the call\'s result, and the thread goes on',
    )
    .addOption(dirOption())
    .option('--reason <text>', 'recorded with the decision; at a tool approval the model reads it')
    .option('--replace', 'write over an answer already waiting for the runtime (refused without it)')
    .option('--json', 'print JSON')
    .action((id: string, o: { dir: string; reason?: string; replace?: boolean; json?: boolean }) => written(denyThread(o.dir, id, o.reason, operator, { replace: o.replace === true }), o.json))

  cli
    .command('answer <id> <answer>')
    .description('answer the question a thread waits at (ask_human, a tool that waits for an answer): the answer becomes the call\'s result and the thread goes on')
    .addOption(dirOption())
    .option('--json', 'parse <answer> as JSON (an object, a number …) instead of taking it as text; also print JSON')
    .option('--replace', 'write over an answer already waiting for the runtime (refused without it)')
    .action((id: string, answer: string, o: { dir: string; json?: boolean; replace?: boolean }) =>
      written(answerThread(o.dir, id, o.json ? jsonArgument('<answer>', answer) : answer, operator, { replace: o.replace === true }), o.json),
    )

  cli
    .command('resume <id>')
    .description('carry on a thread suspended for an error or a budget (not at a limit or a tool call: approve, deny or answer those)')
    .addOption(dirOption())
    .option('--json', 'print JSON')
    .action((id: string, o: { dir: string; json?: boolean }) => written(resumeThread(o.dir, id, operator), o.json))
}
