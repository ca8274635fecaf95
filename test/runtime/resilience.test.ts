/**
 * The recovery matrix of design 000, one scenario per row the resilience layer owns: its setup,
 * the fault, and what must hold after. Time is simulated; files, SQLite and processes are real.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { ThreadHandle } from '../../src/index.js'
import { defineTool, scriptedModel } from '../../src/index.js'
import { createTestRuntime } from '../../src/testing.js'
import type { TestRuntime } from '../../src/testing.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { readRequestLog, requestCancel, respondToApproval } from '../../src/thread/requests.js'
import { inState, until } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
/** Calls `noop` every turn, saying where it is, and never finishes on its own. */
const looping = scriptedModel((r) => ({ text: `working on turn ${r.turn}`, toolCalls: [{ name: 'noop', input: {} }], usage: { inputTokens: 100, outputTokens: 20, cost: 0.25 } }))

function transcriptTypes(rt: TestRuntime, id: string): string[] {
  return fs
    .readFileSync(path.join(rt.dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line).type as string)
}

function transcriptEntries(rt: TestRuntime, id: string, type: string): Array<Record<string, unknown>> {
  return fs
    .readFileSync(path.join(rt.dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line))
    .filter((e) => e.type === type)
    .map((e) => e.data)
}

function approvalsDir(rt: TestRuntime, id: string): string {
  return path.join(rt.dir, 'threads', id, 'approvals')
}

/** The thread's one approval request file, waited for: it is written just after the suspension is durable. */
async function requestFileOf(rt: TestRuntime, id: string): Promise<Record<string, any>> {
  const listed = () => (fs.existsSync(approvalsDir(rt, id)) ? fs.readdirSync(approvalsDir(rt, id)).filter((n) => n.endsWith('.request.json')) : [])
  for (let tries = 0; tries < 200 && listed().length === 0; tries++) await new Promise((r) => setTimeout(r, 10))
  const names = listed()
  expect(names).toHaveLength(1)
  return JSON.parse(fs.readFileSync(path.join(approvalsDir(rt, id), names[0]!), 'utf8'))
}

async function suspendedAtLimit(rt: TestRuntime, limits: Record<string, number>): Promise<ThreadHandle> {
  const thread = await rt.spawn({ directive: { name: 'research', prompt: 'p' }, limits })
  expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'limit' })
  // The request file follows the durable suspension.
  await rt.settle()
  return thread
}

