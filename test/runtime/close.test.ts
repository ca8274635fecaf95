/**
 * Issue 22, item 9: `rt.close()` is a clean shutdown, not a crash. Each scenario: a thread at some
 * step, the close (or a signal), and what must hold after: a tool call under way finishes within
 * `timeouts.shutdownGraceMs` and its result is recorded; nothing new starts; what outlasts the
 * grace is aborted and noted, so the next runtime tells the model of a shutdown; a model call and a
 * built-in wait stop at once, recording nothing the close caused. Real files, simulated model time;
 * the grace runs on the wall clock. (Real processes and real signals: test/crash/shutdown.test.ts.)
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { Message, ModelRequest, Runtime, RuntimeOptions } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel, verifyReplay } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'
import { eventually, inState, until } from '../helpers/threads.js'

const open: Runtime[] = []
async function runtime(options: RuntimeOptions): Promise<Runtime> {
  const rt = await createRuntime({ durability: 'process', userConfig: null, ...options })
  open.push(rt)
  return rt
}
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

/** What `eventually` settles between its checks: turns of the event loop (the runtimes here run on real time). */
const turns = { settle: () => new Promise<void>((resolve) => setImmediate(resolve)) }

/** Long enough that a close waiting for it would outlast the test's own timeout. */
const LONG_GRACE_MS = 120_000

function transcript(dir: string, id: string): Array<{ type: string; data: any }> {
  return fs
    .readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line))
}

/**
 * `charge`, not idempotent: each call is logged in `runs`, and ends when the test calls `finish`
 * (or, aborted, rejects with the abort reason).
 */
function chargeTool() {
  const runs: string[] = []
  let finish: (() => void) | null = null
  const signals: AbortSignal[] = []
  const tool = defineTool({
    name: 'charge',
    description: 'Charges a card',
    input: z.object({}),
    execute: (_input, { idempotencyKey, signal }) => {
      runs.push(idempotencyKey)
      signals.push(signal)
      return new Promise((resolve, reject) => {
        finish = () => resolve({ charged: true })
        signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true })
      })
    },
  })
  return { tool, runs, signals, finish: () => finish!() }
}

/** Turn 1 calls `charge`; turn 2 answers. Every request's messages are kept in `seen`. */
function chargeThenAnswer(seen: Message[][] = []) {
  return scriptedModel((r: ModelRequest) => {
    seen.push([...r.messages])
    return r.turn === 1 ? { toolCalls: [{ name: 'charge', input: {} }] } : { text: 'answered' }
  })
}

