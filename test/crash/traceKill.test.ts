/**
 * Recovery matrix row "traced thread killed with SIGKILL" (issue 24, item 4): a real host process
 * tracing to a file is killed mid tool call, its thread's run span never ended; a new runtime in
 * another process recovers the thread. What must hold: the recovered run is in the same trace, a
 * child of the traceparent kept in the thread's spawn entry — the run span whose turn and calls the
 * dead process had already exported — and the thread completes. A child killed mid-call with its
 * parent stays in the parent's trace when recovered.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { context, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel, verifyReplay } from '../../src/index.js'
import { SPAWN_ENTRY } from '../../src/thread/replay.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { readSpanFile } from '../helpers/spanFile.js'
import { traceKillScript, traceKillTools } from './traceKillWorkload.js'

const exporter = new InMemorySpanExporter()
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  trace.setGlobalTracerProvider(provider)
})
afterAll(async () => {
  trace.disable()
  context.disable()
  await provider.shutdown()
})

describe('a traced thread whose process is killed with SIGKILL', () => {
  it('should continue its trace when a new runtime recovers it: same trace id, a new run under the stored traceparent', async () => {
    const dir = tempDir('spindle-trace-kill')
    const spansFile = path.join(tempDir('spindle-trace-spans'), 'spans.jsonl')
    const run = spawnSync(process.execPath, [compiled('test/crash/traceKillWorker.js'), dir, spansFile], { encoding: 'utf8', timeout: 120_000 })
    expect(run.signal, run.stderr).toBe('SIGKILL')
    const threadId = run.stdout.trim().split('\n').at(-1)!

    // What the dead process left: the traceparent in the spawn entry, and the spans it had ended.
    const first = JSON.parse(fs.readFileSync(path.join(dir, 'threads', threadId, 'transcript.jsonl'), 'utf8').split('\n')[0]!)
    expect(first.type).toBe(SPAWN_ENTRY)
    const [, traceId, runSpanId] = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(first.data.traceparent)!
    const dead = readSpanFile(spansFile)
    expect(dead.map((s) => s.name).sort()).toEqual(['chat default', 'chat default', 'execute_tool lookup', 'turn 1'])
    expect(dead.every((s) => s.traceId === traceId)).toBe(true)
    // Its run span was open when the process died: never exported, but the parent of its turn.
    expect(dead.find((s) => s.name === 'invoke_agent research')).toBeUndefined()
    expect(dead.find((s) => s.name === 'turn 1')!.parentSpanId).toBe(runSpanId)

    const rt = await createRuntime({ dir, model: scriptedModel(traceKillScript), tools: traceKillTools(() => {}), shutdownSignals: [] })
    try {
      const outcome = await rt.get(threadId)!.done
      expect(outcome).toMatchObject({ status: 'completed', result: 'A spindle spins.' })
    } finally {
      await rt.close()
    }
    const spans = exporter.getFinishedSpans()
    const resumed = spans.find((s) => s.name === 'invoke_agent research')!
    expect(resumed.spanContext().traceId).toBe(traceId)
    expect(resumed.parentSpanContext?.spanId).toBe(runSpanId)
    expect(resumed.attributes).toMatchObject({ 'spindle.run.resumed': true, 'spindle.thread.id': threadId, 'spindle.thread.status': 'completed' })
    expect(spans.every((s) => s.spanContext().traceId === traceId)).toBe(true)
    // The crash tool is not run again (not idempotent): its span says the call was interrupted.
    const crash = spans.find((s) => s.name === 'execute_tool crash')!
    expect(crash.attributes['error.type']).toBe('TOOL_INTERRUPTED')
    expect(spans.find((s) => s.name === 'turn 3')!.parentSpanContext?.spanId).toBe(resumed.spanContext().spanId)
    // The traceparent is outside the machine's context: the transcript replays to its state.json.
    expect(verifyReplay(dir, threadId)).toMatchObject({ matches: true, checkpointFound: true })
  })

  it("should keep a child thread recovered by a new runtime in its parent's trace", async () => {
    exporter.reset()
    const dir = tempDir('spindle-trace-kill-tree')
    const spansFile = path.join(tempDir('spindle-trace-spans'), 'spans.jsonl')
    const run = spawnSync(process.execPath, [compiled('test/crash/traceKillWorker.js'), dir, spansFile, 'lead'], { encoding: 'utf8', timeout: 120_000 })
    expect(run.signal, run.stderr).toBe('SIGKILL')
    const leadId = run.stdout.trim().split('\n').at(-1)!
    const traceparentOf = (id: string): string => JSON.parse(fs.readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8').split('\n')[0]!).data.traceparent
    const traceId = traceparentOf(leadId).split('-')[1]!
    const dead = readSpanFile(spansFile)
    // The spawn_thread call had ended: the child's run is under it, in the lead's trace.
    expect(dead.find((s) => s.name === 'execute_tool spawn_thread')?.traceId).toBe(traceId)
    const childId = fs.readdirSync(path.join(dir, 'threads')).find((id) => id !== leadId)!
    expect(traceparentOf(childId).split('-')[1]).toBe(traceId)

    const rt = await createRuntime({ dir, model: scriptedModel(traceKillScript), tools: traceKillTools(() => {}), shutdownSignals: [] })
    try {
      expect((await rt.get(leadId)!.done).status).toBe('completed')
    } finally {
      await rt.close()
    }
    const spans = exporter.getFinishedSpans()
    const child = spans.find((s) => s.name === 'invoke_agent research')!
    expect(child.spanContext().traceId).toBe(traceId)
    expect(child.parentSpanContext?.spanId).toBe(traceparentOf(childId).split('-')[2])
    expect(child.attributes).toMatchObject({ 'spindle.run.resumed': true, 'spindle.thread.status': 'completed' })
    expect(spans.find((s) => s.name === 'invoke_agent lead')!.spanContext().traceId).toBe(traceId)
    expect(spans.every((s) => s.spanContext().traceId === traceId)).toBe(true)
  })
})
