/**
 * Child process of structuredKill.test.ts: a host whose thread has a zod output schema. `start`
 * spawns it; its first answer fails the schema, and the process is killed with SIGKILL inside the
 * second model call (the invalid answer and its errors are durable, the retry not answered).
 * `resume` opens the directory again and carries the thread on: this process has no zod schema
 * for it, so its answer is validated against the JSON Schema the thread kept. It prints every model call it made (with the conversation's last message) and
 * how the thread ended, as JSON.
 *
 * argv: <dir> start | resume
 */
import type { ModelRequest } from '../../src/index.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { z } from 'zod'

const [dir, step] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: structuredKillWorker <dir> start | resume')

const Invoice = z.object({ number: z.string().regex(/^INV-\d+$/), total: z.number().positive() })
const script = scriptedModel([{ text: '{"number": "42", "total": -1}' }, { text: '{"number": "INV-42", "total": 99.5}' }])
const seen: Array<{ turn: number; last: string }> = []
const model = {
  name: 'recording',
  generate(request: ModelRequest) {
    seen.push({ turn: request.turn, last: request.messages.at(-1)!.content })
    if (step === 'start' && request.turn === 2) {
      process.stdout.write(`${request.threadId}\n`)
      process.kill(process.pid, 'SIGKILL')
    }
    return script.generate(request)
  },
}
const rt = await createRuntime({ dir, model, durability: 'fsync', shutdownSignals: [] })

if (step === 'start') {
  await rt.spawn({ directive: { name: 'invoice', prompt: 'Read the invoice', output: Invoice } })
  await new Promise(() => {})
} else {
  // Every thread of the directory: an instant model can finish it while the runtime opens.
  const outcomes = await Promise.all(rt.list().map((r) => rt.get(r.id).done))
  process.stdout.write(`${JSON.stringify({ seen, outcomes, threads: rt.list().map((r) => ({ id: r.id, status: r.status })) })}\n`)
  await rt.close()
}
