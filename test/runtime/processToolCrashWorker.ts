/**
 * Child process of processToolCrash.test.ts: opens a runtime on a data directory and runs one
 * thread whose first turn calls a process tool that never finishes by itself. The test kills this
 * process with SIGKILL while the tool runs.
 *
 * argv: <dir> <work dir> <idempotent|plain>
 */
import { createRuntime } from '../../src/index.js'
import { crashTool, crashScript } from './processToolCrashShared.js'

const [dir, work, mode] = process.argv.slice(2)
if (!dir || !work || (mode !== 'idempotent' && mode !== 'plain')) throw new Error('usage: processToolCrashWorker <dir> <work> <idempotent|plain>')
const rt = await createRuntime({ dir, model: crashScript(), tools: [crashTool(work, mode === 'idempotent')], userConfig: null })
const thread = await rt.spawn({ directive: { name: 'crashy', prompt: 'Run the job' } })
process.stdout.write(`${thread.id}\n`)
await thread.done
await rt.close()
