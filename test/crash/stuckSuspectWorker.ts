/**
 * Child process of the crash-loop test's stuck suspect: a thread whose tool never returns (no tool
 * timeout). argv: <dir> <ordinary threads to spawn>. Spawns `stuck` if the directory has no thread
 * yet, and prints `stuck in tool` each time its tool starts; the test kills the process there.
 * With ordinary threads to spawn, spawns them after recovery, waits for them, prints one JSON
 * line (their outcomes and the problems heard) and exits, leaving `stuck` where it is.
 */
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, ordinaryArg = '0'] = process.argv.slice(2)
if (!dir) throw new Error('usage: stuckSuspectWorker <dir> <ordinary threads>')

const hang = defineTool({
  name: 'hang',
  description: 'Never returns',
  input: z.object({}),
  idempotent: true,
  timeoutMs: Infinity,
  execute: () => {
    process.stdout.write('stuck in tool\n')
    return new Promise(() => {})
  },
})
const model = scriptedModel((r) => (r.directiveName === 'stuck' && r.turn === 1 ? { toolCalls: [{ name: 'hang', input: {} }] } : { text: `${r.directiveName} done` }))
const problems: string[] = []
const rt = await createRuntime({
  dir,
  model,
  tools: [hang],
  durability: 'fsync',
  userConfig: null,
  config: { supervision: { aloneMs: 500 } },
  onProblem: (p) => problems.push(p.code),
})
if (rt.list().length === 0) await rt.spawn({ directive: { name: 'stuck', prompt: 'p' } })
const ordinary = Number(ordinaryArg)
if (ordinary > 0) {
  const threads = await Promise.all(Array.from({ length: ordinary }, (_, i) => rt.spawn({ directive: { name: `ordinary${i}`, prompt: 'p' } })))
  const outcomes = await Promise.all(threads.map((t) => t.done))
  process.stdout.write(`${JSON.stringify({ statuses: outcomes.map((o) => o.status), problems})}\n`)
  process.exit(0)
}
