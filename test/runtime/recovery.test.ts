/**
 * The recovery matrix for the durable core. Each scenario: setup, the fault, what must hold after.
 * Restarts are a runtime closed where it stands and a new one opened on the same directory — the
 * same path a process killed with SIGKILL takes (see test/crash for the real kill).
 */
import fs from 'node:fs'
import path from 'node:path'
import { SimulatedClock, createActor } from 'xstate'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import Database from 'better-sqlite3'
import type { LifecycleEvent, Message, Runtime, RuntimeOptions } from '../../src/index.js'
import { showRecovery, statusLine } from '../../src/operator/progress.js'
import { viewOf } from '../../src/thread/threadView.js'
import { doctor, rebuildThread } from '../../src/operator/operator.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { createRuntime, defineTool, respondToApproval, scriptedModel, threadMachine, verifyReplay } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'
import { eventually, inState, until } from '../helpers/threads.js'

const open: Runtime[] = []
async function runtime(options: RuntimeOptions): Promise<Runtime> {
  const rt = await createRuntime(options)
  open.push(rt)
  return rt
}
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

const hangOnTurn2 = scriptedModel([{ toolCalls: [{ name: 'noop', input: {} }] }, { faults: [{ fault: 'hang' }], reply: { text: 'never' } }])
const finishes = scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'noop', input: {} }] } : { text: `finished at turn ${r.turn}` }))
const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })

/** Two threads left mid-call (turn 2) in `dir` by a runtime that then stopped. */
async function leaveTwoThreadsMidCall(dir: string): Promise<[string, string]> {
  const rt = await createRuntime({ dir, model: hangOnTurn2, tools: [noop] })
  const a = await rt.spawn({ directive: { name: 'alpha', prompt: 'p' } })
  const b = await rt.spawn({ directive: { name: 'beta', prompt: 'p' } })
  await Promise.all([until(a, (v) => v.usage.turns === 1 && inState('callingModel')(v)), until(b, (v) => v.usage.turns === 1 && inState('callingModel')(v))])
  await rt.close()
  return [a.id, b.id]
}

function threadFile(dir: string, id: string, name: string): string {
  return path.join(dir, 'threads', id, name)
}

/** Two threads left mid-call; the first one's state.json edited by hand with `edit` (its snapshot). */
async function editedMidCall(edit: (snapshot: { value: unknown; context: Record<string, unknown> }) => void) {
  const dir = tempDir()
  const [a, b] = await leaveTwoThreadsMidCall(dir)
  const file = threadFile(dir, a, 'state.json')
  const envelope = JSON.parse(fs.readFileSync(file, 'utf8'))
  edit(envelope.snapshot)
  fs.writeFileSync(file, JSON.stringify(envelope))
  return { dir, a, b, envelope }
}

describe('process restart', () => {
  it('should carry on every unfinished thread without being asked', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    const outcomes = await Promise.all(rt.active().map((t) => t.done))
    expect(outcomes.map((o) => o.result)).toEqual(['finished at turn 2', 'finished at turn 2'])
    expect(outcomes.map((o) => o.cost.turns)).toEqual([2, 2])
    expect(verifyReplay(dir, a).matches).toBe(true)
    expect(rt.list({ status: ['created', 'running'] })).toEqual([])
  })

  it('should tell its progress while it recovers: first nothing done, last every thread, with the spend so far', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const seen: Array<Extract<LifecycleEvent, { type: 'recovery_progress' }>> = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onLifecycle: (e) => e.type === 'recovery_progress' && seen.push(e) })
    expect(seen[0]).toMatchObject({ done: 0, total: 2, resumed: 0, spend: 0 })
    const spent = rt.list().filter((r) => r.id === a || r.id === b).reduce((n, r) => n + (r.cost?.spend ?? 0), 0)
    expect(seen.at(-1)).toMatchObject({ done: 2, total: 2, resumed: 2, settled: 0, failed: 0, elsewhere: 0 })
    expect(spent).toBeGreaterThan(0)
    expect(seen.at(-1)!.spend).toBeCloseTo(spent, 9)
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.done).toBeGreaterThanOrEqual(seen[i - 1]!.done)
    await Promise.all(rt.active().map((t) => t.done))
  })

  it('should show recovery on a terminal as one line rewritten, and elsewhere as a few plain lines', () => {
    const event = (done: number) => ({ type: 'recovery_progress' as const, at: 0, done, total: 3, resumed: done, settled: 0, rebuilt: 0, failed: 0, elsewhere: 0, spend: done * 0.5 })
    const tty: string[] = []
    const onTty = showRecovery({ write: (t) => tty.push(t) }, true)
    for (const n of [0, 1, 2, 3]) onTty(event(n))
    expect(tty).toHaveLength(4)
    expect(tty.every((t) => t.startsWith('\r\x1b[2K'))).toBe(true)
    expect(tty.at(-1)).toBe('\r\x1b[2Krecovering 3/3 unfinished threads: 3 resumed; $1.50000 spent so far\n')
    const plain: string[] = []
    const onPlain = showRecovery({ write: (t) => plain.push(t) }, false)
    for (const n of [0, 1, 2, 3]) onPlain(event(n))
    // The first line, then none until a second has passed, and always the last.
    expect(plain).toEqual(['recovering 0/3 unfinished threads; $0.00000 spent so far\n', 'recovering 3/3 unfinished threads: 3 resumed; $1.50000 spent so far\n'])
    expect(statusLine([{ status: 'running', spend: 0.25 }, { status: 'completed', spend: 1 }, { status: 'running', spend: 0 }])).toBe('2 running, 1 completed; $1.25000 spent')
  })

  it('should resume on demand with rt.recover() when opened with recover: false', async () => {
    const dir = tempDir()
    const [a] = await leaveTwoThreadsMidCall(dir)
    const rt = await runtime({ dir, model: finishes, tools: [noop], recover: false })
    expect(rt.active()).toEqual([])
    await expect(rt.get(a).done).rejects.toMatchObject({ code: 'THREAD_NOT_ACTIVE' })
    const report = await rt.recover()
    expect(report.resumed).toContain(a)
    expect((await rt.get(a).done).status).toBe('completed')
  })
})

