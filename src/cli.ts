#!/usr/bin/env node
/**
 * The `spindle` command. Commands that read take --json; tables and colour only on a TTY.
 */
import './threadpool.js'
import { Command, CommanderError, Option } from 'commander'
import type { ThreadStatus, TranscriptEntry } from '../persistence/types.js'
import { runDemo } from './operator/demo.js'
import { runDirective } from './operator/runCommand.js'
import { SPINDLE_ERROR_CODES, SpindleError, isSpindleError } from './base/errors.js'
import { formatUsd } from './base/money.js'
import type { SpindleErrorCode } from './base/errors.js'
import { locks } from './operator/locks.js'
import { serveInspector } from './operator/inspector.js'
import fs from 'node:fs'
import os from 'node:os'
import { threadTree } from './operator/operatorActions.js'
import { addDecisionCommands } from './operator/decisionCommands.js'
import { addMigrateCommand } from './operator/migrateCommand.js'
import { addOrphanCommands } from './operator/orphanCommands.js'
import { addRebuildCommand } from './operator/rebuildCommand.js'
import type { RequestWritten, TreeNode } from './operator/operatorActions.js'
import { doctor, showThread, threadLog } from './operator/operator.js'
import { listThreads } from './operator/threadListing.js'
import { isActive } from './thread/threadStatus.js'
import { writeVisualizations } from './operator/visualize.js'
import { inspectRenamed, statelyInspector } from './operator/statelyInspector.js'
import { showLines } from './operator/showText.js'
import { CLI_COLOURS, plural, terminalSafe } from './operator/terminalText.js'
import { dbOption, placeOf, runtimePlace, schemaOption } from './operator/databaseStores.js'
import { databaseLocks, databaseThreads, databaseTree, readDatabaseLog, showDatabaseThread } from './operator/databaseOperator.js'
import { databaseDoctor } from './operator/databaseDoctor.js'

/** Exit statuses, documented in `spindle --help` and docs/cli.md. */
const EXIT: Partial<Record<SpindleErrorCode, number>> = {
  INVALID_OPTIONS: 3,
  OUTPUT_SCHEMA_INVALID: 3,
  INVALID_THREAD_ID: 3,
  CONFIG_INVALID: 3,
  THREAD_NOT_FOUND: 4,
  STATE_CORRUPT: 5,
  STATE_VERSION_UNSUPPORTED: 5,
  TRANSCRIPT_CORRUPT: 5,
  TRANSCRIPT_CHAIN_BROKEN: 5,
  REPLAY_DIVERGED: 5,
  FILES_MISSING: 5,
  REGISTRY_FAILED: 5,
  LEDGER_FAILED: 5,
  NO_PENDING_APPROVAL: 6,
  THREAD_NOT_SUSPENDED: 6,
  THREAD_NOT_ACTIVE: 6,
  APPROVAL_NEEDS_LIMITS: 6,
  LIMIT_STILL_EXCEEDED: 6,
  APPROVAL_ALREADY_ANSWERED: 6,
  DIRECTIVE_INVALID: 3,
  DIRECTIVE_NOT_FOUND: 4,
  THREAD_LEASED: 9,
  TRANSCRIPT_BEHIND_JOURNAL: 9,
  DATA_DIR_INVALID: 5,
  DATA_DIR_NOT_FOUND: 4,
  DATABASE_SCHEMA_NEWER: 5,
  DATABASE_UNAVAILABLE: 9,
  MIGRATION_TARGET_NOT_EMPTY: 6,
  MIGRATION_MISMATCH: 5,
}

const STATUSES: readonly ThreadStatus[] = ['created', 'running', 'suspended', 'completed', 'error', 'cancelled', 'continued']

const tty = process.stdout.isTTY === true
const COLOURS: Record<string, string> = { completed: '32', running: '36', created: '36', suspended: '33', error: '31', cancelled: '90', continued: '35' }
const colour = (status: string): string => (tty && COLOURS[status] ? `\x1b[${COLOURS[status]}m${status}\x1b[0m` : status)
// Everything printed goes through terminalSafe: a thread's result or a directive's name must not
// drive the operator's terminal. Only the CLI's own colour codes pass.
const out = (text: string): void => {
  process.stdout.write(`${terminalSafe(text, CLI_COLOURS)}\n`)
}
const json = (value: unknown): void => out(JSON.stringify(value, null, tty ? 2 : undefined))

function table(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => stripAnsi(r[i] ?? '').length)))
  for (const row of rows) out(row.map((cell, i) => cell + ' '.repeat(widths[i]! - stripAnsi(cell).length)).join('  ').trimEnd())
}