describe('rt.close()', () => {
  it('should let a tool call under way finish within the grace, record its result, and start nothing after it', async () => {
    const dir = tempDir('spindle-close')
    const charge = chargeTool()
    const seen: Message[][] = []
    const rt = await runtime({ dir, model: chargeThenAnswer(seen), tools: [charge.tool], timeouts: { shutdownGraceMs: LONG_GRACE_MS } })
    const thread = await rt.spawn({ directive: { name: 'payer', prompt: 'pay' } })
    expect(await eventually(turns, () => charge.runs.length === 1)).toBe(true)

    const closing = rt.close()
    // The call ends while the runtime closes; a second close waits for the same end.
    charge.finish()
    expect(rt.close()).toBe(closing)
    await closing

    const entries = transcript(dir, thread.id)
    expect(entries.filter((e) => e.type === 'TOOL_DONE').map((e) => [e.data.ok, e.data.output])).toEqual([[true, { charged: true }]])
    expect(entries.some((e) => e.type === 'tool_aborted_at_shutdown')).toBe(false)
    expect(charge.signals[0]!.aborted).toBe(false)
    // The next model call is the next runtime's.
    expect(seen).toHaveLength(1)
    expect(verifyReplay(dir, thread.id).matches).toBe(true)

    const next = await runtime({ dir, model: chargeThenAnswer(seen), tools: [chargeTool().tool] })
    expect(await next.get(thread.id).done).toMatchObject({ status: 'completed', result: 'answered' })
    expect(seen.at(-1)!.find((m) => m.role === 'tool')).toMatchObject({ content: '{"charged":true}' })
    expect(charge.runs).toHaveLength(1)
  })

  it('should abort a tool call that outlasts the grace, note it, and have the next runtime tell the model the process shut down', async () => {
    const dir = tempDir('spindle-close')
    const charge = chargeTool()
    const rt = await runtime({ dir, model: chargeThenAnswer(), tools: [charge.tool], timeouts: { shutdownGraceMs: 50 } })
    const thread = await rt.spawn({ directive: { name: 'payer', prompt: 'pay' } })
    expect(await eventually(turns, () => charge.runs.length === 1)).toBe(true)

    await rt.close()

    expect(charge.signals[0]!.aborted).toBe(true)
    expect(transcript(dir, thread.id).filter((e) => e.type === 'tool_aborted_at_shutdown')).toEqual([
      expect.objectContaining({ data: expect.objectContaining({ key: charge.runs[0], name: 'charge', graceMs: 50 }) }),
    ])
    const seen: Message[][] = []
    const second = chargeTool()
    const next = await runtime({ dir, model: chargeThenAnswer(seen), tools: [second.tool] })
    expect(await next.get(thread.id).done).toMatchObject({ status: 'completed' })
    const told = seen.at(-1)!.find((m) => m.role === 'tool')!
    expect(told).toMatchObject({ isError: true, content: expect.stringContaining('TOOL_INTERRUPTED') })
    expect(told.content).toContain('still running when the process shut down')
    expect(told.content).not.toContain('crash')
    expect(second.runs).toEqual([])
    expect(verifyReplay(dir, thread.id).matches).toBe(true)
  })

  it('should abort a model call at once, without waiting out the grace, and record no failure for it', async () => {
    const dir = tempDir('spindle-close')
    let signal: AbortSignal | null = null
    const model = scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: 'never' } }])
    const watched = { name: model.name, generate: (r: ModelRequest) => ((signal = r.signal), model.generate(r)) }
    const rt = await runtime({ dir, model: watched, timeouts: { shutdownGraceMs: LONG_GRACE_MS } })
    const thread = await rt.spawn({ directive: { name: 'asker', prompt: 'ask' } })
    expect(await eventually(turns, () => signal !== null)).toBe(true)

    await rt.close()

    expect(signal!.aborted).toBe(true)
    expect(transcript(dir, thread.id).map((e) => e.type)).not.toContain('MODEL_FAILED')
  })

  it('should stop a built-in wait_threads call at once, recording no result the close caused', async () => {
    const dir = tempDir('spindle-close')
    const model = scriptedModel((r: ModelRequest) => {
      if (r.directiveName === 'kid') return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
      if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'work' } }] }
      const spawned = JSON.parse(r.messages.find((m) => m.role === 'tool')!.content) as { threadId: string }
      return { toolCalls: [{ name: 'wait_threads', input: { threadIds: [spawned.threadId], timeoutSeconds: 600 } }] }
    })
    const rt = await runtime({ dir, model, timeouts: { shutdownGraceMs: LONG_GRACE_MS } })
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'lead' } })
    await until(lead, (v) => v.usage.turns === 2 && inState('runningTools')(v))
    expect(await eventually(turns, () => transcript(dir, lead.id).filter((e) => e.type === 'tool_intent').length === 2)).toBe(true)

    await rt.close()

    // Its child stopped with it: a wait that ended for that would be a result the close made up.
    const entries = transcript(dir, lead.id)
    expect(entries.filter((e) => e.type === 'TOOL_DONE')).toHaveLength(1)
    expect(entries.some((e) => e.type === 'tool_aborted_at_shutdown')).toBe(false)
    expect(verifyReplay(dir, lead.id).matches).toBe(true)
  })
})

describe('shutdownSignals', () => {
  /** A listener of the test's own, so that no signal emitted here is raised again at the test process. */
  const hostListener = (): void => {}

  it('should close the runtime on SIGTERM, and end the grace at once on a second one', async () => {
    process.on('SIGTERM', hostListener)
    try {
      const dir = tempDir('spindle-close')
      const charge = chargeTool()
      const rt = await runtime({ dir, model: chargeThenAnswer(), tools: [charge.tool], timeouts: { shutdownGraceMs: LONG_GRACE_MS } })
      const thread = await rt.spawn({ directive: { name: 'payer', prompt: 'pay' } })
      expect(await eventually(turns, () => charge.runs.length === 1)).toBe(true)

      process.emit('SIGTERM', 'SIGTERM')
      const closed = (): boolean => {
        try {
          rt.list()
          return false
        } catch {
          return true
        }
      }
      // Closing: refusing calls, and giving the tool call its (long) grace.
      expect(await eventually(turns, closed)).toBe(true)
      expect(charge.signals[0]!.aborted).toBe(false)
      process.emit('SIGTERM', 'SIGTERM')
      await expect(thread.done).rejects.toMatchObject({ code: 'RUNTIME_CLOSED' })
      await rt.close()

      expect(charge.signals[0]!.aborted).toBe(true)
      expect(transcript(dir, thread.id).some((e) => e.type === 'tool_aborted_at_shutdown')).toBe(true)
    } finally {
      process.removeListener('SIGTERM', hostListener)
    }
  })

  it('should install no listener with shutdownSignals: [], and remove its own once closed', async () => {
    const before = process.listenerCount('SIGTERM')
    const optedOut = await runtime({ dir: tempDir('spindle-close'), model: scriptedModel([]), shutdownSignals: [] })
    expect(process.listenerCount('SIGTERM')).toBe(before)
    const listening = await runtime({ dir: tempDir('spindle-close'), model: scriptedModel([]) })
    expect(process.listenerCount('SIGTERM')).toBe(before + 1)
    await listening.close()
    await optedOut.close()
    expect(process.listenerCount('SIGTERM')).toBe(before)
  })

  it('should refuse a signal a process cannot catch, naming the option', async () => {
    await expect(runtime({ dir: tempDir('spindle-close'), model: scriptedModel([]), shutdownSignals: ['SIGKILL'] })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      details: { field: 'shutdownSignals' },
    })
  })
})
