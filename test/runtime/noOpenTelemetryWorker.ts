/**
 * Child process of tracing.test.ts, run with `@opentelemetry/api` made unresolvable
 * (helpers/hideOpenTelemetry.ts): a thread runs to its end, then a runtime is opened with a
 * tracerProvider. Prints one JSON line: the outcome, whether a traceparent was kept, and the error
 * code the second runtime threw.
 *
 * argv: <dir>
 */
import fs from 'node:fs'
import path from 'node:path'
import { createRuntime, isSpindleError, scriptedModel } from '../../src/index.js'

const [dir] = process.argv.slice(2)
if (!dir) throw new Error('usage: noOpenTelemetryWorker <dir>')
let apiLoads = true
try {
  await import('@opentelemetry/api')
} catch {
  apiLoads = false
}
const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'no tracing here' }]), shutdownSignals: [] })
const thread = await rt.spawn({ directive: { name: 'plain', prompt: 'go' } })
const outcome = await thread.done
await rt.close()
const spawnEntry = JSON.parse(fs.readFileSync(path.join(dir, 'threads', thread.id, 'transcript.jsonl'), 'utf8').split('\n')[0]!) as { data: { traceparent?: string } }
let withProvider: string
try {
  const other = await createRuntime({ dir, model: scriptedModel([]), shutdownSignals: [], telemetry: { tracerProvider: { getTracer: () => ({}) } } })
  await other.close()
  withProvider = 'opened'
} catch (error) {
  withProvider = isSpindleError(error) ? error.code : String(error)
}
fs.writeSync(1, `${JSON.stringify({ apiLoads, status: outcome.status, result: outcome.result, traceparent: spawnEntry.data.traceparent ?? null, withProvider })}\n`)