function stripAnsi(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-9;]*m/g, '')
}

function parseStatuses(value: string | undefined): ThreadStatus[] | undefined {
  if (value === undefined) return undefined
  const statuses = value.split(',').map((s) => s.trim())
  for (const status of statuses) {
    if (!STATUSES.includes(status as ThreadStatus)) {
      throw new SpindleError('INVALID_OPTIONS', `--status: "${status}" is not a thread status (one of ${STATUSES.join(', ')}).`, {
        details: { field: 'status' },
      })
    }
  }
  return statuses as ThreadStatus[]
}

/** An option's value that must be a whole number of at least 0 (a seq, milliseconds, a port): anything else exits 3. */
const wholeNumber = (name: string) => (value: string): number => {
  const n = Number(value)
  if (value.trim() === '' || !Number.isSafeInteger(n) || n < 0) {
    throw new SpindleError('INVALID_OPTIONS', `--${name} must be a whole number of at least 0 (got ${JSON.stringify(value)}).`, { details: { field: name } })
  }
  return n
}

/** How much of an entry's data one line of `spindle logs` shows. */
const LOG_DATA_WIDTH = 120

/** `--json` anywhere on the command line: then errors, too, are JSON (on stderr). */
const JSON_ASKED = process.argv.slice(2).includes('--json')

