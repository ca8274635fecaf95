/**
 * A host program as a user writes one, copied into a fresh project that installed the packed
 * spindle: it imports the package by name only (`spindle`, `spindle/testing`, `spindle/ai-sdk`)
 * and prints what it saw as one JSON object for test/package/package.test.ts to check.
 * MODEL_URL: the base URL of an OpenAI-compatible server (the test's loopback server).
 */
import path from 'node:path'
import { createOpenAI } from '@ai-sdk/openai'
import { createRuntime, findDirective, isSpindleError, renderDirective } from 'spindle'
import { aiSdkModel } from 'spindle/ai-sdk'
import { createTestRuntime, scriptedModel } from 'spindle/testing'

const report = {}
const dir = path.resolve('host-data')

// The research directive shipped in the package's config/directives, run through spindle/ai-sdk.
const directive = findDirective('research', dir)
report.directiveFile = directive.file
const model = aiSdkModel({ model: createOpenAI({ baseURL: process.env.MODEL_URL, apiKey: 'test-key' }).chat('gpt-4o-mini') })
const rt = await createRuntime({ dir, model })
const thread = await rt.spawn({ directive: renderDirective(directive, { topic: 'tides' }) })
const outcome = await thread.done
report.aiSdk = { threadId: thread.id, status: outcome.status, result: outcome.result, turns: outcome.cost.turns }
await rt.close()

// Opened again: the thread is in the registry (better-sqlite3, built when the package installed).
const reopened = await createRuntime({ dir, model })
report.listed = reopened.list().map((record) => ({ id: record.id, status: record.status }))
try {
  reopened.get('research-000000000000')
} catch (error) {
  report.unknownThread = isSpindleError(error) ? error.code : `not a SpindleError: ${String(error)}`
}
await reopened.close()

// spindle/testing: a rate-limit wait passed in simulated time, then a replay check.
const test = await createTestRuntime({
  model: scriptedModel([{ faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '30' } }], reply: { text: 'after the wait' } }]),
})
const patient = await test.spawn({ directive: { name: 'patient', prompt: 'Wait for the rate limit.' } })
await test.settle()
report.retryInMs = (patient.getSnapshot().retry?.dueAt ?? NaN) - test.clock.now()
await test.advance(30_000)
const waited = await patient.done
report.testing = { status: waited.status, result: waited.result, replays: test.checkReplay(patient.id).matches }
await test.cleanup()

process.stdout.write(`${JSON.stringify(report)}\n`)