describe('killed right after a decision on a suspended thread', () => {
  const looping = scriptedModel(() => ({ toolCalls: [{ name: 'noop', input: {} }] }))

  /** A thread suspended at its turn limit in `dir`, by a runtime that then closed. */
  async function suspendedAtTurnLimit(dir: string): Promise<string> {
    const first = await runtime({ dir, model: looping, tools: [noop] })
    const thread = await first.spawn({ directive: { name: 'loop', prompt: 'p' }, limits: { turns: 1 } })
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'limit' })
    await first.close()
    return thread.id
  }

  /** Approves `id` to 3 turns in a runtime that runs it there (it suspends again) and closes. */
  async function approvedToThreeTurns(dir: string, id: string): Promise<void> {
    const second = await runtime({ dir, model: looping, tools: [noop] })
    expect(await (await second.approve(id, { limits: { turns: 3 } })).done).toMatchObject({ status: 'suspended', cost: { turns: 3 } })
    await second.close()
  }

  /** Cuts the transcript just after RESUME and sets the registry back to suspended: what a kill then leaves. */
  function killedAfterResume(dir: string, id: string): string {
    const transcript = threadFile(dir, id, 'transcript.jsonl')
    const lines = fs.readFileSync(transcript, 'utf8').split('\n')
    const kept = lines.slice(0, lines.findIndex((line) => line.includes('"type":"RESUME"')) + 1)
    fs.writeFileSync(transcript, kept.join('\n') + '\n')
    // Nor had the thread suspended again: the request it wrote then goes with the lines cut.
    const approvals = path.join(path.dirname(transcript), 'approvals')
    for (const name of fs.readdirSync(approvals)) {
      if (!kept.some((line) => line.includes(`"${name.replace(/\.(request|response|decision)\b.*$/, '')}"`))) fs.rmSync(path.join(approvals, name))
    }
    const db = new Database(path.join(dir, 'registry.db'))
    db.prepare("UPDATE threads SET status = 'suspended' WHERE id = ?").run(id)
    db.close()
    return transcript
  }

  it('should carry out an approval the transcript holds though the registry still says suspended, exactly once', async () => {
    const dir = tempDir()
    const id = await suspendedAtTurnLimit(dir)
    const state = threadFile(dir, id, 'state.json')
    const suspendedState = fs.readFileSync(state)
    await approvedToThreeTurns(dir, id)
    // What a SIGKILL right after the approval leaves: the decision and RESUME are in the
    // transcript, but neither the new state.json nor the registry's status was committed.
    const transcript = killedAfterResume(dir, id)
    fs.writeFileSync(state, suspendedState)
    const past = new Date(Date.now() - 60_000)
    fs.utimesSync(state, past, past)

    const third = await runtime({ dir, model: looping, tools: [noop] })
    expect(third.lastRecovery.resumed).toEqual([id])
    expect(await third.get(id).done).toMatchObject({ status: 'suspended', cost: { turns: 3 } })
    const entries = fs.readFileSync(transcript, 'utf8').trim().split('\n').map((line) => JSON.parse(line) as { type: string })
    expect(entries.filter((e) => e.type === 'approval_decided')).toHaveLength(1)
    expect(entries.filter((e) => e.type === 'RESUME')).toHaveLength(1)
    await third.close()
    expect(doctor(dir).findings).toEqual([])
  })

  it('should carry on a thread whose state.json was written running but whose registry row still says suspended', async () => {
    const dir = tempDir()
    const id = await suspendedAtTurnLimit(dir)
    await approvedToThreeTurns(dir, id)
    // A kill between the round's state.json and its registry commit: state.json is at RESUME
    // (running), and its mtime is no later than the transcript's; the registry says suspended.
    killedAfterResume(dir, id)
    rebuildThread(dir, id, { apply: true })
    const db = new Database(path.join(dir, 'registry.db'))
    db.prepare("UPDATE threads SET status = 'suspended' WHERE id = ?").run(id)
    db.close()

    const third = await runtime({ dir, model: looping, tools: [noop] })
    expect(third.lastRecovery.resumed).toEqual([id])
    expect(await third.get(id).done).toMatchObject({ status: 'suspended', cost: { turns: 3 } })
  })

  it('should leave a suspended thread whose transcript holds nothing new alone', async () => {
    const dir = tempDir()
    const id = await suspendedAtTurnLimit(dir)
    const second = await runtime({ dir, model: looping, tools: [noop] })
    expect(second.lastRecovery).toMatchObject({ resumed: [], settled: [] })
    expect(second.get(id).status).toBe('suspended')
  })
})

