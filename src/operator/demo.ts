/**
 * `spindle demo`: several threads on the scripted model, with live progress. Kill it half way
 * (Ctrl-C or kill -9) and run it again: it resumes the unfinished threads and says so. Three of them
 * stop for a person — at a turn limit, at a tool call that needs approval, at a question — and the
 * summary says how to answer each from the shell.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import type { ModelRequest } from '../../actors/model.js'
import type { ScriptedTurn } from '../../actors/scriptedModel.js'
import { scriptedModel } from '../../actors/scriptedModel.js'
import { askHuman } from '../../actors/askHuman.js'
import { defineTool } from '../../actors/tools.js'
import type { ThreadView } from '../thread/threadView.js'
import type { Durability } from '../../persistence/types.js'
import type { RuntimeOptions } from '../runtime/api.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import { createRuntime } from '../runtime/createRuntime.js'
import { SpindleError } from '../base/errors.js'
import { formatUsd } from '../base/money.js'
import { showRecovery, statusLine } from './progress.js'
import { plural } from './terminalText.js'

const TOPICS = ['tides', 'glaciers', 'monsoons', 'aurora', 'volcanoes', 'coral']
const TURNS = 6

const QUESTION = 'Which volcano should the summary lead with?'

/** Each demo thread looks up facts, writes a note on the way, then answers. */
function demoScript(request: ModelRequest): ScriptedTurn {
  const topic = TOPICS.find((t) => request.directiveName.endsWith(t)) ?? 'tides'
  if (request.turn === 4 && topic === 'aurora') {
    // A call with an effect outside: it waits for a person's approval before it runs.
    return { toolCalls: [{ name: 'publish', input: { title: 'Aurora facts', text: 'Five facts about aurora, checked.' } }] }
  }
  if (request.turn === 3 && topic === 'volcanoes') {
    return { toolCalls: [{ name: 'ask_human', input: { question: QUESTION, choices: ['Etna', 'Kilauea', 'Fuji'] } }] }
  }
  if (request.turn === 3 && topic === 'monsoons') {
    // A rate limit on the way, to show a durable retry wait.
    return { faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '1' } }], reply: { toolCalls: [{ name: 'lookup', input: { topic, aspect: 3 } }] } }
  }
  if (request.turn < TURNS) {
    const calls: Array<{ name: string; input: unknown }> = [{ name: 'lookup', input: { topic, aspect: request.turn } }]
    if (request.turn === 2) calls.push({ name: 'save_note', input: { text: `${topic}: aspect 2 looked up` } })
    return { toolCalls: calls }
  }
  const asked = request.messages.find((m) => m.role === 'tool' && m.toolName === 'ask_human')
  if (asked) return { text: `Five facts about ${topic}, leading with ${asked.content}.` }
  return { text: `Five facts about ${topic}, checked and noted.` }
}

function publishTool(dir: string) {
  return defineTool({
    name: 'publish',
    description: 'Publish a summary for everyone to read (needs a person to approve it)',
    input: z.object({ title: z.string(), text: z.string() }),
    needsApproval: true,
    execute: async ({ title, text }) => {
      fs.appendFileSync(path.join(dir, 'published.txt'), `${title}\t${text}\n`)
      return { published: title }
    },
  })
}

function lookupTool() {
  return defineTool({
    name: 'lookup',
    description: 'Look up one aspect of a topic',
    input: z.object({ topic: z.string(), aspect: z.number().int() }),
    idempotent: true,
    execute: async ({ topic, aspect }) => ({ topic, aspect, fact: `${topic} fact #${aspect}` }),
  })
}

function saveNoteTool(dir: string) {
  return defineTool({
    name: 'save_note',
    description: 'Append a note to notes.txt (not idempotent)',
    input: z.object({ text: z.string() }),
    execute: async ({ text }, { idempotencyKey }) => {
      fs.appendFileSync(path.join(dir, 'notes.txt'), `${idempotencyKey}\t${text}\n`)
      return { saved: true }
    },
  })
}

