/**
 * Child process of traceKill.test.ts: a host tracing to a file (helpers/spanFile.ts) runs one
 * thread that looks a word up, then calls a tool that kills the process with SIGKILL mid-call —
 * its run, turn and call spans still open, never exported.
 *
 * argv: <dir> <spans file> [lead]. Prints the thread's id before the kill. With `lead`, the thread
 * spawned is a lead whose child (spawned with spawn_thread) is the one that looks up and crashes.
 */
import fs from 'node:fs'
import { context, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { fileSpanExporter } from '../helpers/spanFile.js'
import { traceKillScript, traceKillTools } from './traceKillWorkload.js'

const [dir, spansFile, top = 'research'] = process.argv.slice(2)
if (!dir || !spansFile) throw new Error('usage: traceKillWorker <dir> <spans file>')
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(fileSpanExporter(spansFile))] }))
const { createRuntime, scriptedModel } = await import('../../src/index.js')

const rt = await createRuntime({ dir, model: scriptedModel(traceKillScript), tools: traceKillTools(() => process.kill(process.pid, 'SIGKILL')) })
const thread = await rt.spawn({ directive: { name: top, prompt: 'What is a spindle?' } })
fs.writeSync(1, `${thread.id}\n`)
await thread.done
fs.writeSync(2, 'the thread ended: the kill never came\n')
process.exit(1)
