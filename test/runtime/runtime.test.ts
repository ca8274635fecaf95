/**
 * The runtime end to end on real files: spawn, the turn loop, write-ahead, tool failures, isolation.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { Message, ModelAdapter, ModelRequest, Runtime, ThreadView } from '../../src/index.js'
import { createRuntime, defineTool, readThreadFiles, replayTranscript, scriptedModel, verifyReplay } from '../../src/index.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { tempDir } from '../helpers/dirs.js'

const lookup = defineTool({
  name: 'lookup',
  description: 'Look up a term',
  input: z.object({ q: z.string() }),
  idempotent: true,
  execute: ({ q }) => ({ q, answer: 42 }),
})

const open: Runtime[] = []
async function runtime(options: Parameters<typeof createRuntime>[0]): Promise<Runtime> {
  const rt = await createRuntime(options)
  open.push(rt)
  return rt
}
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

function stateJson(dir: string, id: string): { status: string; snapshot: { value: unknown; context: { usage: { turns: number } } } } {
  return JSON.parse(fs.readFileSync(path.join(dir, 'threads', id, 'state.json'), 'utf8'))
}

describe('a thread on the scripted model', () => {
  it('should run the tool loop to completion and record it in every store', async () => {
    const dir = tempDir()
    const rt = await runtime({
      dir,
      model: scriptedModel([{ toolCalls: [{ name: 'lookup', input: { q: 'X' } }] }, { text: 'X is 42' }]),
      tools: [lookup],
    })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Find X' }, limits: { turns: 20 } })
    const seen: string[] = []
    thread.subscribe((view) => seen.push(JSON.stringify(view.state)))
    const outcome = await thread.done

    expect(outcome.status).toBe('completed')
    expect(outcome.result).toBe('X is 42')
    expect(outcome.cost.turns).toBe(2)
    expect(outcome.cost.spend).toBeGreaterThan(0)
    // Subscribed right after spawn: the current state at once, then every transition.
    expect(seen).toEqual([
      '"created"',
      '{"running":"callingModel"}',
      '{"running":"runningTools"}',
      '{"running":"callingModel"}',
      '"completed"',
    ])
    expect(thread.id).toMatch(/^research-[a-z0-9]{12}$/)

    const row = rt.list({ status: 'completed' }).find((r) => r.id === thread.id)
    expect(row?.cost).toEqual(outcome.cost)
    expect(row?.result).toBe('X is 42')
    expect(stateJson(dir, thread.id).status).toBe('completed')
    const files = readThreadFiles(dir, thread.id)
    expect(files.entries.map((e) => e.type)).toEqual([
      'thread_spawned', 'START', 'MODEL_REPLIED', 'tool_intent', 'TOOL_DONE', 'MODEL_REPLIED',
    ])
    expect(verifyReplay(dir, thread.id).matches).toBe(true)
  })

  it('should have on disk, before a model call or tool starts, the transcript that replays to the state starting it', async () => {
    const dir = tempDir()
    const observed: string[] = []
    // What a new process would rebuild from the disk at this instant.
    const durableState = (threadId: string) => {
      const { entries } = readThreadFiles(dir, threadId)
      const replayed = replayTranscript(entries).snapshot as { value: unknown; context: { usage: { turns: number } } }
      return { value: JSON.stringify(replayed.value), nextTurn: replayed.context.usage.turns + 1, entries }
    }
    const probe = defineTool({
      name: 'probe',
      description: 'Reads its own thread state from disk',
      input: z.object({}),
      execute: (_input, { threadId, idempotencyKey }) => {
        const state = durableState(threadId)
        const intent = state.entries.some((e) => e.type === 'tool_intent' && (e.data as { key: string }).key === idempotencyKey)
        observed.push(`tool:${state.value}:intent=${intent}`)
        return 'ok'
      },
    })
    const model = scriptedModel((request: ModelRequest) => {
      const state = durableState(request.threadId)
      observed.push(`model:${state.value}:turn ${state.nextTurn}=${request.turn}`)
      return request.turn === 1 ? { toolCalls: [{ name: 'probe', input: {} }] } : { text: 'done' }
    })
    const rt = await runtime({ dir, model, tools: [probe] })
    await (await rt.spawn({ directive: { name: 'wal', prompt: 'p' } })).done
    expect(observed).toEqual([
      'model:{"running":"callingModel"}:turn 1=1',
      'tool:{"running":"runningTools"}:intent=true',
      'model:{"running":"callingModel"}:turn 2=2',
    ])
  })

  it('should agree in state.json, registry and transcript once done settles', async () => {
    const dir = tempDir()
    const rt = await runtime({ dir, model: scriptedModel([{ toolCalls: [{ name: 'lookup', input: { q: 'a' } }] }, { text: 'ok' }]), tools: [lookup] })
    const thread = await rt.spawn({ directive: { name: 'agree', prompt: 'p' } })
    await thread.done
    const { envelope, entries } = readThreadFiles(dir, thread.id)
    expect(envelope?.status).toBe('completed')
    expect(envelope?.transcript.seq).toBe(entries.at(-1)!.seq)
    expect(rt.list().find((r) => r.id === thread.id)?.status).toBe('completed')
    expect(verifyReplay(dir, thread.id)).toMatchObject({ matches: true, pendingEntries: 0 })
  })

  it('should pass each tool call a stable idempotency key and its thread id', async () => {
    const keys: string[] = []
    const record = defineTool({
      name: 'record',
      description: 'records its key',
      input: z.object({}),
      execute: (_i, ctx) => {
        keys.push(`${ctx.threadId}|${ctx.idempotencyKey}|${ctx.signal.aborted}`)
        return null
      },
    })
    const rt = await runtime({ dir: tempDir(), model: scriptedModel([{ toolCalls: [{ name: 'record', input: {} }] }, { text: '' }]), tools: [record] })
    const thread = await rt.spawn({ directive: { name: 'keys', prompt: 'p' } })
    await thread.done
    expect(keys).toEqual([`${thread.id}|${thread.id}:1:call_1_1|false`])
  })
})

describe('what a subscriber is told a thread is doing', () => {
  it('should name the step the runtime runs: the model call and its attempt, the tool, the retry wait', async () => {
    const rt = await runtime({
      dir: tempDir(),
      model: scriptedModel([
        { toolCalls: [{ name: 'lookup', input: { q: 'X' } }] },
        { faults: [{ fault: 'http', status: 503 }], reply: { text: 'X is 42' } },
      ]),
      tools: [lookup],
      retry: { baseMs: 5, capMs: 5, jitter: 0 },
    })
    const thread = await rt.spawn({ directive: { name: 'steps', prompt: 'Find X' } })
    const steps: unknown[] = []
    thread.subscribe((view) => steps.push(view.step))
    await thread.done
    expect(steps).toEqual([
      null, // created
      { effect: 'callModel', turn: 1, attempt: 1 },
      { effect: 'runTool', turn: 1, callId: expect.any(String), tool: 'lookup' },
      { effect: 'callModel', turn: 2, attempt: 1 },
      { effect: 'waitUntil', dueAt: expect.any(Number) },
      { effect: 'callModel', turn: 2, attempt: 2 },
      null, // completed
    ])
    expect(rt.get(thread.id).getSnapshot().step).toBeNull()
  })
})

describe('tool failures become results for the model', () => {
  it('should report invalid input, a throw, a timeout and an unknown tool, and go on', async () => {
    const slow = defineTool({
      name: 'slow',
      description: 'never finishes in time',
      input: z.object({}),
      timeoutMs: 50,
      execute: (_i, { signal }) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
    })
    const broken = defineTool({
      name: 'broken',
      description: 'throws',
      input: z.object({}),
      execute: () => {
        throw new Error('disk on fire')
      },
    })
    let lastMessages: readonly Message[] = []
    const model = scriptedModel((request) => {
      lastMessages = request.messages
      return request.turn === 1
        ? {
            toolCalls: [
              { name: 'lookup', input: { q: 7 } },
              { name: 'broken', input: {} },
              { name: 'slow', input: {} },
              { name: 'nope', input: {} },
            ],
          }
        : { text: 'coped' }
    })
    const rt = await runtime({ dir: tempDir(), model, tools: [lookup, slow, broken] })
    const outcome = await (await rt.spawn({ directive: { name: 'faulty', prompt: 'p' } })).done
    expect(outcome.status).toBe('completed')
    const results = lastMessages.filter((m) => m.role === 'tool')
    expect(results.map((m) => m.role === 'tool' && m.isError)).toEqual([true, true, true, true])
    const text = results.map((m) => m.content).join('\n')
    expect(text).toContain('TOOL_INPUT_INVALID')
    expect(text).toContain('disk on fire')
    expect(text).toContain('TOOL_TIMEOUT')
    expect(text).toContain('There is no tool named \\"nope\\"')
  })
})

describe('isolation', () => {
  it('should end only the failing thread when a model adapter or subscriber throws', async () => {
    const model = scriptedModel((request) => {
      if (request.directiveName === 'thrower') return { faults: [{ fault: 'throw', message: 'adapter exploded' }], reply: { text: '' } }
      return request.turn === 1 ? { toolCalls: [{ name: 'lookup', input: { q: 'a' } }] } : { text: 'fine' }
    }, { latencyMs: (r) => (r.directiveName === 'noisy' ? 30 : 0) })
    const rt = await runtime({ dir: tempDir(), model, tools: [lookup] })
    const thrower = await rt.spawn({ directive: { name: 'thrower', prompt: 'p' } })
    const noisy = await rt.spawn({ directive: { name: 'noisy', prompt: 'p' } })
    noisy.subscribe((view: ThreadView) => {
      if (view.status === 'running') throw new Error('subscriber bug')
    })
    const healthy = await rt.spawn({ directive: { name: 'healthy', prompt: 'p' } })

    const [a, b, c] = await Promise.all([thrower.done, noisy.done, healthy.done])
    expect(a.status).toBe('error')
    expect(a.error?.message).toContain('adapter exploded')
    expect(b.status).toBe('error')
    expect(b.error).toEqual({ code: 'SUBSCRIBER_FAILED', message: expect.stringContaining('subscriber bug') })
    expect(c).toMatchObject({ status: 'completed', result: 'fine' })
    // The runtime still serves new threads.
    expect((await (await rt.spawn({ directive: { name: 'after', prompt: 'p' } })).done).status).toBe('completed')
  })

  it('should end only the waiting thread when the host clock throws as its retry wait starts', async () => {
    // Setup: a host clock that refuses timers of more than 20 minutes (a model call's timeout is
    // 10); one thread is told to retry in an hour (429, Retry-After 3600), the other never waits. The wait starts synchronously
    // inside the thread's own transition.
    const clock = {
      now: () => Date.now(),
      setTimeout: (fn: () => void, ms: number) => {
        if (ms > 1_200_000) throw new Error('host clock: no timers past 20 minutes')
        return setTimeout(fn, ms)
      },
      clearTimeout: (handle: unknown) => clearTimeout(handle as NodeJS.Timeout),
    }
    const model = scriptedModel((request) =>
      request.directiveName === 'patient' && request.attempt === 1
        ? { faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '3600' } }], reply: { text: '' } }
        : { text: 'fine' },
    )
    const rt = await runtime({ dir: tempDir(), model, clock })
    const patient = await rt.spawn({ directive: { name: 'patient', prompt: 'p' } })
    const other = await rt.spawn({ directive: { name: 'other', prompt: 'p' } })
    // After: the waiting thread ends in error naming the clock's complaint, recorded and
    // replayable; the other completes, and the runtime goes on serving.
    const [a, b] = await Promise.all([patient.done, other.done])
    expect(a).toMatchObject({ status: 'error', error: { message: expect.stringContaining('no timers past 20 minutes') } })
    expect(b).toMatchObject({ status: 'completed', result: 'fine' })
    expect(verifyReplay(rt.dir, patient.id).matches).toBe(true)
    expect((await (await rt.spawn({ directive: { name: 'after', prompt: 'p' } })).done).status).toBe('completed')
  })
})

describe('misbehaving adapters and tools', () => {
  it('should end a thread whose model adapter returns a malformed response in error, naming the adapter', async () => {
    const broken: ModelAdapter = { name: 'broken-adapter', generate: async () => ({ text: 42, toolCalls: 'none' }) as never }
    const rt = await runtime({ dir: tempDir(), model: broken })
    const outcome = await (await rt.spawn({ directive: { name: 'malformed', prompt: 'p' } })).done
    expect(outcome.status).toBe('error')
    expect(outcome.error?.message).toContain('Model adapter "broken-adapter" returned an invalid response')
  })

  it('should give the model an error result when a tool returns a value that cannot be recorded', async () => {
    const circular = defineTool({
      name: 'circular',
      description: 'returns a circular object',
      input: z.object({}),
      execute: () => {
        const value: Record<string, unknown> = {}
        value.self = value
        return value
      },
    })
    let seen: readonly Message[] = []
    const model = scriptedModel((r) => {
      seen = r.messages
      return r.turn === 1 ? { toolCalls: [{ name: 'circular', input: {} }] } : { text: 'coped' }
    })
    const dir = tempDir()
    const rt = await runtime({ dir, model, tools: [circular] })
    const thread = await rt.spawn({ directive: { name: 'unrecordable', prompt: 'p' } })
    expect((await thread.done).status).toBe('completed')
    expect(seen.find((m) => m.role === 'tool')).toMatchObject({ isError: true, content: expect.stringContaining('TOOL_OUTPUT_INVALID') })
    expect(verifyReplay(dir, thread.id).matches).toBe(true)
  })
})

describe('limits', () => {
  it('should suspend a thread at its turn limit and record it in the registry', async () => {
    const dir = tempDir()
    const rt = await runtime({ dir, model: scriptedModel(() => ({ toolCalls: [{ name: 'lookup', input: { q: 'again' } }] })), tools: [lookup] })
    const thread = await rt.spawn({ directive: { name: 'loop', prompt: 'p' }, limits: { turns: 3 } })
    const outcome = await thread.done
    expect(outcome).toMatchObject({ status: 'suspended', suspendReason: 'limit', cost: { turns: 3 } })
    expect(rt.get(thread.id).status).toBe('suspended')
    expect(rt.get(thread.id).getSnapshot().limitHit).toMatchObject({ limit: 'turns', used: 3, max: 3, proposed: 6 })
  })

  it('should say in rt.list() why each suspended thread waits, and clear it once the thread runs on', async () => {
    // Issue 22: before, every suspended row looked alike, whatever the thread waited for.
    const dir = tempDir()
    const model = scriptedModel((r) => {
      if (r.directiveName === 'flaky') return { faults: [{ fault: 'http', status: 503 }, { fault: 'http', status: 503 }], reply: { text: 'late' } }
      return r.turn <= 3 ? { toolCalls: [{ name: 'lookup', input: { q: 'again' } }] } : { text: 'done' }
    })
    const rt = await runtime({ dir, model, tools: [lookup], retry: { baseMs: 1, capMs: 2, maxRetries: 1 } })
    const capped = await rt.spawn({ directive: { name: 'loop', prompt: 'p' }, limits: { turns: 3 } })
    const flaky = await rt.spawn({ directive: { name: 'flaky', prompt: 'p' } })
    await Promise.all([capped.done, flaky.done])
    const reasons = () => Object.fromEntries(rt.list().map((r) => [r.id, [r.status, r.suspendReason]]))
    expect(reasons()).toEqual({ [capped.id]: ['suspended', 'limit'], [flaky.id]: ['suspended', 'error'] })
    await (await rt.approve(capped.id)).done
    expect(reasons()[capped.id]).toEqual(['completed', null])
  })
})

describe('durability settings and stores', () => {
  for (const durability of ['fsync', 'process'] as const) {
    it(`should complete and persist with durability '${durability}'`, async () => {
      const dir = tempDir()
      const rt = await runtime({ dir, durability, model: scriptedModel([{ text: 'ok' }]) })
      const thread = await rt.spawn({ directive: { name: 'd', prompt: 'p' } })
      expect((await thread.done).status).toBe('completed')
      const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability })
      expect(registry.get(thread.id)?.status).toBe('completed')
      registry.close()
    })
  }

  it('should run entirely in memory with store: memory', async () => {
    const dir = tempDir()
    const rt = await runtime({ dir, store: 'memory', model: scriptedModel([{ text: 'ok' }]) })
    expect((await (await rt.spawn({ directive: { name: 'm', prompt: 'p' } })).done).status).toBe('completed')
    expect(fs.readdirSync(dir)).toEqual([])
  })
})

describe('options', () => {
  it('should refuse a spawn without a directive name, naming the field', async () => {
    const rt = await runtime({ dir: tempDir(), model: scriptedModel([]) })
    await expect(rt.spawn({ directive: { name: '', prompt: 'p' } })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', details: { field: 'directive' } })
    await expect(rt.spawn({ directive: { name: 'x', prompt: 'p' }, limits: { turns: -1 } })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      message: expect.stringContaining('limits.turns'),
    })
  })

  it('should quote an unknown option as it was written', async () => {
    await expect(createRuntime({ dir: tempDir(), model: scriptedModel([]), retry: { baseDelayMs: 5 } as never })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      message: expect.stringContaining('retry unrecognized key: "baseDelayMs"'),
    })
  })

  it('should refuse an invalid durability setting', async () => {
    await expect(createRuntime({ dir: tempDir(), model: scriptedModel([]), durability: 'maybe' as never })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' })
  })
})

describe('a closed runtime', () => {
  it('should refuse every call that reads or changes threads with RUNTIME_CLOSED, naming what to do', async () => {
    const rt = await createRuntime({ dir: tempDir(), model: scriptedModel([{ text: 'ok' }]), durability: 'process' })
    const thread = await rt.spawn({ directive: { name: 'd', prompt: 'p' } })
    await thread.done
    await rt.close()
    const closed = { code: 'RUNTIME_CLOSED', message: expect.stringContaining('createRuntime()') }
    expect(() => rt.get(thread.id)).toThrow(expect.objectContaining(closed))
    expect(() => rt.list()).toThrow(expect.objectContaining(closed))
    expect(() => rt.chain(thread.id)).toThrow(expect.objectContaining(closed))
    await expect(rt.spawn({ directive: { name: 'd', prompt: 'p' } })).rejects.toMatchObject(closed)
    await expect(rt.cancel(thread.id)).rejects.toMatchObject(closed)
    await expect(rt.recover()).rejects.toMatchObject(closed)
    await expect(rt.waitThreads([thread.id])).rejects.toMatchObject(closed)
  })
})
