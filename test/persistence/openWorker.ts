/**
 * A runtime process that opens `dir` the moment `go` appears, then closes it; prints `ok` or the
 * error's code. Used to open a fresh data directory from several processes at once.
 *
 *   openWorker.js <dir> <go>
 */
import fs from 'node:fs'
import { createRuntime, scriptedModel } from '../../src/index.js'

const [dir, go] = process.argv.slice(2) as [string, string]
while (!fs.existsSync(go)) await new Promise((r) => setTimeout(r, 2))
try {
  const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'x' }]), userConfig: null })
  await rt.close()
  process.stdout.write('ok')
} catch (error) {
  process.stdout.write(`FAIL ${(error as { code?: string }).code} ${(error as Error).message}`)
}
