/**
 * Child process of the crash-loop test: opens a runtime on a data directory (recovering whatever
 * its predecessor left), spawns the workload if it is not all there yet — the ordinary threads
 * first, the thread that kills the process last — and runs until every thread has stopped. Prints
 * its recovery report as one JSON line.
 *
 * argv: <dir> <poison|flaky> <ordinary threads>, or <dir> slow <threads>: only slow threads, and
 * the line `all calling` once each of them is in its model call; slowpoison: the slow threads,
 * then `mpoison`, whose model call ends the process.
 */
import path from 'node:path'
import { createRuntime } from '../../src/index.js'
import { crashLoopModel, crashLoopTools, slowModel } from './crashLoopWorkload.js'

const [dir, scenario = 'poison', countArg = '4'] = process.argv.slice(2)
if (!dir || !['poison', 'flaky', 'slow', 'slowpoison'].includes(scenario)) throw new Error('usage: crashLoopWorker <dir> <poison|flaky|slow|slowpoison> [threads]')
const count = Number(countArg)
const slow = scenario === 'slow' || scenario === 'slowpoison'
const names = slow
  ? [...Array.from({ length: count }, (_, i) => `slow${i}`), ...(scenario === 'slowpoison' ? ['mpoison'] : [])]
  : [...Array.from({ length: count }, (_, i) => `ordinary${i}`), scenario]
const model = slow ? slowModel(path.join(dir, 'calls.log'), count, () => process.stdout.write('all calling\n')) : crashLoopModel()

const rt = await createRuntime({ dir, model, tools: crashLoopTools(dir, { explodes: true }), durability: 'fsync' })
process.stdout.write(`${JSON.stringify(rt.lastRecovery)}\n`)
for (let i = rt.list().length; i < names.length; i++) {
  await rt.spawn({ directive: { name: names[i]!, prompt: `thread ${i}` } })
}
await Promise.all(rt.active().map((t) => t.done.catch(() => {})))
await rt.close()
