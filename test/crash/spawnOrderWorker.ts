/**
 * Child process of spawnOrder.test.ts: a runtime with a lead thread holding a spend budget (it
 * stays in its model call). On "go" from stdin it spawns a child under the lead.
 *
 * argv: <dir>. Prints "ready", then one JSON line with the spawn's outcome.
 */
import { createInterface } from 'node:readline'
import { createRuntime, scriptedModel } from '../../src/index.js'

const [dir] = process.argv.slice(2)
if (!dir) throw new Error('usage: spawnOrderWorker <dir>')

const model = scriptedModel((r) => (r.directiveName === 'lead' ? { faults: [{ fault: 'hang' }], reply: { text: 'never' } } : { text: 'kid done', usage: { inputTokens: 1, outputTokens: 1, cost: 0.001 } }))
const rt = await createRuntime({ dir, model, defaultLimits: { turns: null } })
const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'lead' }, limits: { spend: 1 } })
process.stdout.write('ready\n')
const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  if (line !== 'go') continue
  try {
    const kid = await rt.spawn({ directive: { name: 'kid', prompt: 'kid' }, limits: { spend: 0.4 }, parentId: lead.id })
    process.stdout.write(`${JSON.stringify({ spawned: kid.id, status: (await kid.done).status })}\n`)
  } catch (error) {
    process.stdout.write(`${JSON.stringify({ error: (error as { code?: string }).code, message: (error as Error).message })}\n`)
  }
  break
}
lines.close()
await rt.close()