/** The version in package.json, which ships beside dist/ (this file is dist/src/cli.js). */
function packageVersion(): string {
  return (JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

const dirOption = (): Option => new Option('--dir <dir>', 'data directory of the runtime').default('.spindle')

/** `--inspect-stately`: the notice goes to stderr first, so `run --json` keeps stdout for its JSON. */
const stately = () =>
  statelyInspector(
    (notice) => process.stderr.write(`spindle: ${notice}\n`),
    (error) => process.stderr.write(`inspector: ${error.message}\n`),
  )

function program(setExit: (code: number) => void): Command {
  const cli = new Command('spindle')
    .description('A durable actor runtime for LLM agent threads.')
    .addHelpText(
      'after',
      '\nExit codes: 0 ok, 1 unexpected failure, 2 usage, 3 invalid input, 4 not found, 5 damaged data, 6 not in a state for that, 7 thread ended in error or cancelled (run), 8 thread suspended for a person (run), 9 threads run by another live process (demo, rebuild --apply, --compact) or a transcript behind its journal (rebuild --apply, --compact), 130 interrupted.',
    )
    .version(packageVersion(), '-V, --version', "print spindle's version")
    .showHelpAfterError()
    // Usage errors go to stderr as text, or — with --json — as JSON, written where they are caught.
    .configureOutput({ writeErr: (text) => (JSON_ASKED ? undefined : process.stderr.write(text)) })
    // Before the commands are added: each copies it, so a usage error in one (a missing argument,
    // an unknown option) exits 2 through the handler below instead of commander's own exit 1.
    .exitOverride()

  cli
    .command('demo')
    .description('run several threads on the scripted model with live progress; run again after a kill to resume')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .addOption(new Option('--durability <mode>', 'fsync or process').choices(['fsync', 'process']).default('fsync'))
    .option('--latency <ms>', 'simulated model latency in ms', wholeNumber('latency'))
    .option('--inspect-stately', 'send every snapshot of every thread (prompts, tool results …) to the Stately inspector on stately.ai to watch it there; `spindle inspect` is the local way')
    .addOption(new Option('--inspect').hideHelp())
    .action(async (o: { dir: string; db?: string; schema?: string; durability: 'fsync' | 'process'; latency?: number; inspect?: boolean; inspectStately?: boolean }, command: Command) => {
      if (o.inspect) throw inspectRenamed('demo')
      const place = placeOf(o, command, { dirBeside: true })
      const inspector = o.inspectStately ? await stately() : null
      try {
        setExit(
          await runDemo({
            ...runtimePlace(place),
            ...(place.database ? { at: place.argument } : {}),
            durability: o.durability,
            out: process.stdout,
            ...(o.latency !== undefined ? { latencyMs: o.latency } : {}),
            ...(inspector ? { inspect: inspector.inspect } : {}),
          }),
        )
      } finally {
        inspector?.stop()
      }
    })

  cli
    .command('run <directive>')
    .description('run a directive (a file, or a name found in <dir>/directives, the user and the system directories) on the built-in scripted model')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--input <name=value>', 'an input of the directive (repeatable)', (value: string, all: string[]) => [...all, value], [] as string[])
    .option('--json', 'print the outcome as JSON')
    .option('--inspect-stately', 'send every snapshot of the thread (prompts, tool results …) to the Stately inspector on stately.ai to watch it there; `spindle inspect` is the local way')
    .addOption(new Option('--inspect').hideHelp())
    .action(async (name: string, o: { dir: string; db?: string; schema?: string; input: string[]; json?: boolean; inspect?: boolean; inspectStately?: boolean }, command: Command) => {
      if (o.inspect) throw inspectRenamed('run')
      const place = placeOf(o, command, { dirBeside: true })
      const inspector = o.inspectStately ? await stately() : null
      try {
        setExit(
          await runDirective({ ...runtimePlace(place), directive: name, inputs: o.input, json: o.json === true, out: process.stdout, tty, ...(inspector ? { inspect: inspector.inspect } : {}) }),
        )
      } finally {
        inspector?.stop()
      }
    })

  cli
    .command('ls')
    .description('list threads')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--status <statuses>', 'only these statuses, comma-separated')
    .option('--json', 'print JSON')
    .action((o: { dir: string; db?: string; schema?: string; status?: string; json?: boolean }, command: Command) => {
      const status = parseStatuses(o.status)
      const { database } = placeOf(o, command)
      const threads = database ? databaseThreads(database, status ? { status } : {}) : listThreads(o.dir, status ? { status } : {})
      if (o.json) return json(threads)
      if (threads.length === 0) return out('no threads')
      table([
        ['ID', 'STATUS', 'TURNS', 'SPEND', 'UPDATED'],
        ...threads.map((t) => [
          t.id,
          // A limit and a crash-loop quarantine are both 'suspended': the reason tells them apart.
          `${colour(t.status)}${t.suspendReason ? ` (${t.suspendReason === 'waiting' ? 'waiting for an answer' : t.suspendReason})` : ''}`,
          String(t.cost?.turns ?? 0),
          formatUsd(t.cost?.spend ?? 0),
          new Date(t.updatedAt).toISOString(),
        ]),
      ])
    })

  cli
    .command('show <id>')
    .description('one thread: registry row, checkpointed state, transcript health')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--json', 'print JSON')
    .action((id: string, o: { dir: string; db?: string; schema?: string; json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      const report = place.database ? showDatabaseThread(place.database, id) : showThread(o.dir, id)
      if (o.json) return json(report)
      // The checkpoint is ahead of the registry row after a crash: say what each holds.
      const status = report.state?.status ?? report.record.status
      out(`${report.record.id}  ${colour(status)}${status !== report.record.status ? ` (the registry row still says ${report.record.status})` : ''}`)
      const lines = showLines(report, place.argument)
      const width = Math.max(11, ...lines.map(([label]) => label.length))
      for (const [label, text] of lines) out(`${label.padEnd(width)} ${text}`)
      if (report.problems.length > 0) setExit(5)
    })

  cli
    .command('logs <id>')
    .description("print a thread's transcript, verified")
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--after <seq>', 'only entries after this seq', wholeNumber('after'))
    .option('--follow', 'keep printing new entries until the thread stops')
    .option('--json', 'print JSON lines')
    .action(async (id: string, o: { dir: string; db?: string; schema?: string; after?: number; follow?: boolean; json?: boolean }, command: Command) => {
      const place = placeOf(o, command)
      /** Prints the entries `read` gives after `--after`, and with --follow the new ones until the thread stops. */
      const follow = async (read: (after: number) => { status: ThreadStatus; entries: TranscriptEntry[] }): Promise<void> => {
        let last = o.after ?? 0
        let cutSaid = false
        /** Prints the entries after `last`; returns the status the registry had just before reading them. */
        const print = (): ThreadStatus => {
          const { status, entries } = read(last)
          let cut = false
          for (const e of entries) {
            if (o.json) out(JSON.stringify(e))
            else {
              const data = JSON.stringify(e.data)
              cut ||= data.length > LOG_DATA_WIDTH
              out(`${String(e.seq).padStart(5)}  ${e.ts}  ${e.type.padEnd(16)} ${data.length > LOG_DATA_WIDTH ? `${data.slice(0, LOG_DATA_WIDTH - 1)}…` : data}`)
            }
            last = e.seq
          }
          // Once, after the lines it explains (a follow may run for hours).
          if (cut && !cutSaid) {
            cutSaid = true
            out(`(lines ending in … are cut at ${LOG_DATA_WIDTH} characters: \`spindle logs ${id}${place.argument} --json\` prints every entry whole)`)
          }
          return status
        }
        let status = print()
        // Follow by polling: the transcript is append-only and verified on every read. The status is
        // read before the entries, so the read after the thread stopped includes its last entries.
        while (o.follow && isActive(status)) {
          await new Promise((resolve) => setTimeout(resolve, 250))
          status = print()
        }
      }
      // On a database one connection serves every read of a follow.
      if (place.database) return readDatabaseLog(place.database, id, (log) => follow(log.read))
      return follow((after) => threadLog(o.dir, id, { after }))
    })

  addRebuildCommand(cli, { dirOption, out, json, colour, plural, setExit })

  cli
    .command('doctor')
    .description('check every thread: registry row, state.json, transcript chain, and that they agree; exit 5 on damage')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--json', 'print JSON')
    .action((o: { dir: string; db?: string; schema?: string; json?: boolean }, command: Command) => {
      const { database } = placeOf(o, command)
      const { threads, findings } = database ? databaseDoctor(database) : doctor(o.dir)
      if (findings.some((f) => f.kind === 'damage')) setExit(5)
      if (o.json) return json({ threads, findings })
      for (const f of findings) out(`${f.kind.padEnd(6)}  ${f.threadId}  [${f.code}] ${f.message}\n        repair: ${f.repair}`)
      const damaged = findings.filter((f) => f.kind === 'damage').length
      out(`${plural(threads, 'thread')} checked: ${damaged ? `${damaged} damaged` : 'no damage'}${findings.length > damaged ? `, ${plural(findings.length - damaged, 'other finding')}` : ''}.`)
    })

  const operator = `${os.userInfo().username}@${os.hostname()} (spindle CLI)`
  const written = (result: RequestWritten, asJson: boolean | undefined): void => {
    if (asJson) return json(result)
    out(`${result.action}: wrote ${result.file}\n${result.next}`)
  }
  addDecisionCommands(cli, { dirOption, written, operator })
  addMigrateCommand(cli, { out, json })

  cli
    .command('tree [id]')
    .description('the thread tree: children under their parent, continuations after the thread they continue')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--json', 'print JSON')
    .action((id: string | undefined, o: { dir: string; db?: string; schema?: string; json?: boolean }, command: Command) => {
      const { database } = placeOf(o, command)
      const trees = database ? databaseTree(database, id) : threadTree(o.dir, id)
      if (o.json) return json(trees)
      if (trees.length === 0) return out('No threads.')
      const print = (node: TreeNode, prefix: string, last: boolean, top: boolean): void => {
        const branch = top ? '' : last ? '└─ ' : '├─ '
        const link = node.previousThreadId ? '↪ ' : ''
        // Spend against the budget counts the children's too: what the limit is held to.
        const budget = node.budget?.limit != null ? `  budget ${formatUsd(node.budget.spent)} of ${formatUsd(node.budget.limit)}` : ''
        out(`${prefix}${branch}${link}${node.id}  ${node.directive}  ${colour(node.status)}  ${formatUsd(node.spend)}  ${plural(node.turns, 'turn')}${budget}`)
        const next = top ? '' : prefix + (last ? '   ' : '│  ')
        node.children.forEach((child, i) => print(child, next, i === node.children.length - 1, false))
      }
      for (const tree of trees) print(tree, '', true, true)
    })

  addOrphanCommands(cli, { dirOption, out, json, table, colour, plural })

  cli
    .command('inspect')
    .description('serve a local page on 127.0.0.1, updated live: what waits for a person first (limit and tool approvals with Approve / Deny, questions with Answer, Cancel and Resume), then the thread tree, each thread\'s conversation, its state, cost against limits and budget')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--port <port>', 'port to listen on (default: any free one)', wholeNumber('port'))
    .action(async (o: { dir: string; db?: string; schema?: string; port?: number }, command: Command) => {
      const { database } = placeOf(o, command)
      const inspector = await serveInspector({ ...(database ? { database } : { dir: o.dir }), ...(o.port !== undefined ? { port: o.port } : {}) })
      out(`spindle inspect: open ${inspector.url}\n(127.0.0.1 only; the token in the link is this session's key. Ctrl-C stops.)`)
      await new Promise<void>((resolve) => process.once('SIGINT', () => resolve()))
      await inspector.close()
    })

  cli
    .command('locks')
    .description('list thread leases and which are stale; --apply reclaims stale ones (audit: locks.log.jsonl)')
    .addOption(dirOption())
    .addOption(dbOption())
    .addOption(schemaOption())
    .option('--apply', 'reclaim stale leases (expired, or held by a process that is gone)')
    .option('--force', 'with --apply: reclaim live leases too (the process holding them stops writing those threads)')
    .option('--json', 'print JSON')
    .action((o: { dir: string; db?: string; schema?: string; apply?: boolean; force?: boolean; json?: boolean }, command: Command) => {
      if (o.force && !o.apply) throw new SpindleError('INVALID_OPTIONS', '--force only makes sense with --apply.', { details: { field: 'force' } })
      const { database } = placeOf(o, command)
      const options = { apply: o.apply === true, force: o.force === true }
      const report = database ? databaseLocks(database, options) : locks(o.dir, options)
      if (o.json) return json(report)
      if (report.locks.length === 0) return out(`No leases: no runtime process holds a thread of this ${database ? 'database' : 'directory'}.`)
      table([
        ['THREAD', 'STATE', 'OWNER', 'PID', 'EXPIRES', 'TOKEN'],
        ...report.locks.map((l) => [l.threadId, l.state === 'live' ? l.state : tty ? `\x1b[33m${l.state}\x1b[0m` : l.state, l.owner, String(l.pid), new Date(l.expiresAt).toISOString(), String(l.token)]),
      ])
      if (!o.apply) {
        const stale = report.locks.filter((l) => l.state !== 'live').length
        return out(`\n${stale} stale of ${report.locks.length}. Dry run: nothing changed; --apply reclaims the stale ones.`)
      }
      out(`\nReclaimed ${report.reclaimed.length}${report.kept.length ? `; kept ${report.kept.length} live (younger than their TTL; --force takes them)` : ''}. ${database ? 'A database keeps no locks.log.jsonl: this list is the record.' : 'Logged to locks.log.jsonl.'}`)
    })

  cli
    .command('viz')
    .description('write the machines to visualizations/: Mermaid, SVG statecharts and Stately Studio source')
    .option('--out <dir>', 'where to write', 'visualizations')
    .option('--check', 'write nothing; exit 1 if a diagram is missing or stale')
    .action(async (o: { out: string; check?: boolean }) => {
      const stale = await writeVisualizations(o.out, { check: o.check === true })
      for (const file of stale) out(`${o.check ? 'out of date' : 'wrote'}: ${file}`)
      if (o.check && stale.length > 0) {
        process.stderr.write('The machines changed since the diagrams were generated: run `spindle viz` and commit the result.\n')
        setExit(1)
      }
    })
  return cli
}

// A reader that went away (`spindle logs id | head`) is not an error; every thread is checkpointed.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0)
  throw error
})

/**
 * Exits once everything written to stdout and stderr is out: writes to a pipe are asynchronous,
 * and `process.exit` at once cut `spindle ls --json | jq` off at the pipe's 64 KiB.
 */
function exitWhenFlushed(code: number): void {
  process.exitCode = code
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)))
}