describe('state.json', () => {
  it('should restore with plain XState: createActor(threadMachine, { snapshot })', async () => {
    const dir = tempDir()
    const [a] = await leaveTwoThreadsMidCall(dir)
    const envelope = JSON.parse(fs.readFileSync(threadFile(dir, a, 'state.json'), 'utf8'))
    expect(envelope).toMatchObject({ v: 3, threadId: a, status: 'running' })
    const actor = createActor(threadMachine, { snapshot: envelope.snapshot } as never).start()
    expect(actor.getSnapshot().value).toEqual({ running: 'callingModel' })
    expect(actor.getSnapshot().context.usage.turns).toBe(1)
    actor.send({ type: 'MODEL_REPLIED', at: Date.now(), turn: 2, attempt: 1, text: 'by hand', toolCalls: [], usage: { inputTokens: 1, outputTokens: 1 } })
    expect(actor.getSnapshot().output).toMatchObject({ status: 'completed', result: 'by hand' })
    expect(envelope.snapshot.children).toEqual({})
  })

  it('should fail, naming the fix, a thread whose state.json was edited into a step with nothing to run', async () => {
    // Setup: two threads left in a model call. Fault: one state.json edited by hand into
    // runningTools with no tool call left (it still passes the envelope's checks).
    const { dir, a, b, envelope } = await editedMidCall((snapshot) => {
      snapshot.value = { running: 'runningTools' }
      snapshot.context.toolCalls = []
      snapshot.context.toolsDone = []
    })
    // After: that thread ends in error saying what to do (no hang, no crash of the runtime); a view
    // of the edited snapshot can still be built; the other completes.
    expect(viewOf(a, envelope.snapshot)).toMatchObject({ state: { running: 'runningTools' }, step: null })
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    const [outA, outB] = await Promise.all([rt.get(a).done, rt.get(b).done])
    expect(outA).toMatchObject({ status: 'error', error: { code: 'STATE_CORRUPT', message: expect.stringContaining(`spindle rebuild ${a} --apply`) } })
    expect(outB).toMatchObject({ status: 'completed', result: 'finished at turn 2' })
  })

  it('should rebuild from its transcript a thread whose edited state.json lacks what its step reads', async () => {
    // Fault: limitReached with the context's limits removed.
    const { dir, a, b, envelope } = await editedMidCall((snapshot) => {
      snapshot.value = { running: 'limitReached' }
      delete snapshot.context.limits
    })
    expect(viewOf(a, envelope.snapshot).step).toBeNull()
    const problems: string[] = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(`${p.code} ${p.message}`) })
    expect(rt.lastRecovery.rebuilt).toEqual([a])
    expect(problems).toContainEqual(expect.stringMatching(/^STATE_CORRUPT .*its snapshot has no limits/))
    const outcomes = await Promise.all([rt.get(a).done, rt.get(b).done])
    expect(outcomes.map((o) => o.result)).toEqual(['finished at turn 2', 'finished at turn 2'])
    expect(verifyReplay(dir, a).matches).toBe(true)
  })

  it('should carry on from a version 2 state.json, which held the invoked actor of its step', async () => {
    // Setup: a thread left in a model call, its state.json rewritten as spindle wrote it before
    // version 3: the callModel actor XState persisted beside the snapshot.
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const file = threadFile(dir, a, 'state.json')
    const envelope = JSON.parse(fs.readFileSync(file, 'utf8'))
    envelope.v = 2
    envelope.snapshot.children = {
      callModel: { snapshot: { status: 'active', input: { threadId: a, turn: 2, attempt: 1 } }, src: 'callModel', syncSnapshot: false },
    }
    fs.writeFileSync(file, JSON.stringify(envelope))
    // After: the step's model call is made again, the thread completes, and its state.json and
    // replay agree in version 3's form.
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery).toMatchObject({ rebuilt: [], failed: [] })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    expect(await rt.get(a).done).toMatchObject({ status: 'completed', result: 'finished at turn 2' })
    const after = JSON.parse(fs.readFileSync(file, 'utf8'))
    expect(after).toMatchObject({ v: 3, status: 'completed', snapshot: { children: {} } })
    expect(verifyReplay(dir, a).matches).toBe(true)
  })
})

