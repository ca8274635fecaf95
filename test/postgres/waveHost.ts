/**
 * Host process of the PostgreSQL wave test: a runtime with `maxThreads: 0`, as a web server would
 * run, that only spawns and watches. It spawns <leads> lead threads, each with a spend budget (the
 * first <early> of them before it reads a line from its standard input), then
 * holds a handle on every thread of the wave — the leads it spawned and each child as soon as it
 * appears in the database — and prints how each settled, wherever it ran.
 *
 * env: PG_URL, PG_SCHEMA. argv: <leads> <children> <leadSpend> <early>.
 * Prints `spawned <id>` per lead, `waiting for workers` after the early ones, `settled <id> <status>` per thread, then `wave settled`.
 */
import type { ThreadHandle } from '../../src/index.js'
import { createRuntime, scriptedModel } from '../../src/index.js'

const [leadsArg, childrenArg, leadSpendArg, earlyArg] = process.argv.slice(2)
if (!leadsArg || !childrenArg || !leadSpendArg || !earlyArg) throw new Error('usage: waveHost <leads> <children> <leadSpend> <early>')
const leads = Number(leadsArg)
const early = Number(earlyArg)
const children = Number(childrenArg)

const rt = await createRuntime({
  database: { url: process.env.PG_URL!, schema: process.env.PG_SCHEMA! },
  maxThreads: 0,
  // Never called: this runtime runs no thread.
  model: scriptedModel(() => {
    throw new Error('the host ran a model call')
  }),
  userConfig: null,
  shutdownSignals: [],
  onProblem: (problem) => process.stderr.write(`problem ${JSON.stringify(problem)}\n`),
})

const settled: Array<Promise<void>> = []
const held = new Set<string>()
function hold(handle: ThreadHandle): void {
  held.add(handle.id)
  settled.push(handle.done.then((outcome) => void process.stdout.write(`settled ${handle.id} ${outcome.status} ${JSON.stringify(outcome.error ?? null)}\n`)))
}

// The first leads go in before any worker runs (they are recovered by workers as they open), the
// rest once the test says the workers run (they hear of them through the database).
for (let i = 0; i < leads; i++) {
  if (i === early) {
    process.stdout.write('waiting for workers\n')
    await new Promise((resolve) => process.stdin.once('data', resolve))
    process.stdin.pause()
  }
  const handle = await rt.spawn({ directive: { name: `lead${i}`, prompt: `run wave ${i}` }, limits: { spend: Number(leadSpendArg) } })
  process.stdout.write(`spawned ${handle.id}\n`)
  hold(handle)
}
// Children are made on the workers: a handle on each as soon as the database has it, so the host
// watches threads that may change worker mid-run.
while (held.size < leads * (1 + children)) {
  for (const record of rt.list()) if (!held.has(record.id)) hold(rt.get(record.id))
  await new Promise((r) => setTimeout(r, 20))
}
await Promise.all(settled)
process.stdout.write('wave settled\n')
await rt.close()