/**
 * Writes a failure to stderr and exits with `status`: as `{"error":{"code","message"}}` when the
 * command line asked for JSON, so a script reading JSON gets JSON whatever happened; else as text,
 * `detail` (a stack) in place of the message when there is one.
 */
function fail(status: number, code: string, message: string, detail?: string): void {
  if (JSON_ASKED) process.stderr.write(`${terminalSafe(JSON.stringify({ error: { code, message } }))}\n`)
  else process.stderr.write(`spindle: ${terminalSafe(detail ?? message)}${isSpindleErrorCode(code) ? ` [${code}]` : ''}\n`)
  exitWhenFlushed(status)
}

const isSpindleErrorCode = (code: string): boolean => (SPINDLE_ERROR_CODES as readonly string[]).includes(code)

let exitCode = 0
const cli = program((code) => (exitCode = code))
cli.parseAsync(process.argv).then(
  () => exitWhenFlushed(exitCode),
  (error: unknown) => {
    if (error instanceof CommanderError) {
      // Help and version are not failures; everything else commander rejects is a usage error.
      if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version') return exitWhenFlushed(0)
      // In text, commander has printed it already (with the help); in JSON it printed nothing.
      if (!JSON_ASKED) return exitWhenFlushed(2)
      return fail(2, 'USAGE', error.message.replace(/^error: /, ''))
    }
    if (isSpindleError(error)) return fail(EXIT[error.code] ?? 1, error.code, error.message)
    const errno = error as NodeJS.ErrnoException
    if (error instanceof Error && typeof errno.code === 'string' && typeof errno.syscall === 'string') {
      // A file system refusal (a directory where a file belongs, no permission …): its message
      // names the call and the path, which is what to fix; a stack trace would only hide it.
      return fail(1, errno.code, error.message)
    }
    fail(1, 'UNEXPECTED', error instanceof Error ? error.message : String(error), error instanceof Error ? error.stack : undefined)
  },
)
