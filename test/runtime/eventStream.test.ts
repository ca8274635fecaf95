/**
 * Issue 24, item 2: one event stream across processes. A host listens with `rt.events()` while a
 * second process (a compiled worker with a runtime of its own) approves, denies, answers and
 * cancels the host's suspended threads: the host sees each change, in order, with its fields, and
 * a reader that reconnects with the last cursor it saw — on this runtime or a new one — gets
 * exactly what came after. A cancel from the compiled CLI reaches the stream through the host
 * that acts on it; retries carry their attempt, category and delay; a thread whose holder was
 * SIGKILLed is seen taken over by the host.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { askHuman, createRuntime, scriptedModel } from '../../src/index.js'
import type { ModelAdapter, Runtime, ThreadStreamEvent } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { alive } from '../helpers/processes.js'
import { model, tools } from './eventStreamShared.js'

const fast = { events: { pollMs: 50 }, orphans: { heartbeatMs: 100 }, requests: { pollMs: 100 }, retry: { baseMs: 10, capMs: 40, jitter: 0 } }

function open(dir: string, adapter: ModelAdapter = model({ answers: true })): Promise<Runtime> {
  return createRuntime({ dir, model: adapter, tools: tools(), userConfig: null, shutdownSignals: [], durability: 'process', config: fast })
}

/** Reads `iterator` until `until` holds of what was read; returns it all. */
async function readUntil(iterator: AsyncIterator<ThreadStreamEvent>, until: (read: ThreadStreamEvent[]) => boolean): Promise<ThreadStreamEvent[]> {
  const read: ThreadStreamEvent[] = []
  while (!until(read)) {
    const next = await iterator.next()
    if (next.done) break
    read.push(next.value)
  }
  return read
}

const ended = (id: string) => (read: ThreadStreamEvent[]) => read.some((e) => e.threadId === id && (e.type === 'thread.completed' || e.type === 'thread.cancelled' || e.type === 'thread.error'))
const of = (read: ThreadStreamEvent[], id: string) => read.filter((e) => e.threadId === id)