describe('durable time', () => {
  const rateLimitedOnce = scriptedModel([{ faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '2' } }], reply: { text: 'after the wait' } }])

  it('should wait for Retry-After in simulated time before retrying a 429', async () => {
    const clock = new SimulatedClock()
    clock.set(1_000_000)
    const rt = await runtime({ dir: tempDir(), model: rateLimitedOnce, clock })
    const thread = await rt.spawn({ directive: { name: 'limited', prompt: 'p' } })
    const waiting = await until(thread, inState('waitingToRetry'))
    expect(waiting.retry).toMatchObject({ dueAt: 1_002_000, failure: { category: 'rate_limited', status: 429 } })
    clock.increment(1_999)
    expect(JSON.stringify(thread.getSnapshot().state)).toContain('waitingToRetry')
    clock.increment(1)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'after the wait' })
  })

  it('should resume a backoff interrupted by a restart with the time that remained', async () => {
    const dir = tempDir()
    const clock = new SimulatedClock()
    clock.set(5_000_000)
    const first = await createRuntime({ dir, model: rateLimitedOnce, clock })
    const thread = await first.spawn({ directive: { name: 'backoff', prompt: 'p' } })
    await until(thread, inState('waitingToRetry'))
    clock.increment(500)
    await first.close()

    const rt = await runtime({ dir, model: rateLimitedOnce, clock })
    const resumed = rt.get(thread.id)
    expect(JSON.stringify(resumed.getSnapshot().state)).toContain('waitingToRetry')
    clock.increment(1_499)
    expect(JSON.stringify(resumed.getSnapshot().state)).toContain('waitingToRetry')
    clock.increment(1)
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'after the wait' })
  })

  it('should retry a 503 with backoff and suspend when retries run out', async () => {
    const clock = new SimulatedClock()
    const model = scriptedModel([{ faults: Array(5).fill({ fault: 'http', status: 503 }), reply: { text: '' } }])
    const rt = await runtime({ dir: tempDir(), model, clock, retry: { maxRetries: 2, baseMs: 1_000, jitter: 0 } })
    const thread = await rt.spawn({ directive: { name: 'flaky', prompt: 'p' } })
    for (const wait of [1_000, 2_000]) {
      const view = await until(thread, inState('waitingToRetry'))
      expect(view.retry!.dueAt - clock.now()).toBe(wait)
      clock.increment(wait)
    }
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'error' })
  })
})

describe('effects once', () => {
  function chargeTool(runs: string[], idempotent: boolean, block: boolean) {
    return defineTool({
      name: 'charge',
      description: 'charges',
      input: z.object({}),
      idempotent,
      execute: (_i, { idempotencyKey, signal }) => {
        runs.push(idempotencyKey)
        if (!block) return 'charged'
        return new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)))
      },
    })
  }
  const chargeThenAnswer = (seen: Message[][]) =>
    scriptedModel((r) => {
      seen.push([...r.messages])
      return r.turn === 1 ? { toolCalls: [{ name: 'charge', input: {} }] } : { text: 'answered' }
    })

  /**
   * A runtime stopped while a `charge` call it started is still running: its intent, no result.
   * Closed with no grace, so the call is cut at once, as a crash would cut it (a close notes that it
   * was a shutdown; test/crash/shutdown.test.ts tells the two apart).
   */
  async function crashDuringCharge(idempotent: boolean) {
    const dir = tempDir()
    const firstRuns: string[] = []
    const first = await createRuntime({ dir, model: chargeThenAnswer([]), tools: [chargeTool(firstRuns, idempotent, true)], timeouts: { shutdownGraceMs: 0 } })
    const thread = await first.spawn({ directive: { name: 'pay', prompt: 'p' } })
    await until(thread, inState('runningTools'))
    while (firstRuns.length === 0) await new Promise((r) => setImmediate(r))
    await first.close()
    return { dir, threadId: thread.id, firstRuns }
  }

  it('should not run a non-idempotent tool again after a crash mid-call, and tell the model', async () => {
    const { dir, threadId } = await crashDuringCharge(false)
    const secondRuns: string[] = []
    const seen: Message[][] = []
    const rt = await runtime({ dir, model: chargeThenAnswer(seen), tools: [chargeTool(secondRuns, false, false)] })
    expect(await rt.get(threadId).done).toMatchObject({ status: 'completed', result: 'answered' })
    expect(secondRuns).toEqual([])
    const toolMessage = seen.at(-1)!.find((m) => m.role === 'tool')
    expect(toolMessage).toMatchObject({ isError: true, content: expect.stringContaining('TOOL_INTERRUPTED') })
  })

  it('should run an idempotent tool again with the same idempotency key', async () => {
    const { dir, threadId, firstRuns } = await crashDuringCharge(true)
    const secondRuns: string[] = []
    const rt = await runtime({ dir, model: chargeThenAnswer([]), tools: [chargeTool(secondRuns, true, false)] })
    expect((await rt.get(threadId).done).status).toBe('completed')
    expect(secondRuns).toEqual(firstRuns)
  })
})

