/**
 * Child process of the crash test: opens a runtime on a data directory (recovering whatever a
 * killed predecessor left), spawns the workload if none exists yet, and runs until every thread
 * has stopped. The parent kills it with SIGKILL at random moments.
 *
 * argv: <dir> <threads> <turns> [fsync|process]; <turns> is a cap: the parent ends the work with a `finish` file.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { trackDurable } from './trackDurable.js'

const [dir, threadsArg = '50', turnsArg = '8', durabilityArg = 'fsync'] = process.argv.slice(2)
if (!dir) throw new Error('usage: worker <dir> [threads] [turns]')
// The power-loss row: record what each fdatasync made durable, before spindle is loaded.
if (process.env.SPINDLE_TRACK_DURABLE === '1') trackDurable(fs.realpathSync(dir))
const { createRuntime, defineTool, scriptedModel } = await import('../../src/index.js')
// The parent times its kill from here: loading the modules is no moment of spindle's to test, and
// on a slow machine it took most of the kill window.
process.stdout.write('loaded\n')
const threads = Number(threadsArg)
const turns = Number(turnsArg)
const ledger = path.join(dir, 'charges.log')
// The parent writes this file once it has killed enough processes: from then on each thread ends at
// its next turn. Until then they go on (up to \`turns\`), however fast this machine runs them.
const finish = path.join(dir, 'finish')

// Not idempotent: each run appends a line. A key appearing twice means an effect ran twice.
const charge = defineTool({
  name: 'charge',
  description: 'Charge a card',
  input: z.object({ cents: z.number().int() }),
  execute: ({ cents }, { idempotencyKey }) => {
    const fd = fs.openSync(ledger, 'a')
    fs.writeSync(fd, `${idempotencyKey} ${cents}\n`)
    fs.fsyncSync(fd)
    fs.closeSync(fd)
    return { charged: cents }
  },
})

const lookup = defineTool({
  name: 'lookup',
  description: 'Look something up',
  input: z.object({ q: z.string() }),
  idempotent: true,
  execute: async ({ q }) => {
    await new Promise((r) => setTimeout(r, 2))
    return { q, answer: q.length }
  },
})

const model = scriptedModel(
  (request) =>
    request.turn < turns && !fs.existsSync(finish)
      ? { toolCalls: request.turn % 3 === 0 ? [{ name: 'charge', input: { cents: request.turn } }, { name: 'lookup', input: { q: `t${request.turn}` } }] : [{ name: 'lookup', input: { q: `t${request.turn}` } }] }
      : { text: `done after ${request.turn} turns` },
  { latencyMs: (r) => 3 + ((r.turn * 7 + r.threadId.length) % 11) },
)

const durability = durabilityArg === 'process' ? 'process' : 'fsync'
// Threads run until the parent says finish; lift the default turn limit. A kill every few hundred ms
// lands now and then just while a crash-loop suspect runs alone, and several in a row would
// quarantine an innocent thread: this test is about recovery, crashLoop.test.ts about crash loops
// (suspects still run one at a time here, from the second recovery at the same point).
const rt = await createRuntime({ dir, model, tools: [charge, lookup], durability, defaultLimits: { turns: null }, config: { supervision: { maxRecoveries: 8 } } })
// A predecessor killed while spawning left fewer threads: spawn the rest.
for (let i = rt.list().length; i < threads; i++) {
  {
    await rt.spawn({ directive: { name: `crash${i}`, prompt: `thread ${i}` } })
  }
}
await Promise.all(rt.active().map((t) => t.done))
await rt.close()
process.stdout.write('all threads stopped\n')
