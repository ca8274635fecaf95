/**
 * Child process of toolApprovalKill.test.ts: a host whose `deploy` tool needs approval and is not
 * idempotent (each run appends its environment to `<dir>.runs`, outside the data directory, so
 * runs are counted across processes), and whose `ask_human` tool waits for a person. Each step is
 * one process; the `-kill` steps end with SIGKILL at an exact instant:
 *
 * - `ship`: spawns a thread that calls deploy, waits until its approval request file exists, prints
 *   the thread's id and closes.
 * - `approve-kill-before-run <id>`: approves the call with edited input; killed as the tool's
 *   intent is about to be appended (CALL_DECIDED is in the transcript, the tool has not run).
 * - `approve-kill-in-run <id>`: approves it; killed inside the tool, after its effect (the line),
 *   before its result is recorded.
 * - `ask-kill [deadlineMs]`: spawns a thread that calls ask_human (with a deadline when given),
 *   waits until its request file exists, then kills itself.
 * - `pause-kill ship|ask`: spawns the thread; killed as the runtime opens the call's request file
 *   (TOOL_PAUSED is durable, the request file does not exist).
 * - `reopen <id>`: opens the directory and waits until thread `id` has its request file, closes.
 * - `run [clockOffsetMs]`: opens the directory (on a clock that many ms ahead: time that passed
 *   while no process ran), runs what is active to its end and prints, as JSON, the tool results
 *   each model call was sent, every thread's status and result, and the deploy runs.
 *
 * argv: <dir> <step> [arg]
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import type { Clock, ModelRequest } from '../../src/index.js'
import { askHuman, createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, step, arg] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: toolApprovalKillWorker <dir> ship | approve-kill-before-run <id> | approve-kill-in-run <id> | ask-kill [deadlineMs] | pause-kill ship|ask | reopen <id> | run [clockOffsetMs]')
const runsFile = `${dir}.runs`

/** Replaces `fs[name]` with a version that kills the process when `fatal(firstArg, secondArg)` says so. */
function killOn(name: 'writeSync' | 'openSync', fatal: (first: unknown, second: unknown) => boolean): void {
  const original = fs[name] as (...args: unknown[]) => unknown
  Object.defineProperty(fs, name, {
    configurable: true,
    writable: true,
    value: (...args: unknown[]) => {
      if (fatal(args[0], args[1])) process.kill(process.pid, 'SIGKILL')
      return original(...args)
    },
  })
}

// The transcript hands each line to the OS in one writeSync: killed before that call, the intent
// is not there and everything appended before it (CALL_DECIDED) is.
if (step === 'approve-kill-before-run') killOn('writeSync', (_fd, data) => typeof data === 'string' && data.includes('"type":"tool_intent"'))
// The request file is written atomically through a temp file named after it, opened first.
if (step === 'pause-kill') killOn('openSync', (file) => String(file).includes('.request.json'))

const deploy = defineTool({
  name: 'deploy',
  description: 'Deploy to an environment',
  input: z.object({ env: z.enum(['staging', 'production']) }),
  needsApproval: true,
  execute: ({ env }) => {
    fs.appendFileSync(runsFile, `${env}\n`)
    if (step === 'approve-kill-in-run') process.kill(process.pid, 'SIGKILL')
    return `deployed to ${env}`
  },
})
const ask = askHuman(step === 'ask-kill' && arg ? { deadlineMs: Number(arg) } : {})

const script = scriptedModel((r) => {
  if (r.turn > 1) return { text: `done: ${r.messages.at(-1)!.content}` }
  return r.directiveName === 'ship'
    ? { toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'production' } }] }
    : { toolCalls: [{ id: 'q1', name: 'ask_human', input: { question: 'Which environment?', choices: ['staging', 'production'] } }] }
})
const seen: Array<{ turn: number; toolResults: Array<{ callId: string; content: string }> }> = []
const model = {
  name: 'recording',
  generate(request: ModelRequest) {
    const toolResults = request.messages.filter((m) => m.role === 'tool').map((m) => ({ callId: (m as { toolCallId: string }).toolCallId, content: m.content }))
    seen.push({ turn: request.turn, toolResults })
    return script.generate(request)
  },
}

const offset = step === 'run' && arg ? Number(arg) : 0
const clock: Clock = {
  now: () => Date.now() + offset,
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
}
const rt = await createRuntime({ dir, model, tools: [deploy, ask], durability: 'fsync', shutdownSignals: [], userConfig: null, clock })

/** Resolves once thread `id` has an approval request file. */
async function requestFile(id: string): Promise<void> {
  const approvals = path.join(dir!, 'threads', id, 'approvals')
  while (!(fs.existsSync(approvals) && fs.readdirSync(approvals).some((n) => n.endsWith('.request.json')))) await new Promise((r) => setTimeout(r, 10))
}

if (step === 'ship' || step === 'ask-kill' || step === 'pause-kill') {
  const directive = step === 'ship' || arg === 'ship' ? 'ship' : 'ask'
  const thread = await rt.spawn({ directive: { name: directive, prompt: directive === 'ship' ? 'Ship it' : 'Ask where to ship' } })
  if (step === 'ship') process.stdout.write(`${thread.id}\n`)
  await requestFile(thread.id)
  if (step === 'ask-kill') process.kill(process.pid, 'SIGKILL')
  if (step === 'pause-kill') process.stdout.write('not killed\n')
} else if (step === 'approve-kill-before-run' || step === 'approve-kill-in-run') {
  await rt.approve(arg!, { input: { env: 'staging' }, by: 'ada', message: 'staging first' })
  await new Promise(() => {})
} else if (step === 'reopen') {
  // A runtime that never writes it keeps this process waiting: the parent's timeout says so.
  await requestFile(arg!)
  process.stdout.write('request written\n')
} else {
  // A deadline that has passed is acted on by a timer armed as the runtime opens: until it fires,
  // the thread is suspended, not active. A runtime that never fires it keeps this process waiting.
  if (offset > 0) while (rt.list().some((r) => r.status === 'suspended')) await new Promise((r) => setTimeout(r, 10))
  while (rt.active().length > 0) await Promise.all(rt.active().map((t) => t.done.catch(() => null)))
  const runs = fs.existsSync(runsFile) ? fs.readFileSync(runsFile, 'utf8').split('\n').filter(Boolean) : []
  const threads = rt.list().map((r) => ({ id: r.id, status: r.status, result: r.result }))
  process.stdout.write(`${JSON.stringify({ seen, threads, runs })}\n`)
}
await rt.close()
