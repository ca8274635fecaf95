/**
 * Child process of the PostgreSQL cluster tests: a runtime on a shared database, with no data
 * directory at all. With `spawn` it starts the threads; with `join` it only recovers and, by its
 * heartbeat, takes over orphans. Every model call is logged with this process's pid to a file the
 * test reads (the test's own observation, not the runtime's state).
 *
 * env: PG_URL, PG_SCHEMA. argv: spawn|join <threads> <turns> <thresholdMs> <callsLog>
 */
import fs from 'node:fs'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [mode, threadsArg = '4', turnsArg = '40', thresholdArg = '3000', calls = ''] = process.argv.slice(2)
if ((mode !== 'spawn' && mode !== 'join') || !calls) throw new Error('usage: clusterWorker spawn|join <threads> <turns> <thresholdMs> <callsLog>')
const turns = Number(turnsArg)

const tick = defineTool({ name: 'tick', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
const model = scriptedModel(
  (r) => {
    fs.appendFileSync(calls, `${r.threadId} ${r.turn} ${process.pid}\n`)
    return r.turn < turns ? { text: `turn ${r.turn}`, toolCalls: [{ name: 'tick', input: {} }] } : { text: 'done' }
  },
  { latencyMs: 20 },
)

const rt = await createRuntime({
  database: { url: process.env.PG_URL!, schema: process.env.PG_SCHEMA! },
  model,
  tools: [tick],
  defaultLimits: { turns: null },
  config: { orphans: { thresholdMs: Number(thresholdArg) } },
  userConfig: null,
  // Reported problems go to stderr, where the test prints them when it fails.
  onProblem: (problem) => process.stderr.write(`problem ${JSON.stringify(problem)}\n`),
})
process.stdout.write(`ready ${process.pid} resumed=${rt.lastRecovery.resumed.length} elsewhere=${rt.lastRecovery.elsewhere.length}\n`)
if (mode === 'spawn') {
  for (let i = 0; i < Number(threadsArg); i++) await rt.spawn({ directive: { name: `leased${i}`, prompt: `thread ${i}` } })
  process.stdout.write('spawned\n')
}
// Run until every thread of the database has stopped, whoever ran it.
for (;;) {
  await new Promise((r) => setTimeout(r, 100))
  if (rt.list({ status: ['created', 'running'] }).length === 0 && rt.active().length === 0) break
}
await rt.close()
process.stdout.write('all stopped\n')