describe('bad input on disk', () => {
  it('should rebuild a truncated state.json from the transcript and keep serving the other thread', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const file = threadFile(dir, a, 'state.json')
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').slice(0, 40))
    const problems: string[] = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(`${p.code} ${p.message}`) })
    expect(rt.lastRecovery.rebuilt).toEqual([a])
    expect(problems.some((p) => p.startsWith('STATE_CORRUPT') && p.includes(file))).toBe(true)
    const outcomes = await Promise.all([rt.get(a).done, rt.get(b).done])
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed'])
  })

  it('should rebuild a state.json whose snapshot is valid JSON but no state of the thread machine', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const file = threadFile(dir, a, 'state.json')
    const envelope = JSON.parse(fs.readFileSync(file, 'utf8'))
    envelope.snapshot = { status: 'active', value: { nonsense: 'x' }, context: {} }
    fs.writeFileSync(file, JSON.stringify(envelope))
    const problems: Array<{ code: string; message: string }> = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(p) })
    expect(rt.lastRecovery.rebuilt).toEqual([a])
    expect(problems[0]).toMatchObject({ code: 'STATE_CORRUPT', message: expect.stringContaining(`${file} is not a valid thread state: its snapshot's state {"nonsense":"x"}`) })
    const outcomes = await Promise.all([rt.get(a).done, rt.get(b).done])
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed'])
  })

  it('should mark only the thread whose state.json is a directory error, naming it and changing nothing', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const file = threadFile(dir, a, 'state.json')
    fs.rmSync(file)
    fs.mkdirSync(file)
    const transcriptBefore = fs.readFileSync(threadFile(dir, a, 'transcript.jsonl'))
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery.failed).toEqual([{ threadId: a, code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${file} is a directory`) }])
    expect((await rt.get(b).done).status).toBe('completed')
    expect(fs.statSync(file).isDirectory()).toBe(true)
    expect(fs.readFileSync(threadFile(dir, a, 'transcript.jsonl')).equals(transcriptBefore)).toBe(true)
  })

  it('should tolerate a torn last transcript line, keeping the fragment aside', async () => {
    const dir = tempDir()
    const [a] = await leaveTwoThreadsMidCall(dir)
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    fs.appendFileSync(transcript, '{"seq":99,"ts":"2026-')
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect((await rt.get(a).done).status).toBe('completed')
    const aside = fs.readdirSync(path.dirname(transcript)).filter((f) => f.includes('.torn-'))
    expect(aside).toHaveLength(1)
    expect(fs.readFileSync(path.join(path.dirname(transcript), aside[0]!), 'utf8')).toBe('{"seq":99,"ts":"2026-')
    expect(verifyReplay(dir, a).matches).toBe(true)
  })

  it("should carry on a thread whose transcript holds a stale writer's line between two of its owner's lines, and say so", async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    // The fault: a line repeating seq 3, written by a process that had lost the thread, landed
    // between seq 3 and seq 4 (after the new owner checked the file, before its own write).
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    const lines = fs.readFileSync(transcript, 'utf8').split('\n')
    const staleLine = lines[2]!.replace('"seq":3,', '"seq":3,"stale":true,')
    fs.writeFileSync(transcript, [...lines.slice(0, 3), staleLine, ...lines.slice(3)].join('\n'))
    fs.rmSync(threadFile(dir, a, 'state.json'))
    const problems: Array<{ code: string; threadId?: string }> = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(p) })
    expect(rt.lastRecovery).toMatchObject({ failed: [], rebuilt: [a] })
    expect(problems).toContainEqual(expect.objectContaining({ code: 'TRANSCRIPT_STALE_LINES', threadId: a, message: expect.stringContaining('seq 3 at byte') }))
    expect((await rt.get(a).done).status).toBe('completed')
    expect((await rt.get(b).done).status).toBe('completed')
    await rt.close()
    expect(verifyReplay(dir, a).matches).toBe(true)
    // doctor lists it as no damage, with the way to be rid of it.
    expect(doctor(dir).findings).toContainEqual(expect.objectContaining({ threadId: a, kind: 'lag', code: 'TRANSCRIPT_STALE_LINES', repair: expect.stringContaining('--compact') }))
  })

  /** Runs `dir` until `a` has taken turn 2 and waits in turn 3's model call, then stops it. */
  async function tookTurn2(dir: string, a: string): Promise<void> {
    const hangOnTurn3 = scriptedModel([
      { toolCalls: [{ name: 'noop', input: {} }] },
      { toolCalls: [{ name: 'noop', input: {} }] },
      { faults: [{ fault: 'hang' }], reply: { text: 'never' } },
    ])
    const rt = await createRuntime({ dir, model: hangOnTurn3, tools: [noop] })
    await until(rt.get(a), (v) => v.usage.turns === 2 && inState('callingModel')(v))
    await rt.close()
  }

  /**
   * The lineage of a process that lost `a` while stopped: a copy of `dir` where `a` took turn 2.
   * `lines`: what it appended to `a`'s transcript past where `dir`'s ends.
   */
  async function staleLineage(dir: string, a: string): Promise<{ dir: string; lines: Buffer }> {
    const left = fs.statSync(threadFile(dir, a, 'transcript.jsonl')).size
    const stale = tempDir()
    fs.cpSync(dir, stale, { recursive: true })
    await tookTurn2(stale, a)
    const lines = fs.readFileSync(threadFile(stale, a, 'transcript.jsonl')).subarray(left)
    expect(lines.length).toBeGreaterThan(0)
    return { dir: stale, lines }
  }

  /** Opens `dir` after the fault: `a` rebuilt from its transcript with a notice, then both threads complete and `a` replays. */
  async function rebuiltAndCarriedOn(dir: string, a: string, b: string) {
    const problems: Array<{ code: string; threadId?: string; message: string }> = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(p) })
    expect(rt.lastRecovery).toMatchObject({ failed: [], rebuilt: [a] })
    const notice = problems.find((p) => p.code === 'STATE_CORRUPT' && p.threadId === a)?.message
    expect(notice).toContain('after it had lost the thread')
    const outcome = await rt.get(a).done
    expect(outcome.status).toBe('completed')
    expect((await rt.get(b).done).status).toBe('completed')
    await rt.close()
    expect(verifyReplay(dir, a).matches).toBe(true)
    return { notice: notice!, outcome }
  }

  it("should rebuild a state.json that a process which had lost the thread renamed over the new owner's, pointing at its line set aside", async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    // The fault: the last line and state.json of `a` come from a process that had lost it (stopped
    // between its lease check and its writes). The new owner set that line aside, as it does a
    // stale writer's, and was killed before its next checkpoint; the stale state.json stayed.
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    const bytes = fs.readFileSync(transcript)
    const offset = bytes.lastIndexOf(0x0a, bytes.length - 2) + 1
    fs.writeFileSync(`${transcript}.torn-${offset}`, bytes.subarray(offset))
    fs.truncateSync(transcript, offset)
    const state = JSON.parse(fs.readFileSync(threadFile(dir, a, 'state.json'), 'utf8')) as { transcript: { bytes: number } }
    expect(state.transcript.bytes).toBe(bytes.length)

    // After: rebuilt from the transcript and carried on, naming the kept line's file; the other thread untouched.
    const { notice } = await rebuiltAndCarriedOn(dir, a, b)
    expect(notice).toContain(`found in ${transcript}.torn-${offset}, outside the thread's chain`)
  })

  it("should rebuild a stale state.json whose writer's lines landed after the new owner's, its anchor pointing into the new owner's lines", async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    // Two lineages from where the first runtime stopped: the stopped process's (a copy) and the new owner's (dir).
    const stale = await staleLineage(dir, a)
    await tookTurn2(dir, a)
    // The fault: the stopped process's lines land after the new owner's (its descriptor appends),
    // and its state.json, anchored where it believed its last line ended, replaces the new owner's.
    fs.appendFileSync(transcript, stale.lines)
    fs.copyFileSync(threadFile(stale.dir, a, 'state.json'), threadFile(dir, a, 'state.json'))

    // After: rebuilt from the new owner's chain (the stale lines are no part of it) and carried on.
    const { notice, outcome } = await rebuiltAndCarriedOn(dir, a, b)
    expect(notice).toContain(`found in ${transcript}, outside the thread's chain`)
    expect(outcome.cost.turns).toBe(3)
  })

  it("should take a thread straight back when a stopped process's line lands ahead of it while it waits, not at its next heartbeat", async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    const stale = await staleLineage(dir, a)

    // This runtime takes both threads over and waits in their turn-2 model calls, writing nothing;
    // its heartbeat would come only after the test's timeout.
    let answer!: () => void
    const answered = new Promise<void>((resolve) => (answer = resolve))
    const gated = { name: 'gated', generate: async () => (await answered, { text: 'done', toolCalls: [], usage: { inputTokens: 1, outputTokens: 1 } }) }
    const problems: Array<{ code: string; threadId?: string }> = []
    const rt = await runtime({ dir, model: gated, tools: [noop], config: { orphans: { thresholdMs: 1_800_000, heartbeatMs: 600_000 } }, onProblem: (p) => problems.push(p) })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    // The fault: the stopped process's lines land past this runtime's last line of `a`.
    fs.appendFileSync(transcript, stale.lines)
    answer()

    // After: `a` stops here (its next line would fork the chain), is taken over again at once with
    // those lines as its history, and completes from turn 3; `b` completes untouched.
    expect((await rt.get(b).done).status).toBe('completed')
    const completed = (): boolean => rt.list({ status: 'completed' }).some((r) => r.id === a)
    expect(await eventually({ settle: () => new Promise((resolve) => setTimeout(resolve, 5)) }, completed, 10_000)).toBe(true)
    expect(problems).toContainEqual(expect.objectContaining({ code: 'LEASE_LOST', threadId: a }))
    expect(problems).toContainEqual(expect.objectContaining({ code: 'THREAD_LEASED', threadId: a }))
    await rt.close()
    expect(verifyReplay(dir, a).matches).toBe(true)
    const types = fs.readFileSync(transcript, 'utf8').trim().split('\n').map((line) => JSON.parse(line) as { type: string; data: unknown })
    expect(types.filter((e) => e.type === 'MODEL_REPLIED')).toHaveLength(3)
  })

  it('should claim the registry rows of the threads it takes over with their new lease tokens', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const tokens = (): Array<[number, number | null]> => {
      const leases = new Database(path.join(dir, 'leases.db'), { readonly: true })
      const registry = new Database(path.join(dir, 'registry.db'), { readonly: true })
      try {
        return [a, b].map((id) => [
          (leases.prepare('SELECT token FROM tokens WHERE thread_id = ?').get(id) as { token: number }).token,
          (registry.prepare('SELECT token FROM lease_claims WHERE thread_id = ?').get(id) as { token: number } | undefined)?.token ?? null,
        ])
      } finally {
        leases.close()
        registry.close()
      }
    }
    // The first runtime took them when it spawned them (token 1: no change of hands, nothing
    // claimed), and released them at close.
    expect(tokens()).toEqual([[1, null], [1, null]])
    const rt = await runtime({ dir, model: hangOnTurn2, tools: [noop] })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    // Taken again at the next token, and the rows say so before the threads run: a process still
    // holding token 1 (stopped, not closed) would now be refused.
    expect(tokens()).toEqual([[2, 2], [2, 2]])
  })

  it('should keep publishing statuses when leases.db hands out tokens the registry has seen (its last commits lost, or the file deleted)', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    // Taken over once more (token 2, claimed in registry.db), then stopped again.
    await (await createRuntime({ dir, model: hangOnTurn2, tools: [noop] })).close()
    // The fault: leases.db is gone (a power loss can also take its last commits: it is not
    // fsynced); registry.db, which is, keeps the claims at token 2. Tokens start again at 1.
    for (const suffix of ['', '-wal', '-shm']) fs.rmSync(path.join(dir, `leases.db${suffix}`), { force: true })

    // After: the runtime raises its tokens past the claims, so its statuses are published, and
    // nothing is refused as if another process had taken the threads.
    const problems: Array<{ code: string }> = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(p) })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    expect((await rt.get(a).done).status).toBe('completed')
    expect((await rt.get(b).done).status).toBe('completed')
    await rt.close()
    expect(problems.filter((p) => p.code === 'LEASE_LOST')).toEqual([])
    const registry = new Database(path.join(dir, 'registry.db'), { readonly: true })
    try {
      expect(registry.prepare('SELECT status FROM threads WHERE id IN (?, ?)').pluck().all(a, b)).toEqual(['completed', 'completed'])
      expect(registry.prepare('SELECT token FROM lease_claims WHERE thread_id IN (?, ?)').pluck().all(a, b)).toEqual([3, 3])
    } finally {
      registry.close()
    }
  })

  it('should report a broken hash chain with the seq where it breaks, and mark only that thread error', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    // Remove state.json too, so recovery must read the whole (tampered) transcript.
    fs.rmSync(threadFile(dir, a, 'state.json'))
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    const lines = fs.readFileSync(transcript, 'utf8').split('\n')
    lines[2] = lines[2]!.replace('"turn":1', '"turn":7')
    fs.writeFileSync(transcript, lines.join('\n'))
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery.failed).toEqual([{ threadId: a, code: 'TRANSCRIPT_CHAIN_BROKEN', message: expect.stringContaining('at seq 3') }])
    expect(rt.get(a).status).toBe('error')
    expect((await rt.get(b).done).status).toBe('completed')
  })

  it('should end only that thread in error when a break below its checkpoint shows at its next model call, writing nothing to its files', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    // state.json stays: recovery reads only the transcript after it, and the break is further back.
    const transcript = threadFile(dir, a, 'transcript.jsonl')
    const lines = fs.readFileSync(transcript, 'utf8').split('\n')
    lines[2] = lines[2]!.replace('"turn":1', '"turn":7')
    fs.writeFileSync(transcript, lines.join('\n'))
    const before = fs.readFileSync(transcript)
    const stateBefore = fs.readFileSync(threadFile(dir, a, 'state.json'))
    const events: LifecycleEvent[] = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onLifecycle: (e) => events.push(e) })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    expect(await rt.get(a).done).toMatchObject({ status: 'error', error: { code: 'TRANSCRIPT_CHAIN_BROKEN', message: expect.stringContaining('at seq 3') } })
    expect((await rt.get(b).done).status).toBe('completed')
    // Damage is not a crash: no restarts, which would read it again and count against the group.
    expect(events.filter((e) => e.type === 'thread_crashed' || e.type === 'supervision_gave_up')).toEqual([])
    await rt.close()
    expect(fs.readFileSync(transcript).equals(before)).toBe(true)
    expect(fs.readFileSync(threadFile(dir, a, 'state.json')).equals(stateBefore)).toBe(true)
    // A later runtime leaves it alone: the registry says error.
    const next = await runtime({ dir, model: finishes, tools: [noop] })
    expect(next.lastRecovery.resumed).toEqual([])
    expect(next.list({ status: 'error' }).map((r) => r.id)).toEqual([a])
  })

  it('should give a damaged child\'s budget back to its parent and tell the parent, as for any child in error', async () => {
    const dir = tempDir()
    const spendsThenHangs = scriptedModel((r) =>
      r.turn === 1 ? { toolCalls: [{ name: 'noop', input: {} }], usage: { inputTokens: 1, outputTokens: 1, cost: 0.5 } } : { faults: [{ fault: 'hang' }], reply: { text: 'never' } },
    )
    const first = await runtime({ dir, model: spendsThenHangs, tools: [noop] })
    const parent = await first.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spend: 10 } })
    const child = await first.spawn({ directive: { name: 'child', prompt: 'p' }, limits: { spend: 4 }, parentId: parent.id })
    await until(child, (v) => v.usage.turns === 1 && inState('callingModel')(v))
    await first.close()
    const transcript = threadFile(dir, child.id, 'transcript.jsonl')
    const lines = fs.readFileSync(transcript, 'utf8').split('\n')
    lines[2] = lines[2]!.replace('"turn":1', '"turn":7')
    fs.writeFileSync(transcript, lines.join('\n'))
    const events: LifecycleEvent[] = []
    const second = await runtime({ dir, model: finishes, tools: [noop], onLifecycle: (e) => events.push(e) })
    expect(await second.get(child.id).done).toMatchObject({ status: 'error', error: { code: 'TRANSCRIPT_CHAIN_BROKEN' } })
    expect(events.filter((e) => e.type === 'child_thread_failed')).toEqual([expect.objectContaining({ threadId: child.id, parentId: parent.id })])
    await second.close()
    const ledger = openSqliteLedger({ path: path.join(dir, 'ledger.db'), durability: 'process' })
    try {
      expect(ledger.get(child.id)?.released).toBe(true)
      expect(ledger.get(parent.id)?.reserved.spend).toBe(0)
    } finally {
      ledger.close()
    }
  })

  it('should skip and report a directory in journal/, carrying every thread on, and doctor should name it', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const stray = path.join(dir, 'journal', 'x.journal')
    fs.mkdirSync(stray, { recursive: true })
    const problems: Array<{ code: string; message: string }> = []
    const rt = await runtime({ dir, model: finishes, tools: [noop], onProblem: (p) => problems.push(p) })
    const outcomes = await Promise.all([rt.get(a).done, rt.get(b).done])
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed'])
    expect(problems).toEqual([expect.objectContaining({ code: 'JOURNAL_UNREADABLE', message: expect.stringContaining(stray) })])
    expect(fs.statSync(stray).isDirectory()).toBe(true)
    await rt.close()
    expect(doctor(dir).findings).toEqual([expect.objectContaining({ code: 'JOURNAL_UNREADABLE', message: expect.stringContaining(stray) })])
  })

  it('should refuse a data directory whose threads/ or journal/ is a file, naming it and changing nothing', async () => {
    for (const entry of ['journal', 'threads']) {
      const dir = tempDir()
      await leaveTwoThreadsMidCall(dir)
      const target = path.join(dir, entry)
      fs.rmSync(target, { recursive: true, force: true })
      fs.writeFileSync(target, 'not a directory')
      const registryBefore = fs.readFileSync(path.join(dir, 'registry.db'))
      await expect(createRuntime({ dir, model: finishes, tools: [noop] })).rejects.toMatchObject({ code: 'DATA_DIR_INVALID', message: expect.stringContaining(target) })
      expect(fs.readFileSync(target, 'utf8')).toBe('not a directory')
      expect(fs.readFileSync(path.join(dir, 'registry.db')).equals(registryBefore)).toBe(true)
      expect(() => doctor(dir)).toThrow(expect.objectContaining({ code: 'DATA_DIR_INVALID' }))
    }
  })

  it('should refuse a directory whose registry.db was lost, changing nothing, and carry on once it is restored', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    const registry = path.join(dir, 'registry.db')
    const backup = fs.readFileSync(registry)
    for (const lose of [() => fs.writeFileSync(registry, ''), () => fs.rmSync(registry)]) {
      lose()
      await expect(createRuntime({ dir, model: finishes, tools: [noop] })).rejects.toMatchObject({
        code: 'REGISTRY_FAILED',
        message: expect.stringContaining(`${registry} is`),
      })
      expect(() => doctor(dir)).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
      // No empty registry was made in its place: the refusal stands until it is restored.
      expect(fs.existsSync(registry) ? fs.statSync(registry).size : 0).toBe(0)
    }
    fs.writeFileSync(registry, backup)
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
  })

  it('should settle a registry row without files as error, saying nothing acknowledged was lost', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    fs.rmSync(path.join(dir, 'threads', a), { recursive: true })
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery.failed[0]).toMatchObject({ threadId: a, code: 'FILES_MISSING', message: expect.stringContaining('never checkpointed') })
    expect(await rt.get(a).done).toMatchObject({ status: 'error', error: { code: 'FILES_MISSING' } })
    expect((await rt.get(b).done).status).toBe('completed')
  })

  it('should settle a thread killed between registering and its first transcript line as never acknowledged', async () => {
    const dir = tempDir()
    const [a, b] = await leaveTwoThreadsMidCall(dir)
    fs.rmSync(threadFile(dir, a, 'state.json'))
    fs.writeFileSync(threadFile(dir, a, 'transcript.jsonl'), '')
    const rt = await runtime({ dir, model: finishes, tools: [noop] })
    expect(rt.lastRecovery.failed[0]).toMatchObject({ threadId: a, code: 'FILES_MISSING', message: expect.stringContaining('empty transcript') })
    expect((await rt.get(b).done).status).toBe('completed')
  })

  it('should refuse ids that could leave the data directory, and name unknown ids', async () => {
    const rt = await runtime({ dir: tempDir(), model: finishes })
    expect(() => rt.get('../etc-aaaaaaaaaaaa')).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
    expect(() => rt.get('research-aaaaaaaaaaaa/../../x')).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
    expect(() => rt.get('research-aaaaaaaaaaaa')).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND', message: expect.stringContaining('research-aaaaaaaaaaaa') }))
    // Every way in names an unknown id as unknown, not as damage or as a state it is not in.
    const unknown = 'ghost-aaaaaaaaaaaa'
    expect(() => rt.chain(unknown)).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
    expect(() => verifyReplay(rt.dir, unknown)).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
    expect(() => respondToApproval(rt.dir, unknown, { approved: true })).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
  })
})
