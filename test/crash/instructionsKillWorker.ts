/**
 * Child process of instructionsKill.test.ts: a host whose thread has instructions. `start` spawns
 * it and is killed with SIGKILL inside its second model call (the first reply and tool result are
 * durable); `resume` opens the directory again, carries the thread on, and prints what every model
 * call it made was given as instructions, and how the thread ended, as JSON.
 *
 * argv: <dir> start | resume
 */
import { z } from 'zod'
import type { ModelRequest } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, step] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: instructionsKillWorker <dir> start | resume')

const INSTRUCTIONS = 'You are the archivist. Quote sources by their shelf mark.'

const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => 'ok' })
const script = scriptedModel([{ toolCalls: [{ name: 'noop' }] }, { toolCalls: [{ name: 'noop' }] }, { text: 'archived' }])
const seen: Array<{ turn: number; instructions: string | null }> = []
const model = {
  name: 'recording',
  generate(request: ModelRequest) {
    seen.push({ turn: request.turn, instructions: request.instructions ?? null })
    if (step === 'start' && request.turn === 2) {
      process.stdout.write(`${request.threadId}\n`)
      process.kill(process.pid, 'SIGKILL')
    }
    return script.generate(request)
  },
}
const rt = await createRuntime({ dir, model, tools: [noop], durability: 'fsync', shutdownSignals: [] })

if (step === 'start') {
  await rt.spawn({ directive: { name: 'archive', prompt: 'File the letters', instructions: INSTRUCTIONS } })
  await new Promise(() => {})
} else {
  while (rt.active().length > 0) await Promise.all(rt.active().map((t) => t.done.catch(() => null)))
  process.stdout.write(`${JSON.stringify({ seen, threads: rt.list().map((r) => ({ id: r.id, status: r.status, result: r.result })) })}\n`)
  await rt.close()
}
