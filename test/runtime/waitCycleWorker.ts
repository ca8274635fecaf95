/**
 * Child process of waitCyclesAcrossProcesses.test.ts: a second runtime process on the same data
 * directory. Its one thread, `far`, waits for a thread the test's process runs, then replies with
 * what its wait gave. Prints `spawned <id>`, then `done <outcome as JSON>`.
 *
 * argv: <dir> <id to wait for> <timeout seconds>
 */
import { createRuntime, scriptedModel } from '../../src/index.js'
import { sawOfWait } from '../helpers/waits.js'

const [dir, target, timeout] = process.argv.slice(2)
if (!dir || !target || !timeout) throw new Error('usage: waitCycleWorker <dir> <id to wait for> <timeout seconds>')

const model = scriptedModel((r) =>
  r.turn === 1 ? { toolCalls: [{ name: 'wait_threads', input: { threadIds: [target], timeoutSeconds: Number(timeout) } }] } : { text: sawOfWait(r.messages) },
)
const rt = await createRuntime({ dir, model, durability: 'process', userConfig: null })
const thread = await rt.spawn({ directive: { name: 'far', prompt: 'wait for the other process' } })
process.stdout.write(`spawned ${thread.id}\n`)
const outcome = await thread.done
await rt.close()
process.stdout.write(`done ${JSON.stringify(outcome)}\n`)
