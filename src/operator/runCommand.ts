/**
 * `spindle run <directive>`: one thread of a directive file on the built-in scripted model, with
 * progress as it goes. Exit status: 0 completed, 7 error or cancelled, 8 suspended for a person,
 * 130 interrupted (Ctrl-C or SIGTERM closed the runtime; the thread stays checkpointed).
 */
import type { Writable } from 'node:stream'
import { scriptedModel } from '../../actors/scriptedModel.js'
import { findDirective, renderDirective } from './directiveFile.js'
import { SpindleError, isSpindleError } from '../base/errors.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import { formatUsd } from '../base/money.js'
import { createRuntime } from '../runtime/createRuntime.js'
import type { RuntimeOptions } from '../runtime/api.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import { showRecovery } from './progress.js'
import { terminalSafe } from './terminalText.js'

const INTERRUPTS = ['SIGINT', 'SIGTERM'] as const

/** The built-in model of `run`: it answers once, saying what it was asked. */
const runModel = scriptedModel((request) => {
  const prompt = request.messages[0]?.content ?? ''
  return { text: `(scripted model) I was asked: ${prompt.length > 200 ? `${prompt.slice(0, 200)}…` : prompt}` }
})

export async function runDirective(options: {
  /** The data directory; with `database`, where config.yaml and directives are read from. */
  dir: string
  /** The database the thread is kept in, instead of the directory. */
  database?: DatabaseOptions
  directive: string
  inputs: string[]
  json: boolean
  out: Writable
  tty: boolean
  inspect?: RuntimeOptions['inspect']
}): Promise<number> {
  const file = findDirective(options.directive, options.dir)
  const model = file.frontMatter.model ?? 'scripted'
  if (model !== 'scripted') {
    throw new SpindleError(
      'INVALID_OPTIONS',
      `${file.file}: model "${model}": the CLI runs directives on the built-in "scripted" model only. Run this directive from host code with your model adapter (e.g. spindle/ai-sdk).`,
      { details: { file: file.file, field: 'model' } },
    )
  }
  // No prototype: `--input __proto__=x` is an input name like any other (and refused as undeclared).
  const inputs: Record<string, string> = Object.create(null) as Record<string, string>
  for (const pair of options.inputs) {
    const at = pair.indexOf('=')
    if (at <= 0) throw new SpindleError('INVALID_OPTIONS', `--input must be name=value (got ${JSON.stringify(pair)}).`, { details: { field: 'input' } })
    inputs[pair.slice(0, at)] = pair.slice(at + 1)
  }
  const directive = renderDirective(file, inputs)
  const rt = await createRuntime({
    dir: options.dir,
    ...(options.database ? { database: options.database } : {}),
    model: runModel,
    // Unfinished threads of the directory are recovered first; a person sees how far that is.
    ...(options.json ? {} : { onLifecycle: showRecovery(options.out, options.tty) }),
    ...(options.inspect ? { inspect: options.inspect } : {}),
  })
  const say = (text: string): void => {
    // The thread's result is a model's text: it must not drive the terminal (see terminalSafe).
    if (!options.json) options.out.write(`${terminalSafe(text)}\n`)
  }
  // Ctrl-C and SIGTERM close the runtime (its shutdownSignals); listening as well leaves ending
  // the process to this command, with status 130, instead of the signal raised again.
  const interrupted = (): void => {}
  for (const signal of INTERRUPTS) process.on(signal, interrupted)
  try {
    // The CLI has one model, its scripted one: a directive's `model` names a model of host code's.
    const thread = await rt.spawn({ directive, model: 'default' })
    say(`${thread.id}: started (${file.file})`)
    let last = ''
    thread.subscribe((view) => {
      const line = `${thread.id}: ${view.status}${typeof view.state === 'object' ? ` (${Object.values(view.state)[0]})` : ''}  turns ${view.usage.turns}  ${formatUsd(view.usage.spend)}`
      if (line !== last) say(line)
      last = line
    })
    let outcome: ThreadOutcome
    try {
      outcome = await thread.done
    } catch (error) {
      if (!isSpindleError(error) || error.code !== 'RUNTIME_CLOSED') throw error
      if (options.json) options.out.write(`${JSON.stringify({ threadId: thread.id, directive: file.file, interrupted: true })}\n`)
      else say(`\n${thread.id} interrupted: it stays checkpointed in ${options.database ? rt.dir : options.dir} and goes on when a runtime next opens that ${options.database ? 'database' : 'directory'}.`)
      return 130
    }
    if (options.json) options.out.write(`${terminalSafe(JSON.stringify({ threadId: thread.id, directive: file.file, ...outcome }))}\n`)
    else say(outcome.status === 'completed' ? `\n${outcome.result ?? ''}` : `\n${thread.id} ${outcome.status}${outcome.error ? `: ${outcome.error.message}` : ''}`)
    return outcome.status === 'completed' ? 0 : outcome.status === 'suspended' ? 8 : 7
  } finally {
    for (const signal of INTERRUPTS) process.removeListener(signal, interrupted)
    await rt.close()
  }
}