describe('429 rate limit → auto-retry after Retry-After', () => {
  it('should wait the 2 s the provider asked for in simulated time, record the classification and the success', async () => {
    const model = scriptedModel([{ faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '2' } }], reply: { text: 'done' } }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'limited', prompt: 'p' } })
    const waiting = await until(thread, inState('waitingToRetry'))
    expect(waiting.retry!.dueAt - rt.clock.now()).toBe(2_000)
    await rt.advance(1_999)
    expect(thread.getSnapshot().state).toEqual({ running: 'waitingToRetry' })
    await rt.advance(1)
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'done' })
    expect(transcriptEntries(rt, thread.id, 'error_classified')).toEqual([
      expect.objectContaining({ category: 'rate_limited', status: 429, retryAfterMs: 2_000, retryInMs: 2_000, attempt: 1 }),
    ])
    expect(transcriptEntries(rt, thread.id, 'retry_succeeded')).toEqual([expect.objectContaining({ turn: 1, attempts: 2 })])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('API quota exhausted → one wait of 60 s, then suspend', () => {
  it('should classify a 429 insufficient_quota as quota (never rate limit), wait once and suspend for an operator', async () => {
    const quota = { fault: 'http' as const, status: 429, code: 'insufficient_quota', message: 'You exceeded your current quota', headers: { 'retry-after': '1' } }
    const model = scriptedModel([{ faults: [quota, quota, quota], reply: { text: 'never' } }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'broke', prompt: 'p' } })
    const waiting = await until(thread, inState('waitingToRetry'))
    expect(waiting.retry).toMatchObject({ failure: { category: 'quota' } })
    expect(waiting.retry!.dueAt - rt.clock.now()).toBe(60_000)
    await rt.advance(60_000)
    // The host is told which error it stopped on, not only that it was one.
    expect(await thread.done).toMatchObject({
      status: 'suspended',
      suspendReason: 'error',
      error: { code: 'insufficient_quota', message: expect.stringContaining('quota') },
    })
    expect(transcriptEntries(rt, thread.id, 'error_classified').map((e) => e.category)).toEqual(['quota', 'quota'])
    expect(rt.list({ status: 'suspended' }).map((r) => r.id)).toEqual([thread.id])
  })

  it('should carry on with rt.resume once the operator has topped the account up', async () => {
    // The account is empty for the first two calls, topped up by the time of the third.
    let calls = 0
    const model = scriptedModel(() =>
      ++calls <= 2 ? { faults: Array(3).fill({ fault: 'http', status: 429, code: 'insufficient_quota' }), reply: { text: '' } } : { text: 'paid up' },
    )
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'broke', prompt: 'p' } })
    await until(thread, inState('waitingToRetry'))
    await rt.advance(60_000)
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'error' })
    await expect(rt.approve(thread.id)).rejects.toMatchObject({ code: 'THREAD_NOT_SUSPENDED' })
    const resumed = await rt.resume(thread.id, { by: 'ops' })
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'paid up' })
    expect(transcriptEntries(rt, thread.id, 'RESUME')).toEqual([expect.objectContaining({ decision: 'resumed', by: 'ops' })])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('permanent error → no retry', () => {
  it('should end a 401 in error at once, with the classification in the transcript', async () => {
    const model = scriptedModel([{ faults: [{ fault: 'http', status: 401, message: 'invalid api key' }], reply: { text: 'never' } }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'badkey', prompt: 'p' } })
    expect(await thread.done).toMatchObject({ status: 'error', error: { message: 'invalid api key' } })
    expect(transcriptEntries(rt, thread.id, 'error_classified')).toEqual([expect.objectContaining({ category: 'permanent', status: 401 })])
  })
})

