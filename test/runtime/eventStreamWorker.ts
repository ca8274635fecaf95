/**
 * The second process of eventStream.test.ts. `decide <dir> <ship1> <ship2> <ask> <ship3>`: a
 * runtime on the directory approves the first thread's call with edited input, denies the
 * second's, answers the third's question and cancels the fourth, each run to its end here, then
 * closes. `hold <dir>`: spawns a `hold` thread, prints its id once the stream says it started,
 * and waits (to be SIGKILLed mid model call).
 */
import { createRuntime } from '../../src/index.js'
import { model, tools } from './eventStreamShared.js'

const [mode, dir, ...ids] = process.argv.slice(2)

async function decide(): Promise<void> {
  const rt = await createRuntime({ dir: dir!, model: model({ answers: true }), tools: tools(), recover: false, userConfig: null, shutdownSignals: [] })
  const [approved, denied, answered, cancelled] = ids as [string, string, string, string]
  await (await rt.approve(approved, { input: { env: 'staging' }, by: 'worker', message: 'staging first' })).done
  await rt.deny(denied, 'not on a Friday', { by: 'worker' })
  await rt.get(denied).done
  await (await rt.answer(answered, 'Monday', { by: 'worker' })).done
  await rt.cancel(cancelled, 'no longer needed')
  await rt.close()
}

async function hold(): Promise<void> {
  const rt = await createRuntime({ dir: dir!, model: model({ answers: false }), tools: tools(), recover: false, userConfig: null, shutdownSignals: [] })
  const started = new Promise<string>((resolve) => rt.on('thread.started', (event) => resolve(event.threadId)))
  await rt.spawn({ directive: { name: 'hold', prompt: 'Hold on' } })
  process.stdout.write(`${await started}\n`)
  await new Promise(() => {})
}

await (mode === 'hold' ? hold() : decide())