function stateLabel(view: ThreadView): string {
  const state = typeof view.state === 'string' ? view.state : Object.entries(view.state).map(([k, v]) => `${k}.${String(v)}`).join(',')
  // Which tool, which attempt: what the state alone does not say.
  const step = view.step
  if (step?.effect === 'runTool') return `${state}(${step.tool})`
  if (step?.effect === 'callModel' && step.attempt > 1) return `${state}(attempt ${step.attempt})`
  return state
}

export interface DemoOptions {
  /** The data directory; with `database`, where config.yaml is read from and the demo's tools write their files. */
  dir: string
  /** The database the threads are kept in, instead of the directory. */
  database?: DatabaseOptions
  /** How the commands it prints say where the threads are (default ` --dir <dir>`). */
  at?: string
  durability: Durability
  out: NodeJS.WriteStream
  latencyMs?: number
  /** XState inspection of every actor (`--inspect`). */
  inspect?: RuntimeOptions['inspect']
}

export async function runDemo(options: DemoOptions): Promise<number> {
  const { out } = options
  const tty = out.isTTY === true
  const views = new Map<string, ThreadView>()
  // The tools' notes need a folder also when the threads are kept in a database.
  if (options.database) fs.mkdirSync(options.dir, { recursive: true })
  const rt = await createRuntime({
    dir: options.dir,
    ...(options.database ? { database: options.database } : {}),
    durability: options.durability,
    model: scriptedModel(demoScript, { latencyMs: (r) => (options.latencyMs ?? 250) + ((r.turn * 37) % 200) }),
    tools: [lookupTool(), saveNoteTool(options.dir), publishTool(options.dir), askHuman()],
    defaultLimits: { turns: 10 },
    ...(options.inspect ? { inspect: options.inspect } : {}),
    onLifecycle: showRecovery(out, tty),
    onProblem: (p) => out.write(`problem${p.threadId ? ` in ${p.threadId}` : ''}: [${p.code}] ${p.message}\n`),
  })
  const report = rt.lastRecovery
  const at = options.at ?? ` --dir ${rt.dir}`
  let threads = rt.active()
  // Threads answered while no demo ran (`spindle approve`, `resume`) are carried on at open, beside
  // the ones recovery resumed: said apart, or "resumed 0" would precede a thread that runs.
  const answered = threads.filter((t) => !report.resumed.includes(t.id)).length
  if (threads.length > 0 || report.settled.length > 0) {
    out.write(
      `Resumed ${plural(report.resumed.length, 'unfinished thread')} from ${rt.dir} where ${report.resumed.length === 1 ? 'it was' : 'they were'} checkpointed` +
        (answered ? `; carried on ${answered} approved, answered or resumed while the demo was stopped` : '') +
        (report.settled.length ? `; ${report.settled.length} had already stopped` : '') +
        (report.rebuilt.length ? `; ${report.rebuilt.length} rebuilt from transcript` : '') +
        (report.failed.length ? `; ${report.failed.length} could not be recovered` : '') +
        '.\n',
    )
  }
  if (threads.length === 0 && report.elsewhere.length > 0) {
    // Starting six more threads beside ones a live demo runs would only confuse both.
    await rt.close()
    throw new SpindleError(
      'THREAD_LEASED',
      `${plural(report.elsewhere.length, 'unfinished thread')} in ${rt.dir} ${report.elsewhere.length === 1 ? 'is' : 'are'} run by another live spindle process. ` +
        `Stop that demo (or wait for it), or pass another ${options.database ? '--schema' : '--dir'}; \`spindle locks${at}\` shows who holds them.`,
      { details: { threadIds: report.elsewhere } },
    )
  }
  if (threads.length === 0) {
    out.write(`Starting ${plural(TOPICS.length, 'thread')} in ${rt.dir} (durability: ${rt.durability}). Kill me and run me again: I resume.\n`)
    threads = await Promise.all(
      TOPICS.map((topic) =>
        rt.spawn({
          directive: { name: `demo-${topic}`, prompt: `Collect facts about ${topic}.` },
          // One thread gets a tight turn limit to show a suspension for a person to approve.
          limits: topic === 'coral' ? { turns: 3 } : {},
        }),
      ),
    )
  }
  let lastLines = 0
  const summary = (): string => statusLine([...views.values()].map((v) => ({ status: v.status, spend: v.usage.spend })))
  const render = (): void => {
    const rows = [...views.values()].map(
      (v) => `  ${v.id.padEnd(32)} ${stateLabel(v).padEnd(24)} turn ${String(v.usage.turns).padStart(2)}  ${formatUsd(v.usage.spend)}`,
    )
    rows.push(`  ${summary()}`)
    if (tty) {
      if (lastLines > 0) out.write(`\x1b[${lastLines}A`)
      out.write(rows.map((r) => `\x1b[2K${r}\n`).join(''))
      lastLines = rows.length
    }
  }
  for (const thread of threads) {
    thread.subscribe((view) => {
      const previous = views.get(view.id)
      views.set(view.id, view)
      if (!tty && (previous?.status !== view.status || previous?.usage.turns !== view.usage.turns)) {
        out.write(`${view.id} ${stateLabel(view)} turn=${view.usage.turns} spend=${formatUsd(view.usage.spend)}\n`)
        if (previous?.status !== view.status) out.write(`threads: ${summary()}\n`)
      }
    })
  }
  const timer = tty ? setInterval(render, 100) : null
  // Ctrl-C: stop where we are. Nothing is lost either way (a second Ctrl-C, or kill -9, is as safe).
  const interrupted = new Promise<'interrupted'>((resolve) => process.once('SIGINT', () => resolve('interrupted')))
  const finished = Promise.all(threads.map((t) => t.done.then((o) => [t.id, o] as const)))
  const first = await Promise.race([finished, interrupted])
  if (first === 'interrupted') {
    if (timer) clearInterval(timer)
    await rt.close()
    out.write(`\nStopped. Every thread is checkpointed in ${rt.dir}; run the demo again to resume them.\n`)
    return 130
  }
  const outcomes = first
  if (timer) clearInterval(timer)
  render()
  out.write('\nDone:\n')
  for (const [id, outcome] of outcomes) {
    const detail = outcome.result ?? outcome.error?.message ?? (outcome.suspendReason ? `suspended (${outcome.suspendReason})` : '')
    out.write(`  ${id.padEnd(32)} ${outcome.status.padEnd(10)} turns ${outcome.cost.turns}  ${formatUsd(outcome.cost.spend)}  ${detail}\n`)
  }
  // After a restart this run carried only the unfinished threads: the rest are counted, so the
  // summary accounts for every thread in the directory.
  const ran = new Set(outcomes.map(([id]) => id))
  const earlier = rt.list().filter((r) => !ran.has(r.id))
  if (earlier.length > 0) {
    const line = statusLine(earlier.map((r) => ({ status: r.status, spend: r.cost?.spend ?? 0 })))
    out.write(`  and, stopped before this run: ${line} (spindle ls${at})\n`)
  }
  const stopped = [...outcomes]
  for (const r of earlier.filter((e) => e.status === 'suspended')) {
    try {
      stopped.push([r.id, await rt.get(r.id).done] as const)
    } catch {
      // A thread whose files cannot be read is not one to point a person at: `spindle doctor` is.
    }
  }
  for (const [id, outcome] of stopped) {
    if (outcome.status !== 'suspended') continue
    const then = `${at}, then run the demo again.`
    const call = outcome.suspendReason === 'limit' ? null : rt.get(id).getSnapshot().pendingCall
    if (outcome.suspendReason === 'limit') out.write(`${id} waits for a person at its limit: spindle approve ${id}${then}\n`)
    else if (call?.kind === 'approval') {
      out.write(`${id} waits for a person to approve its ${call.tool} call ${JSON.stringify(call.input)}: spindle approve ${id} (or spindle deny ${id} --reason …)${then}\n`)
    } else if (call?.kind === 'wait') {
      const { question, choices } = (call.request ?? {}) as { question?: string; choices?: string[] }
      out.write(`${id} asks a person: "${question ?? '?'}"${choices ? ` (${choices.join(', ')})` : ''}: spindle answer ${id} ${choices?.[0] ?? '<answer>'}${then}\n`)
    }
  }
  out.write(`Checkpoints written: ${rt.stats().checkpointsWritten} in ${plural(rt.stats().commits, 'group commit')}. Data: ${rt.dir}\n`)
  await rt.close()
  return 0
}