describe('max_spend hit → suspend → escalation → approve → bump and resume', () => {
  it('should double the spend limit on approval and finish with its cumulative cost', async () => {
    const model = scriptedModel((r) =>
      r.turn <= 5
        ? { text: `step ${r.turn}`, toolCalls: [{ name: 'noop', input: {} }], usage: { inputTokens: 100, outputTokens: 20, cost: 0.25 } }
        : { text: 'final answer', usage: { inputTokens: 100, outputTokens: 20, cost: 0.25 } },
    )
    const rt = await runtime({ model, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { spend: 1 })
    expect(thread.getSnapshot().limitHit).toMatchObject({ limit: 'spend', used: 1, max: 1, proposed: 2 })

    const request = await requestFileOf(rt, thread.id)
    expect(request).toMatchObject({ threadId: thread.id, kind: 'limit_escalation', limit: 'spend', used: 1, max: 1, proposed: 2 })
    expect(request.message).toContain("Thread 'research' has reached its spend limit.")
    expect(request.message).toContain('Approve to raise the spend limit to $2.00000?')
    expect(transcriptTypes(rt, thread.id)).toContain('limit_escalation_requested')

    const resumed = await rt.approve(thread.id)
    const outcome = await resumed.done
    expect(outcome).toMatchObject({ status: 'completed', result: 'final answer', cost: { turns: 6, spend: 1.5 } })
    expect(resumed.getSnapshot().limits.spend).toBe(2)
    expect(transcriptEntries(rt, thread.id, 'approval_decided')).toEqual([expect.objectContaining({ decision: 'approved', by: 'api', limits: { spend: 2 } })])
    expect(JSON.parse(fs.readFileSync(path.join(approvalsDir(rt, thread.id), `${request.id}.decision.json`), 'utf8'))).toMatchObject({ decision: 'approved' })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should refuse an approval whose limits would suspend the thread again at once', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { spend: 1 })
    await expect(rt.approve(thread.id, { limits: { spend: 0.5 } })).rejects.toMatchObject({ code: 'LIMIT_STILL_EXCEEDED' })
    await expect(rt.resume(thread.id)).rejects.toMatchObject({ code: 'APPROVAL_NEEDS_LIMITS' })
    expect(rt.get(thread.id).status).toBe('suspended')
  })
})

describe('max_turns hit → the operator answers with a response file', () => {
  it('should pick up an approval written next to the request and resume the same thread', async () => {
    const model = scriptedModel((r) => (r.turn <= 3 ? { text: `t${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] } : { text: 'done at last' }))
    const rt = await runtime({ model, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { turns: 2 })
    const request = await requestFileOf(rt, thread.id)
    expect(request.respond.file).toBe(path.join('threads', thread.id, 'approvals', `${request.id}.response.json`))

    // Another process answers: the same file any script could write.
    const file = respondToApproval(rt.dir, thread.id, { approved: true, by: 'alice' })
    const report = await rt.checkRequests()
    expect(report.honoured).toEqual([{ threadId: thread.id, kind: 'approval', file }])
    const resumed = rt.get(thread.id)
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'done at last', cost: { turns: 4 } })
    expect(resumed.getSnapshot().limits.turns).toBe(4)
    expect(transcriptEntries(rt, thread.id, 'RESUME')).toEqual([expect.objectContaining({ decision: 'approved', by: 'alice', limits: { turns: 4 } })])
    expect(readRequestLog(rt.dir)).toEqual([expect.objectContaining({ kind: 'approval', threadId: thread.id, outcome: 'honoured' })])
  })

  it('should set aside a response that answers no open request of the thread, and say which one is open', async () => {
    const problems: Array<{ code: string; message: string }> = []
    const rt = await runtime({ model: looping, tools: [noop], onProblem: (p) => problems.push(p) })
    const thread = await suspendedAtLimit(rt, { turns: 1 })
    const open = await requestFileOf(rt, thread.id)
    const typo = path.join(approvalsDir(rt, thread.id), 'turns-9-typo.response.json')
    fs.writeFileSync(typo, JSON.stringify({ approved: true }))
    const report = await rt.checkRequests({ sweep: true })
    expect(report.refused).toEqual([expect.objectContaining({ threadId: thread.id, kind: 'approval', file: typo, reason: `thread ${thread.id} has no approval request turns-9-typo` })])
    expect(fs.existsSync(typo)).toBe(false)
    expect(fs.existsSync(path.join(approvalsDir(rt, thread.id), 'turns-9-typo.response.rejected.json'))).toBe(true)
    expect(problems.at(-1)?.message).toContain(`Its open request is ${path.join(approvalsDir(rt, thread.id), `${open.id}.request.json`)}`)
    expect(rt.get(thread.id).status).toBe('suspended')
    // An answer to an open request this runtime did not issue (another runtime on the directory
    // woke the thread, and it suspended there again) is that runtime's: left alone.
    const elsewhere = path.join(approvalsDir(rt, thread.id), 'turns-2-other.response.json')
    fs.writeFileSync(path.join(approvalsDir(rt, thread.id), 'turns-2-other.request.json'), '{}')
    fs.writeFileSync(elsewhere, JSON.stringify({ approved: true }))
    expect((await rt.checkRequests({ sweep: true })).refused).toEqual([])
    expect(fs.existsSync(elsewhere)).toBe(true)
  })

  it('should reject an invalid response file, keep the request open and lose nothing', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { turns: 1 })
    const request = await requestFileOf(rt, thread.id)
    const response = path.join(approvalsDir(rt, thread.id), `${request.id}.response.json`)
    fs.writeFileSync(response, '{"approved": "yes please"}')
    const report = await rt.checkRequests()
    expect(report.refused).toEqual([expect.objectContaining({ kind: 'approval', reason: expect.stringContaining('approved') })])
    expect(fs.existsSync(path.join(approvalsDir(rt, thread.id), `${request.id}.response.rejected.json`))).toBe(true)
    expect(rt.get(thread.id).status).toBe('suspended')
    // A corrected answer still works.
    fs.writeFileSync(response, JSON.stringify({ approved: false, message: 'enough' }))
    await rt.checkRequests()
    await expect(rt.get(thread.id).done).resolves.toMatchObject({ status: 'cancelled' })
  })
})

describe('decisions take text', () => {
  it('should refuse a by, message or reason that is not text of a sensible length, leaving the thread suspended', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { turns: 1 })
    await expect(rt.approve(thread.id, { by: 5 as unknown as string })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('by must be a string') })
    await expect(rt.approve(thread.id, { message: 'x'.repeat(10_001) })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' })
    await expect(rt.deny(thread.id, { text: 'no' } as unknown as string)).rejects.toMatchObject({ code: 'INVALID_OPTIONS' })
    expect(rt.get(thread.id).status).toBe('suspended')
  })
})

describe('max_tokens hit → deny', () => {
  it('should end a denied thread cancelled with its partial result and cost', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { tokens: 300 })
    expect(thread.getSnapshot().limitHit).toMatchObject({ limit: 'tokens', used: 360, max: 300, proposed: 600 })
    const outcome = await rt.deny(thread.id, 'too expensive')
    expect(outcome).toMatchObject({
      status: 'cancelled',
      result: 'working on turn 3',
      error: { code: 'cancelled', message: 'denied: too expensive' },
      cost: { turns: 3, inputTokens: 300, outputTokens: 60 },
    })
    expect(transcriptEntries(rt, thread.id, 'approval_decided')).toEqual([expect.objectContaining({ decision: 'denied', message: 'too expensive' })])
    expect(rt.list({ status: 'cancelled' }).map((r) => r.id)).toEqual([thread.id])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })
})

describe('a suspended thread waits on disk', () => {
  it('should hold no live actor while suspended, and be approved by a runtime opened later', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const threads = await Promise.all([1, 2, 3].map(() => rt.spawn({ directive: { name: 'many', prompt: 'p' }, limits: { turns: 1 } })))
    await Promise.all(threads.map((t) => t.done))
    expect(rt.active()).toHaveLength(0)
    await rt.close()

    const later = await runtime({ model: looping, tools: [noop], dir: rt.dir })
    expect(later.active()).toHaveLength(0)
    const approved = await later.approve(threads[0]!.id, { limits: { turns: 2 } })
    expect(later.active().map((t) => t.id)).toEqual([threads[0]!.id])
    expect(await approved.done).toMatchObject({ status: 'suspended', cost: { turns: 2 } })
  })
})

describe('process crash between a suspension and its approval request', () => {
  it('should write the missing request file when a runtime next opens the directory', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { turns: 1 })
    const request = await requestFileOf(rt, thread.id)
    await rt.close()
    fs.rmSync(path.join(approvalsDir(rt, thread.id), `${request.id}.request.json`))
    const later = await runtime({ model: looping, tools: [noop], dir: rt.dir })
    expect(await requestFileOf(later, thread.id)).toMatchObject({ id: request.id, limit: 'turns', proposed: 2 })
  })
})

describe('user cancellation', () => {
  it('should abort a hanging model call at once through rt.cancel and save the state', async () => {
    let aborted: unknown = null
    const model = {
      name: 'hangs',
      generate: (request: { signal: AbortSignal }) =>
        new Promise<never>((_, reject) => request.signal.addEventListener('abort', () => reject((aborted = request.signal.reason)))),
    }
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'slow', prompt: 'p' } })
    await until(thread, inState('callingModel'))
    await rt.settle()
    const result = await rt.cancel(thread.id, 'wrong plan')
    expect(result).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled', error: { message: 'wrong plan' } } })
    expect(aborted).not.toBeNull()
    expect(transcriptEntries(rt, thread.id, 'CANCEL')).toEqual([expect.objectContaining({ reason: 'wrong plan', by: 'api' })])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should abort a running tool and a retry wait at once', async () => {
    let toolSignal: AbortSignal | null = null
    const slow = defineTool({
      name: 'slow',
      description: 'waits for its signal',
      input: z.object({}),
      execute: (_input, ctx) => {
        toolSignal = ctx.signal
        return new Promise((_, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)))
      },
    })
    const rt = await runtime({ model: scriptedModel([{ toolCalls: [{ name: 'slow' }] }]), tools: [slow] })
    const inTool = await rt.spawn({ directive: { name: 'tooling', prompt: 'p' } })
    await until(inTool, inState('runningTools'))
    await rt.settle()
    expect(toolSignal).not.toBeNull()
    await rt.cancel(inTool.id, 'stop the tool')
    expect(toolSignal!.aborted).toBe(true)

    const waiting = await runtime({ model: scriptedModel([{ faults: [{ fault: 'http', status: 503 }], reply: { text: 'x' } }]) })
    const inWait = await waiting.spawn({ directive: { name: 'waiting', prompt: 'p' } })
    await until(inWait, inState('waitingToRetry'))
    expect(await waiting.cancel(inWait.id, 'no more waiting')).toMatchObject({ outcome: { status: 'cancelled' } })
  })

  it('should honour a cancel file carrying the thread nonce, written by another process', async () => {
    const model = { name: 'hangs', generate: (r: { signal: AbortSignal }) => new Promise<never>((_, reject) => r.signal.addEventListener('abort', () => reject(r.signal.reason))) }
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'runaway', prompt: 'p' } })
    await until(thread, inState('callingModel'))
    const file = requestCancel(rt.dir, thread.id, { reason: 'burning tokens', by: 'bob' })
    const report = await rt.checkRequests()
    expect(report.honoured).toEqual([{ threadId: thread.id, kind: 'cancel', file }])
    expect(await thread.done).toMatchObject({ status: 'cancelled', error: { message: 'burning tokens' } })
    expect(fs.existsSync(file)).toBe(false)
    expect(transcriptEntries(rt, thread.id, 'CANCEL')).toEqual([expect.objectContaining({ reason: 'burning tokens', by: 'bob' })])
  })

  it('should cancel a suspended thread from disk', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await suspendedAtLimit(rt, { turns: 1 })
    const registry = openSqliteRegistry({ path: path.join(rt.dir, 'registry.db'), durability: 'process' })
    const nonce = registry.get(thread.id)!.nonce
    registry.close()
    fs.writeFileSync(path.join(rt.dir, 'threads', thread.id, 'cancel.requested'), JSON.stringify({ nonce, reason: 'not needed' }))
    await rt.checkRequests()
    expect(await rt.get(thread.id).done).toMatchObject({ status: 'cancelled', result: 'working on turn 1' })
  })
})

describe('forged cancel files are refused and logged', () => {
  async function oneOfEach(rt: TestRuntime) {
    const hang = await rt.spawn({ directive: { name: 'live', prompt: 'p' } })
    await until(hang, inState('callingModel'))
    return hang
  }

  it('should refuse a wrong nonce, an unknown id and a completed thread, and leave each thread as it was', async () => {
    const model = scriptedModel((r) => (r.directiveName === 'live' ? { faults: [{ fault: 'hang' }], reply: { text: '' } } : { text: 'finished' }))
    const rt = await runtime({ model })
    const live = await oneOfEach(rt)
    const done = await rt.spawn({ directive: { name: 'done', prompt: 'p' } })
    await done.done
    const threads = path.join(rt.dir, 'threads')
    fs.writeFileSync(path.join(threads, live.id, 'cancel.requested'), JSON.stringify({ nonce: 'guessed', reason: 'forged' }))
    const unknown = 'ghost-aaaaaaaaaaaa'
    fs.mkdirSync(path.join(threads, unknown))
    fs.writeFileSync(path.join(threads, unknown, 'cancel.requested'), JSON.stringify({ nonce: 'x' }))
    const registry = openSqliteRegistry({ path: path.join(rt.dir, 'registry.db'), durability: 'process' })
    const doneNonce = registry.get(done.id)!.nonce
    registry.close()
    fs.writeFileSync(path.join(threads, done.id, 'cancel.requested'), JSON.stringify({ nonce: doneNonce }))

    const report = await rt.checkRequests({ sweep: true })
    expect(report.honoured).toEqual([])
    expect(report.refused).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ threadId: live.id, reason: expect.stringContaining('nonce') }),
        expect.objectContaining({ threadId: null, reason: 'no such thread in the registry' }),
        expect.objectContaining({ threadId: done.id, reason: expect.stringContaining('completed') }),
      ]),
    )
    expect(report.refused).toHaveLength(3)
    expect(live.status).toBe('running')
    expect(rt.get(done.id).status).toBe('completed')
    expect(readRequestLog(rt.dir).filter((e) => e.outcome === 'refused')).toHaveLength(3)
    expect(transcriptEntries(rt, live.id, 'cancel_refused')).toEqual([expect.objectContaining({ reason: expect.stringContaining('nonce') })])
    expect(fs.existsSync(path.join(threads, live.id, 'cancel.refused.json'))).toBe(true)
    // Writers refuse up front what the runtime would refuse.
    expect(() => requestCancel(rt.dir, done.id)).toThrow(expect.objectContaining({ code: 'THREAD_NOT_ACTIVE' }))
    expect(() => requestCancel(rt.dir, unknown)).toThrow(expect.objectContaining({ code: 'THREAD_NOT_FOUND' }))
    expect(() => requestCancel(rt.dir, '../../etc')).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
  })
})

describe('refused requests are kept as evidence', () => {
  it('should keep every forged cancel file of a thread, each under its own name, and name where it went', async () => {
    const model = scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: { text: '' } }))
    const problems: Array<{ code: string; message: string }> = []
    const rt = await runtime({ model, onProblem: (p) => problems.push(p) })
    const live = await rt.spawn({ directive: { name: 'live', prompt: 'p' } })
    await until(live, inState('callingModel'))
    const dir = path.join(rt.dir, 'threads', live.id)
    const cancel = path.join(dir, 'cancel.requested')
    for (const guess of ['first-guess', 'second-guess']) {
      fs.writeFileSync(cancel, JSON.stringify({ nonce: guess }))
      await rt.checkRequests()
    }
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'cancel.refused.json'), 'utf8'))).toMatchObject({ nonce: 'first-guess' })
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'cancel.refused-2.json'), 'utf8'))).toMatchObject({ nonce: 'second-guess' })
    expect(problems.filter((p) => p.code === 'CANCEL_REFUSED').map((p) => p.message)).toEqual([
      expect.stringContaining(`Refused the cancel request ${cancel} (kept as ${path.join(dir, 'cancel.refused.json')})`),
      expect.stringContaining(`Refused the cancel request ${cancel} (kept as ${path.join(dir, 'cancel.refused-2.json')})`),
    ])
    expect(live.status).toBe('running')
  })
})

describe('policy hooks', () => {
  it("should decide as written: when error.category == 'rate_limited' && thread.turn > 3", async () => {
    const limited = { fault: 'http' as const, status: 429, headers: { 'retry-after': '1' } }
    // Rate limited once on turn 2 (thread.turn 1 done) and once on turn 5 (thread.turn 4 done).
    const model = scriptedModel((r) =>
      r.turn === 2 || r.turn === 5
        ? { faults: [limited], reply: { text: `t${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] } }
        : r.turn < 6
          ? { text: `t${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] }
          : { text: 'never reached' },
    )
    const rt = await runtime({
      model,
      tools: [noop],
      hooks: [{ id: 'give-up-late', event: 'error', when: "error.category == 'rate_limited' && thread.turn > 3", action: 'fail', message: 'too late to wait' }],
    })
    const thread = await rt.spawn({ directive: { name: 'hooked', prompt: 'p' } })
    await until(thread, inState('waitingToRetry'))
    expect(thread.getSnapshot().usage.turns).toBe(1)
    await rt.advance(1_000)
    const outcome = await thread.done
    expect(outcome).toMatchObject({ status: 'error', error: { code: 'HOOK_FAILED', message: expect.stringContaining('give-up-late') } })
    expect(outcome.cost.turns).toBe(4)
    expect(transcriptEntries(rt, thread.id, 'error_classified').map((e) => (e.decision as { hookId?: string } | undefined)?.hookId ?? null)).toEqual([
      null,
      'give-up-late',
    ])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should let a limit hook raise the limit without asking anyone', async () => {
    const model = scriptedModel((r) => (r.turn <= 3 ? { text: `t${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] } : { text: 'done' }))
    const rt = await runtime({
      model,
      tools: [noop],
      hooks: [{ id: 'cheap-turns', event: 'limit', when: "limit.name == 'turns' && thread.cost.spend < 1.0", action: 'retry' }],
    })
    const thread = await rt.spawn({ directive: { name: 'auto', prompt: 'p' }, limits: { turns: 1 } })
    expect(await thread.done).toMatchObject({ status: 'completed', cost: { turns: 4 } })
    expect(transcriptEntries(rt, thread.id, 'LIMIT_DECIDED').map((e) => e.action)).toEqual(['raise', 'raise'])
  })

  it('should let a directive hook abort the thread after a step', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const thread = await rt.spawn({
      directive: { name: 'bounded', prompt: 'p', hooks: [{ id: 'two-steps', event: 'after_step', when: 'step.turn >= 2', action: 'abort', message: 'two is enough' }] },
    })
    expect(await thread.done).toMatchObject({ status: 'cancelled', error: { message: 'aborted by hook two-steps: two is enough' } })
    expect(thread.getSnapshot().usage.turns).toBeGreaterThanOrEqual(2)
  })

  it('should refuse a spawn whose hook condition does not compile, naming the hook', async () => {
    const rt = await runtime({ model: looping })
    await expect(
      rt.spawn({ directive: { name: 'bad', prompt: 'p', hooks: [{ id: 'broken', event: 'error', when: "error.category ==", action: 'fail' }] } }),
    ).rejects.toMatchObject({ message: expect.stringContaining('broken') })
  })
})

