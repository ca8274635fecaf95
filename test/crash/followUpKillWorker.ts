/**
 * Child process of followUpKill.test.ts: a chat host. `chat` spawns a thread, awaits its answer,
 * follows it up with the next user message and is killed with SIGKILL inside the follow-up's model
 * call; `resume` opens the directory again and prints, as JSON, the conversation each model call it
 * made was given and every thread's status and result.
 *
 * argv: <dir> chat | resume
 */
import type { ModelRequest } from '../../src/index.js'
import { createRuntime, scriptedModel } from '../../src/index.js'

const [dir, step] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: followUpKillWorker <dir> chat | resume')

const answers = scriptedModel((request) => ({ text: request.messages.at(-1)!.content.includes('Germany') ? 'Berlin' : 'Paris' }))
const seen: string[][] = []
const model = {
  name: 'chat',
  generate(request: ModelRequest) {
    seen.push(request.messages.map((m) => m.content))
    if (step === 'chat' && request.turn === 2) process.kill(process.pid, 'SIGKILL')
    return answers.generate(request)
  },
}
const rt = await createRuntime({ dir, model, durability: 'fsync', shutdownSignals: [] })

if (step === 'chat') {
  const first = await rt.spawn({ directive: { name: 'chat', prompt: 'Capital of France?' } })
  await first.done
  await rt.followUp(first.id, 'And Germany?')
  await new Promise(() => {})
} else {
  while (rt.active().length > 0) await Promise.all(rt.active().map((t) => t.done.catch(() => null)))
  const threads = rt.list().map((r) => ({ id: r.id, status: r.status, result: r.result, previousThreadId: r.previousThreadId }))
  process.stdout.write(`${JSON.stringify({ seen, threads })}\n`)
  await rt.close()
}