describe('rt.events with decisions made in another process', () => {
  const dir = tempDir('spindle-events')
  let rt: Runtime
  let read: ThreadStreamEvent[] = []
  const ids = { approved: '', denied: '', answered: '', cancelled: '' }

  beforeAll(async () => {
    rt = await open(dir)
    const stream = rt.events()
    ids.approved = (await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })).id
    ids.denied = (await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })).id
    ids.answered = (await rt.spawn({ directive: { name: 'ask', prompt: 'Ask when' } })).id
    ids.cancelled = (await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })).id
    const all = Object.values(ids)
    // Each suspended and its request told: the worker may decide.
    read = await readUntil(stream, (r) => all.every((id) => r.some((e) => e.threadId === id && (e.type === 'thread.approval_pending' || e.type === 'thread.question_pending'))))
    await Promise.all(all.map((id) => rt.get(id).done))
    const worker = spawnSync(process.execPath, [compiled('test/runtime/eventStreamWorker.js'), 'decide', dir, ids.approved, ids.denied, ids.answered, ids.cancelled], { encoding: 'utf8' })
    expect(worker.status, worker.stderr).toBe(0)
    read.push(...(await readUntil(stream, (r) => all.every((id) => ended(id)(r)))))
    await stream.return?.()
  }, 60_000)

  afterAll(async () => {
    await rt?.close()
  })

  it('should tell a thread approved in another process, with the edited input, then its end', () => {
    expect(of(read, ids.approved).map((e) => e.type)).toEqual([
      'thread.spawned',
      'thread.started',
      'thread.suspended',
      'thread.approval_pending',
      'thread.approved',
      'thread.completed',
    ])
    const [spawned, , suspended, pending, approved, completed] = of(read, ids.approved)
    expect(spawned).toMatchObject({ directive: 'ship', parentId: null, previousThreadId: null })
    expect(suspended).toMatchObject({ reason: 'tool_approval' })
    expect(pending).toMatchObject({ kind: 'tool', tool: 'deploy', callId: 'c1', input: { env: 'production' } })
    expect(approved).toMatchObject({ kind: 'tool', tool: 'deploy', requestId: (pending as { requestId: string }).requestId, by: 'worker', input: { env: 'staging' }, edited: true, message: 'staging first' })
    expect(completed).toMatchObject({ result: 'told: deployed to staging' })
  })

  it('should tell a tool call denied in another process, with its reason, and the thread going on to its end', () => {
    expect(of(read, ids.denied).map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.suspended', 'thread.approval_pending', 'thread.denied', 'thread.completed'])
    expect(of(read, ids.denied)[4]).toMatchObject({ kind: 'tool', tool: 'deploy', by: 'worker', reason: 'not on a Friday' })
  })

  it('should tell a question pending and its answer from another process', () => {
    expect(of(read, ids.answered).map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.suspended', 'thread.question_pending', 'thread.answered', 'thread.completed'])
    const [, , suspended, pending, answered] = of(read, ids.answered)
    expect(suspended).toMatchObject({ reason: 'waiting' })
    expect(pending).toMatchObject({ tool: 'ask_human', callId: 'q1', input: { question: 'Which day?', choices: ['Monday', 'Friday'] } })
    expect(answered).toMatchObject({ tool: 'ask_human', callId: 'q1', by: 'worker', answer: 'Monday', timedOut: false })
  })

  it('should tell a suspended thread cancelled in another process, with the reason', () => {
    expect(of(read, ids.cancelled).map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.suspended', 'thread.approval_pending', 'thread.cancelled'])
    expect(of(read, ids.cancelled)[4]).toMatchObject({ reason: 'no longer needed' })
  })

  it('should give every event its thread, time and a cursor that grows', () => {
    const cursors = read.map((e) => Number(e.cursor))
    expect(cursors).toEqual([...cursors].sort((a, b) => a - b))
    expect(new Set(cursors).size).toBe(cursors.length)
    for (const e of read) expect(typeof e.at === 'number' && typeof e.threadId === 'string').toBe(true)
  })

  it('should resume after a cursor with exactly the events after it, none twice and none missed', async () => {
    const from = read.findIndex((e) => e.threadId === ids.denied && e.type === 'thread.approval_pending')
    const resumed = rt.events({ after: read[from]!.cursor })
    const again = await readUntil(resumed, (r) => r.length === read.length - from - 1)
    await resumed.return?.()
    expect(again).toEqual(read.slice(from + 1))
  })

  it('should resume after a cursor on a runtime opened again, as a host that reconnects does', async () => {
    const cursor = read[5]!.cursor
    await rt.close()
    rt = await open(dir)
    const resumed = rt.events({ after: cursor })
    const again = await readUntil(resumed, (r) => r.length === read.length - 6)
    await resumed.return?.()
    expect(again).toEqual(read.slice(6))
  })

  it("should give only one thread's events of the types asked for", async () => {
    const filtered = rt.events({ after: '0', threadId: ids.answered, types: ['thread.question_pending', 'thread.answered'] })
    const got = await readUntil(filtered, (r) => r.length === 2)
    await filtered.return?.()
    expect(got.map((e) => [e.threadId, e.type])).toEqual([
      [ids.answered, 'thread.question_pending'],
      [ids.answered, 'thread.answered'],
    ])
  })
})

describe('rt.events when the CLI cancels a thread the host runs', () => {
  it('should tell the thread cancelled, with the reason given to spindle cancel', async () => {
    const dir = tempDir('spindle-events-cli')
    const rt = await open(dir)
    try {
      const stream = rt.events()
      const thread = await rt.spawn({ directive: { name: 'stuck', prompt: 'Wait' } })
      await readUntil(stream, (r) => r.some((e) => e.threadId === thread.id && e.type === 'thread.started'))
      const cli = spawnSync(process.execPath, [compiled('src/cli.js'), 'cancel', thread.id, '--reason', 'from the terminal', '--dir', dir], { encoding: 'utf8' })
      expect(cli.status, cli.stderr).toBe(0)
      const read = await readUntil(stream, ended(thread.id))
      await stream.return?.()
      expect(read.map((e) => [e.threadId, e.type])).toEqual([[thread.id, 'thread.cancelled']])
      expect(read[0]).toMatchObject({ reason: 'from the terminal' })
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events when the CLI approves a tool call the host waits at', () => {
  it('should tell the approval with the edited input, acted on by the host from the response file', async () => {
    const dir = tempDir('spindle-events-cli-approve')
    const rt = await open(dir)
    try {
      const stream = rt.events({ types: ['thread.approval_pending', 'thread.approved', 'thread.completed'] })
      const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })
      const [pending] = await readUntil(stream, (r) => r.length === 1)
      await thread.done
      // The request file the CLI decides on follows the durable suspension the event was committed with.
      const requestFile = path.join(dir, 'threads', thread.id, 'approvals', `${(pending as { requestId: string }).requestId}.request.json`)
      while (!fs.existsSync(requestFile)) await new Promise((resolve) => setTimeout(resolve, 20))
      const cli = spawnSync(process.execPath, [compiled('src/cli.js'), 'approve', thread.id, '--input', '{"env":"staging"}', '--dir', dir], { encoding: 'utf8' })
      expect(cli.status, cli.stderr).toBe(0)
      const read = await readUntil(stream, ended(thread.id))
      await stream.return?.()
      expect(read.map((e) => e.type)).toEqual(['thread.approved', 'thread.completed'])
      expect(read[0]).toMatchObject({ kind: 'tool', requestId: (pending as { requestId: string }).requestId, input: { env: 'staging' }, edited: true })
      expect(read[1]).toMatchObject({ result: 'told: deployed to staging' })
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events at a limit and after errors', () => {
  it('should tell a limit reached, its approval with the new limits, and the end', async () => {
    const dir = tempDir('spindle-events-limit')
    const rt = await open(dir)
    try {
      const stream = rt.events()
      const thread = await rt.spawn({ directive: { name: 'count', prompt: 'Count' }, limits: { turns: 1 } })
      const waiting = await readUntil(stream, (r) => r.some((e) => e.type === 'thread.approval_pending'))
      await thread.done
      await rt.approve(thread.id, { by: 'lead' })
      const read = [...waiting, ...(await readUntil(stream, ended(thread.id)))]
      await stream.return?.()
      expect(read.map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.suspended', 'thread.approval_pending', 'thread.approved', 'thread.completed'])
      expect(read[2]).toMatchObject({ reason: 'limit', limit: { limit: 'turns', used: 1, max: 1, proposed: 2 } })
      expect(read[3]).toMatchObject({ kind: 'limit', limit: { limit: 'turns', used: 1, max: 1, proposed: 2 } })
      expect(read[4]).toMatchObject({ kind: 'limit', by: 'lead', limits: { turns: 2 }, requestId: (read[3] as { requestId: string }).requestId })
    } finally {
      await rt.close()
    }
  })

  it('should tell a thread suspended when its retries ran out, and resumed by a person', async () => {
    const dir = tempDir('spindle-events-resume')
    const rt = await open(dir)
    try {
      const stream = rt.events()
      const thread = await rt.spawn({ directive: { name: 'flaky', prompt: 'Try' }, retry: { maxRetries: 0 } })
      const suspended = await readUntil(stream, (r) => r.some((e) => e.type === 'thread.suspended'))
      await thread.done
      await rt.resume(thread.id, { by: 'lead' })
      const [resumed] = await readUntil(stream, (r) => r.length === 1)
      await stream.return?.()
      expect(suspended.map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.suspended'])
      expect(suspended[2]).toMatchObject({ reason: 'error', limit: null, budget: null, error: { message: expect.stringContaining('503') } })
      expect(resumed).toMatchObject({ type: 'thread.resumed', threadId: thread.id, by: 'lead', reason: 'error' })
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events when a thread continues in a successor', () => {
  it('should tell the predecessor continued, naming its successor, and the successor spawned from it', async () => {
    const tooLong = { faults: [{ fault: 'http' as const, status: 400, code: 'context_length_exceeded', message: "This model's maximum context length is 8192 tokens" }], reply: {} }
    const continuing = scriptedModel((r) =>
      r.messages[0]!.content.includes('Continued from thread') ? { text: 'carried on' } : r.turn === 1 ? { toolCalls: [{ name: 'echo', input: { text: 'one' } }] } : tooLong,
    )
    const dir = tempDir('spindle-events-continued')
    const rt = await open(dir, continuing)
    try {
      const stream = rt.events()
      const thread = await rt.spawn({ directive: { name: 'long', prompt: 'Go on' } })
      const first = await readUntil(stream, (r) => r.some((e) => e.type === 'thread.continued'))
      const next = (first.find((e) => e.type === 'thread.continued') as Extract<ThreadStreamEvent, { type: 'thread.continued' }> | undefined)?.nextThreadId ?? ''
      const read = [...first, ...(await readUntil(stream, ended(next)))]
      await stream.return?.()
      expect(of(read, thread.id).map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.continued'])
      expect(next).toBe(rt.chain(thread.id)[1]!.id)
      expect(of(read, next).map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.completed'])
      expect(of(read, next)[0]).toMatchObject({ directive: 'long', previousThreadId: thread.id })
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events when a limit is denied', () => {
  it('should tell the denial with its reason, then the thread cancelled', async () => {
    const dir = tempDir('spindle-events-deny-limit')
    const rt = await open(dir)
    try {
      const stream = rt.events({ types: ['thread.approval_pending', 'thread.denied', 'thread.cancelled'] })
      const thread = await rt.spawn({ directive: { name: 'count', prompt: 'Count' }, limits: { turns: 1 } })
      await readUntil(stream, (r) => r.length === 1)
      await thread.done
      await rt.deny(thread.id, 'enough counting', { by: 'lead' })
      const read = await readUntil(stream, ended(thread.id))
      await stream.return?.()
      expect(read.map((e) => e.type)).toEqual(['thread.denied', 'thread.cancelled'])
      expect(read[0]).toMatchObject({ kind: 'limit', by: 'lead', reason: 'enough counting' })
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events when nobody decides before a deadline', () => {
  it('should tell a tool approval denied by its deadline, then the thread going on to its end', async () => {
    const dir = tempDir('spindle-events-deadline-approval')
    const rt = await createRuntime({
      dir,
      model: model({ answers: true }),
      tools: tools(),
      userConfig: null,
      shutdownSignals: [],
      durability: 'process',
      config: { ...fast, approvals: { timeoutSeconds: 1, onTimeout: 'deny' } },
    })
    try {
      const stream = rt.events({ types: ['thread.approval_pending', 'thread.denied', 'thread.completed'] })
      const thread = await rt.spawn({ directive: { name: 'ship', prompt: 'Ship it' } })
      const read = await readUntil(stream, ended(thread.id))
      await stream.return?.()
      expect(read.map((e) => e.type)).toEqual(['thread.approval_pending', 'thread.denied', 'thread.completed'])
      const pending = read[0] as Extract<ThreadStreamEvent, { type: 'thread.approval_pending' }>
      expect(pending).toMatchObject({ kind: 'tool', tool: 'deploy', input: { env: 'production' } })
      expect(pending.deadlineAt).toBeGreaterThan(pending.at)
      expect(read[1]).toMatchObject({ kind: 'tool', tool: 'deploy', by: 'deadline', requestId: pending.requestId })
      expect((await rt.get(thread.id).done).result).toContain('TOOL_DENIED')
    } finally {
      await rt.close()
    }
  })

  it('should tell a question that timed out as answered with timedOut and no answer', async () => {
    const dir = tempDir('spindle-events-deadline-question')
    const rt = await createRuntime({ dir, model: model({ answers: true }), tools: [askHuman({ deadlineMs: 300 })], userConfig: null, shutdownSignals: [], durability: 'process', config: fast })
    try {
      const stream = rt.events({ types: ['thread.question_pending', 'thread.answered', 'thread.completed'] })
      const thread = await rt.spawn({ directive: { name: 'ask', prompt: 'Ask when' } })
      const read = await readUntil(stream, ended(thread.id))
      await stream.return?.()
      expect(read.map((e) => e.type)).toEqual(['thread.question_pending', 'thread.answered', 'thread.completed'])
      expect(read[1]).toMatchObject({ tool: 'ask_human', by: 'deadline', timedOut: true })
      expect(read[1]).not.toHaveProperty('answer')
      expect((await rt.get(thread.id).done).result).toContain('WAIT_TIMED_OUT')
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events when a model call is retried', () => {
  it('should tell each retry with its attempt, category and delay, then the end', async () => {
    const dir = tempDir('spindle-events-retry')
    const rt = await open(dir)
    try {
      const stream = rt.events({ types: ['thread.retrying', 'thread.completed'] })
      const thread = await rt.spawn({ directive: { name: 'flaky', prompt: 'Try' } })
      const read = await readUntil(stream, ended(thread.id))
      await stream.return?.()
      expect(read.map((e) => e.type)).toEqual(['thread.retrying', 'thread.retrying', 'thread.completed'])
      expect(read[0]).toMatchObject({ threadId: thread.id, attempt: 2, category: 'transient', delayMs: 10 })
      expect(read[1]).toMatchObject({ threadId: thread.id, attempt: 3, category: 'transient', delayMs: 20 })
      const first = read[0] as Extract<ThreadStreamEvent, { type: 'thread.retrying' }>
      expect(first.dueAt - first.delayMs).toBeLessThanOrEqual(first.at)
    } finally {
      await rt.close()
    }
  })
})

describe('rt.events when the process holding a thread is SIGKILLed', () => {
  it('should tell the thread taken over by the host, then its end', async () => {
    const dir = tempDir('spindle-events-takeover')
    const rt = await open(dir)
    try {
      const listened: ThreadStreamEvent[] = []
      let heardEnd!: () => void
      const heard = new Promise<void>((resolve) => (heardEnd = resolve))
      const off = rt.on('thread.*', (event) => {
        listened.push(event)
        if (event.type === 'thread.completed') heardEnd()
      })
      const stream = rt.events()
      const worker = spawn(process.execPath, [compiled('test/runtime/eventStreamWorker.js'), 'hold', dir], { stdio: ['ignore', 'pipe', 'inherit'] })
      const id = await new Promise<string>((resolve, reject) => {
        let out = ''
        worker.stdout.on('data', (chunk: Buffer) => {
          out += chunk.toString()
          if (out.includes('\n')) resolve(out.trim())
        })
        worker.once('exit', (code) => reject(new Error(`worker exited with ${code} before its thread started`)))
      })
      worker.kill('SIGKILL')
      await new Promise((resolve) => worker.once('exit', resolve))
      expect(alive(worker.pid!)).toBe(false)
      const read = await readUntil(stream, ended(id))
      await stream.return?.()
      await heard
      off()
      expect(of(read, id).map((e) => e.type)).toEqual(['thread.spawned', 'thread.started', 'thread.taken_over', 'thread.completed'])
      expect(of(read, id)[2]).toMatchObject({ pid: process.pid })
      expect(of(read, id)[3]).toMatchObject({ result: 'held and done' })
      // rt.on('thread.*') hears the same events as the iterator.
      expect(of(listened, id).map((e) => e.cursor)).toEqual(of(read, id).map((e) => e.cursor))
    } finally {
      await rt.close()
    }
  }, 30_000)
})

describe('rt.events options', () => {
  it('should refuse a cursor that is not one, with INVALID_OPTIONS naming the field', async () => {
    const rt = await open(tempDir('spindle-events-options'))
    try {
      expect(() => rt.events({ after: 'last' })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('after must be a cursor') }))
    } finally {
      await rt.close()
    }
  })

  it('should refuse an unknown event type, with INVALID_OPTIONS listing the types there are', async () => {
    const rt = await open(tempDir('spindle-events-options'))
    try {
      expect(() => rt.events({ types: ['thread.finished' as never] })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS', message: expect.stringContaining('thread.completed') }))
    } finally {
      await rt.close()
    }
  })

  it("should refuse to listen with rt.on to a 'thread.' type that is none", async () => {
    const rt = await open(tempDir('spindle-events-options'))
    try {
      expect(() => rt.on('thread.finished' as never, () => {})).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }))
    } finally {
      await rt.close()
    }
  })

  it('should end an iterator waiting for events when its signal aborts', async () => {
    const rt = await open(tempDir('spindle-events-abort'))
    try {
      const stop = new AbortController()
      const waiting = rt.events({ signal: stop.signal }).next()
      stop.abort()
      expect(await waiting).toEqual({ done: true, value: undefined })
    } finally {
      await rt.close()
    }
  })

  it('should end an iterator waiting for events when the runtime closes', async () => {
    const rt = await open(tempDir('spindle-events-close'))
    const waiting = rt.events().next()
    await rt.close()
    expect(await waiting).toEqual({ done: true, value: undefined })
  })
})
