/**
 * Child process of callerIds.test.ts: a host program spawning threads under ids it chose.
 *
 * argv: <dir> <step> …
 *   race <hang|done> <prompt> <count> <go file>
 *                  opens a runtime, prints `ready`, and once the go file exists spawns `order-0` …
 *                  `order-<count-1>` all at once (directive `fulfil`, the prompt given); prints one
 *                  JSON line per spawn, `{ id, status }` or `{ error, message }`, then `finished`
 *   mid <id> <prompt> <kill|stop>
 *                  spawns the id and stops inside the spawn: its lease taken, its first transcript
 *                  entry written and its actor made, its registry row not written (the inspector
 *                  sees the actor made). Prints `at window`, then is killed there with SIGKILL
 *                  (`kill`) or stopped with SIGSTOP (`stop`: alive, holding the id's lease, until
 *                  the test kills it)
 *   gap <id> <prompt> <go file>
 *                  once the go file exists, spawns the id and is stopped with SIGSTOP right after its
 *                  first registry read of the id found no row, before it takes the id's lease
 *                  (the registry's statement is wrapped); prints `at gap` first, then, continued
 *                  by the test, what the spawn gave as `race` does, and `finished`
 *   kill-after <id> <prompt>
 *                  spawns the id, prints `spawned`, and is killed with SIGKILL before it returns
 *                  anything else
 */
import fs from 'node:fs'
import Database from 'better-sqlite3'
import { createRuntime, scriptedModel } from '../../src/index.js'
import type { ScriptedTurn } from '../../src/index.js'

const [dir, step, ...rest] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: callerIdsWorker <dir> <step> …')

const hang = (): ScriptedTurn => ({ faults: [{ fault: 'hang' }], reply: {} })
const done = (): ScriptedTurn => ({ text: 'fulfilled' })
const base = { dir, durability: 'process' as const, userConfig: null, shutdownSignals: [] as NodeJS.Signals[] }

if (step === 'race') {
  const [model, prompt, count, go] = rest
  const rt = await createRuntime({ ...base, model: scriptedModel(model === 'hang' ? hang : done) })
  process.stdout.write('ready\n')
  while (!fs.existsSync(go!)) await new Promise((resolve) => setTimeout(resolve, 1))
  const results = await Promise.allSettled(
    Array.from({ length: Number(count) }, (_, i) => rt.spawn({ id: `order-${i}`, directive: { name: 'fulfil', prompt: prompt! } })),
  )
  for (const result of results) {
    const line =
      result.status === 'fulfilled'
        ? { id: result.value.id, status: result.value.status }
        : { error: (result.reason as { code?: string }).code, message: (result.reason as Error).message }
    process.stdout.write(`${JSON.stringify(line)}\n`)
  }
  // Threads of the 'done' model finish here before it closes; 'hang' ones stay where they are.
  if (model === 'done') {
    await Promise.all(rt.active().map((thread) => thread.done.catch(() => null)))
  }
  await rt.close()
  process.stdout.write('finished\n')
} else if (step === 'mid') {
  const [id, prompt, how] = rest
  const rt = await createRuntime({
    ...base,
    model: scriptedModel(done),
    inspect: (event) => {
      // The thread's actor is made after its spawn entry is written and before its row is staged.
      if (event.type === '@xstate.actor' && (event.actorRef as unknown as { id: string }).id === id) {
        fs.writeSync(1, 'at window\n')
        process.kill(process.pid, how === 'stop' ? 'SIGSTOP' : 'SIGKILL')
      }
    },
  })
  await rt.spawn({ id: id!, directive: { name: 'fulfil', prompt: prompt! } })
  process.stdout.write('spawn returned\n')
} else if (step === 'gap') {
  const [id, prompt, go] = rest
  let armed = false
  const prepare = Database.prototype.prepare
  Database.prototype.prepare = function (this: Database.Database, sql: string) {
    const statement = prepare.call(this, sql)
    if (sql !== 'SELECT * FROM threads WHERE id = ?') return statement
    const get = statement.get.bind(statement) as (...params: unknown[]) => unknown
    statement.get = ((...params: unknown[]) => {
      const row = get(...params)
      if (armed && params[0] === id && row === undefined) {
        armed = false
        fs.writeSync(1, 'at gap\n')
        process.kill(process.pid, 'SIGSTOP')
      }
      return row
    }) as typeof statement.get
    return statement
  } as typeof prepare
  const rt = await createRuntime({ ...base, model: scriptedModel(done) })
  process.stdout.write('ready\n')
  while (!fs.existsSync(go!)) await new Promise((resolve) => setTimeout(resolve, 1))
  armed = true
  try {
    const thread = await rt.spawn({ id: id!, directive: { name: 'fulfil', prompt: prompt! } })
    process.stdout.write(`${JSON.stringify({ id: thread.id, status: thread.status })}\n`)
  } catch (error) {
    process.stdout.write(`${JSON.stringify({ error: (error as { code?: string }).code, message: (error as Error).message })}\n`)
  }
  await rt.close()
  process.stdout.write('finished\n')
} else if (step === 'kill-after') {
  const [id, prompt] = rest
  const rt = await createRuntime({ ...base, model: scriptedModel(hang) })
  await rt.spawn({ id: id!, directive: { name: 'fulfil', prompt: prompt! } })
  fs.writeSync(1, 'spawned\n')
  process.kill(process.pid, 'SIGKILL')
} else {
  throw new Error(`unknown step ${step}`)
}
