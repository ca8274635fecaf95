/**
 * Child process of the lease test: a runtime on a shared data directory. With `spawn` it starts
 * the threads; with `join` it only recovers (and, by its heartbeat, takes over orphans). Every
 * model call is logged with this process's pid, so the test can see which process ran which turn.
 *
 * argv: <dir> spawn|join <threads> <turns> <thresholdMs>
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, mode, threadsArg = '4', turnsArg = '40', thresholdArg = '1500'] = process.argv.slice(2)
if (!dir || (mode !== 'spawn' && mode !== 'join')) throw new Error('usage: leaseWorker <dir> spawn|join [threads] [turns] [thresholdMs]')
const turns = Number(turnsArg)
const calls = path.join(dir, 'calls.log')

const tick = defineTool({ name: 'tick', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
const model = scriptedModel(
  (r) => {
    fs.appendFileSync(calls, `${r.threadId} ${r.turn} ${process.pid}\n`)
    return r.turn < turns ? { text: `turn ${r.turn}`, toolCalls: [{ name: 'tick', input: {} }] } : { text: 'done' }
  },
  { latencyMs: 40 },
)

const rt = await createRuntime({
  dir,
  model,
  tools: [tick],
  durability: 'fsync',
  defaultLimits: { turns: null },
  config: { orphans: { thresholdMs: Number(thresholdArg) } },
})
process.stdout.write(`ready ${process.pid} resumed=${rt.lastRecovery.resumed.length} elsewhere=${rt.lastRecovery.elsewhere.length}\n`)
if (mode === 'spawn') {
  for (let i = 0; i < Number(threadsArg); i++) await rt.spawn({ directive: { name: `leased${i}`, prompt: `thread ${i}` } })
  process.stdout.write('spawned\n')
}
// Run until every thread of the directory has stopped, whoever ran it.
for (;;) {
  await new Promise((r) => setTimeout(r, 100))
  if (rt.list({ status: ['created', 'running'] }).length === 0 && rt.active().length === 0) break
}
await rt.close()
process.stdout.write('all stopped\n')
