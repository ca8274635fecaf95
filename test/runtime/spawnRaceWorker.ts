/**
 * Child process of spawnRaces.test.ts: a second runtime process on the test's data directory.
 * Once the go file exists it spawns `count` children under the parent the test's process runs, all
 * at once, and prints one JSON line per spawn: `{ spawned }` or `{ error, message }`.
 *
 * argv: <dir> <parent id> <name> <count> <go file>. Prints "ready" once its runtime is open.
 */
import fs from 'node:fs'
import { createRuntime, scriptedModel } from '../../src/index.js'

const [dir, parentId, name, count, go] = process.argv.slice(2)
if (!dir || !parentId || !name || !count || !go) throw new Error('usage: spawnRaceWorker <dir> <parent id> <name> <count> <go file>')

const rt = await createRuntime({ dir, model: scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: {} })), durability: 'process', userConfig: null })
process.stdout.write('ready\n')
while (!fs.existsSync(go)) await new Promise((resolve) => setTimeout(resolve, 2))
const results = await Promise.allSettled(Array.from({ length: Number(count) }, (_, i) => rt.spawn({ directive: { name: `${name}${i}`, prompt: 'c' }, parentId })))
for (const result of results) {
  const line =
    result.status === 'fulfilled'
      ? { spawned: result.value.id }
      : { error: (result.reason as { code?: string }).code, message: (result.reason as Error).message }
  process.stdout.write(`${JSON.stringify(line)}\n`)
}
await rt.close()
