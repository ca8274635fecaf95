/**
 * Child process of decisionKill.test.ts: a host that suspends a thread at its turn limit, or
 * decides its approval request and is killed with SIGKILL at the instant it opens the decision
 * file — after the decision is recorded in the transcript (durably: `approve` and `deny` wait for
 * that), before the file next to the request exists — or opens the directory again and runs what
 * is left to its end.
 *
 * argv: <dir> suspend | approve-kill <id> | deny-kill <id> | run
 * Prints one line on stdout when it is not killed: the suspended thread's id, or the threads' statuses as JSON.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, step, id] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: decisionKillWorker <dir> suspend | approve-kill <id> | deny-kill <id> | run')

if (step.endsWith('-kill')) {
  // The decision file is written atomically: a temp file beside it, opened first. Opening it is the
  // first thing the runtime does towards the file, so the kill lands before any byte of it exists.
  const open = fs.openSync
  Object.defineProperty(fs, 'openSync', {
    configurable: true,
    writable: true,
    value: (file: fs.PathLike, ...rest: unknown[]) => {
      if (String(file).includes('.decision.json')) process.kill(process.pid, 'SIGKILL')
      return (open as (...args: unknown[]) => number)(file, ...rest)
    },
  })
}

const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })
const model = scriptedModel((r) => (r.turn < 4 ? { text: `turn ${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] } : { text: `${r.directiveName} done` }))
const rt = await createRuntime({ dir, model, tools: [noop] })

if (step === 'suspend') {
  const thread = await rt.spawn({ directive: { name: 'capped', prompt: 'p' }, limits: { turns: 2 } })
  await thread.done
  // The approval request is written once the suspension is durable: wait for the file itself.
  const approvals = path.join(dir, 'threads', thread.id, 'approvals')
  while (!(fs.existsSync(approvals) && fs.readdirSync(approvals).some((n) => n.endsWith('.request.json')))) await new Promise((r) => setTimeout(r, 10))
  process.stdout.write(`${thread.id}\n`)
} else if (step === 'approve-kill') {
  await rt.approve(id!, { limits: { turns: 10 }, by: 'ada', message: 'go on' })
  process.stdout.write('not killed\n')
} else if (step === 'deny-kill') {
  await rt.deny(id!, 'too dear', { by: 'ada' })
  process.stdout.write('not killed\n')
} else {
  while (rt.active().length > 0) await Promise.all(rt.active().map((t) => t.done.catch(() => null)))
  process.stdout.write(`${JSON.stringify(rt.list().map((r) => ({ id: r.id, status: r.status, result: r.result })))}\n`)
}
await rt.close()