describe('configuration layers', () => {
  it('should apply the project config.yaml of the data directory, over the user file', async () => {
    const first = await runtime({ model: looping, tools: [noop] })
    const dir = first.dir
    await first.close()
    const user = path.join(dir, 'user.yaml')
    fs.writeFileSync(user, 'limits:\n  turns: 7\n  tokens: 1000\n')
    fs.writeFileSync(path.join(dir, 'config.yaml'), 'limits:\n  turns: 2\nescalation:\n  turns: { policy: add, amount: 3 }\n')
    const rt = await runtime({ model: looping, tools: [noop], dir, userConfig: user })
    expect(rt.config.limits).toMatchObject({ turns: 2, tokens: 1000 })
    const thread = await rt.spawn({ directive: { name: 'layered', prompt: 'p' } })
    await thread.done
    expect(thread.getSnapshot().limitHit).toMatchObject({ limit: 'turns', max: 2, proposed: 5 })
  })

  it('should fail on an invalid project config, naming the file and the field', async () => {
    const first = await runtime({ model: looping })
    const dir = first.dir
    await first.close()
    fs.writeFileSync(path.join(dir, 'config.yaml'), 'retry:\n  baseMs: soon\n')
    await expect(createTestRuntime({ model: looping, dir })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      details: { file: path.join(dir, 'config.yaml'), path: 'retry.baseMs' },
    })
  })
})

describe('limits across parent and child', () => {
  it('should cap a child by its parent and refuse a spawn past the depth or spawns limit', async () => {
    const rt = await runtime({ model: looping, tools: [noop] })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { turns: 3, spend: 5, depth: 1, spawns: 1 } })
    const child = await rt.spawn({ directive: { name: 'child', prompt: 'p' }, limits: { turns: 10, spend: 1 }, parentId: parent.id })
    expect(child.getSnapshot().limits).toMatchObject({ turns: 3, spend: 1, depth: 0 })
    await expect(rt.spawn({ directive: { name: 'second', prompt: 'p' }, parentId: parent.id })).rejects.toMatchObject({
      code: 'SPAWN_REFUSED',
      details: { limit: 'spawns' },
    })
    await expect(rt.spawn({ directive: { name: 'grandchild', prompt: 'p' }, parentId: child.id })).rejects.toMatchObject({
      code: 'SPAWN_REFUSED',
      details: { limit: 'depth' },
    })
    await Promise.all([parent.done, child.done])
  })
})
