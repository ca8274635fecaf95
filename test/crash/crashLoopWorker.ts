/**
 * Child process of the crash-loop test: opens a runtime on a data directory (recovering whatever
 * its predecessor left), spawns the workload if it is not all there yet — the ordinary threads
 * first, the thread that kills the process last — and runs until every thread has stopped. Prints
 * its recovery report as one JSON line.
 *
 * argv: <dir> <poison|flaky> <ordinary threads>
 */
import { createRuntime } from '../../src/index.js'
import { crashLoopModel, crashLoopTools } from './crashLoopWorkload.js'

const [dir, scenario = 'poison', ordinaryArg = '4'] = process.argv.slice(2)
if (!dir || (scenario !== 'poison' && scenario !== 'flaky')) throw new Error('usage: crashLoopWorker <dir> <poison|flaky> [ordinary threads]')
const names = [...Array.from({ length: Number(ordinaryArg) }, (_, i) => `ordinary${i}`), scenario]

const rt = await createRuntime({ dir, model: crashLoopModel(), tools: crashLoopTools(dir, { explodes: true }), durability: 'fsync' })
process.stdout.write(`${JSON.stringify(rt.lastRecovery)}\n`)
for (let i = rt.list().length; i < names.length; i++) {
  await rt.spawn({ directive: { name: names[i]!, prompt: `thread ${i}` } })
}
await Promise.all(rt.active().map((t) => t.done.catch(() => {})))
await rt.close()
