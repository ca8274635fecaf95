/**
 * Recovery matrix rows for tool approvals and waits for answers (issue 23, items 4 and 5), each
 * with a real host process killed with SIGKILL at the moment that matters. The `deploy` tool needs
 * approval and is not idempotent; its runs are counted in a file outside the data directory, so a
 * second run in any process shows. What must hold after each kill: a call approved before the kill
 * runs exactly once, with the approved input; a call cut while it ran is not run again and the
 * model is told so; a thread waiting for a person waits across the kill, takes an answer written
 * by a process without a runtime, and times out by a deadline that passed while no process ran; a
 * request file the kill prevented is written by the next runtime; every transcript replays to the
 * same snapshot.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { pendingApprovals, respondToApproval, verifyReplay } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

interface Report {
  seen: Array<{ turn: number; toolResults: Array<{ callId: string; content: string }> }>
  threads: Array<{ id: string; status: string; result: string | null }>
  runs: string[]
}

function worker(dir: string, ...args: string[]) {
  // A step that waits for something the runtime never does ends here instead of hanging the suite.
  const run = spawnSync(process.execPath, [compiled('test/crash/toolApprovalKillWorker.js'), dir, ...args], { encoding: 'utf8', timeout: 60_000 })
  return { code: run.status, signal: run.signal, stdout: run.stdout.trim(), stderr: run.stderr }
}

function runRest(dir: string, clockOffsetMs?: number): Report {
  const after = worker(dir, 'run', ...(clockOffsetMs === undefined ? [] : [String(clockOffsetMs)]))
  expect(after.code, after.stderr).toBe(0)
  return JSON.parse(after.stdout) as Report
}

type Entry = { type: string; data: Record<string, unknown> }
const entries = (dir: string, id: string): Entry[] =>
  fs
    .readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Entry)

const approvalsDir = (dir: string, id: string) => path.join(dir, 'threads', id, 'approvals')
const filesOf = (dir: string, id: string, suffix: string) => (fs.existsSync(approvalsDir(dir, id)) ? fs.readdirSync(approvalsDir(dir, id)).filter((n) => n.endsWith(suffix)) : [])
const runsOf = (dir: string) => (fs.existsSync(`${dir}.runs`) ? fs.readFileSync(`${dir}.runs`, 'utf8').split('\n').filter(Boolean) : [])

/** The request id of the one call thread `id` paused at, from its transcript. */
function pausedAt(dir: string, id: string): string {
  const paused = entries(dir, id).filter((e) => e.type === 'TOOL_PAUSED')
  expect(paused).toHaveLength(1)
  return paused[0]!.data.requestId as string
}

const decisionFile = (dir: string, id: string, requestId: string) => JSON.parse(fs.readFileSync(path.join(approvalsDir(dir, id), `${requestId}.decision.json`), 'utf8')) as Record<string, unknown>

/** The one thread in `dir`: a process killed soon after its spawn may not have printed its id. */
function onlyThread(dir: string): string {
  const ids = fs.readdirSync(path.join(dir, 'threads'))
  expect(ids).toHaveLength(1)
  return ids[0]!
}

/** Spawns a thread whose deploy call waits at its approval request, in a host process that then closes. */
function shipOne(dir: string): string {
  const shipped = worker(dir, 'ship')
  expect(shipped.code, shipped.stderr).toBe(0)
  return shipped.stdout
}

describe('a host killed after approving a tool call with edited input, before the tool runs', () => {
  let dir: string
  let id: string
  let requestId: string
  let decisionWrittenAtKill: boolean
  let report: Report

  beforeAll(() => {
    dir = tempDir('spindle-approval-kill-before-run')
    id = shipOne(dir)
    requestId = pausedAt(dir, id)
    const killed = worker(dir, 'approve-kill-before-run', id)
    expect(killed.signal, `${killed.stdout}\n${killed.stderr}`).toBe('SIGKILL')
    decisionWrittenAtKill = filesOf(dir, id, '.decision.json').length > 0
  }, 60_000)

  it('should have the approval and its input in the transcript, and no intent and no run (the fault itself)', () => {
    const log = entries(dir, id)
    expect(log).toContainEqual(expect.objectContaining({ type: 'CALL_DECIDED', data: expect.objectContaining({ requestId, callId: 'c1', decision: 'approved', by: 'ada', input: { env: 'staging' } }) }))
    expect(log.filter((e) => e.type === 'tool_intent')).toEqual([])
    expect(runsOf(dir)).toEqual([])
  })

  it('should run the tool exactly once in the next process, with the approved input, and complete the thread', () => {
    report = runRest(dir)
    expect(report.runs).toEqual(['staging'])
    expect(report.seen).toEqual([{ turn: 2, toolResults: [{ callId: 'c1', content: 'deployed to staging' }] }])
    expect(report.threads).toEqual([{ id, status: 'completed', result: 'done: deployed to staging' }])
  })

  it('should replay its transcript to the same snapshot', () => {
    expect(verifyReplay(dir, id).matches).toBe(true)
  })

  it('should have the decision file, written from the transcript when the killed process had not', () => {
    expect(decisionFile(dir, id, requestId)).toMatchObject({
      decision: 'approved',
      by: 'ada',
      input: { env: 'staging' },
      message: 'staging first',
      ...(decisionWrittenAtKill ? {} : { recovered: true }),
    })
    expect(pendingApprovals(dir, id)).toEqual([])
  })
})

describe('a host killed inside an approved tool call, after its intent, before its result', () => {
  let dir: string
  let id: string

  beforeAll(() => {
    dir = tempDir('spindle-approval-kill-in-run')
    id = shipOne(dir)
    const killed = worker(dir, 'approve-kill-in-run', id)
    expect(killed.signal, `${killed.stdout}\n${killed.stderr}`).toBe('SIGKILL')
  }, 60_000)

  it('should have the approval and the intent in the transcript, one run, and no result (the fault itself)', () => {
    const types = entries(dir, id).map((e) => e.type)
    expect(types.indexOf('CALL_DECIDED')).toBeGreaterThan(-1)
    expect(types.indexOf('tool_intent')).toBeGreaterThan(types.indexOf('CALL_DECIDED'))
    expect(types).not.toContain('TOOL_DONE')
    expect(runsOf(dir)).toEqual(['staging'])
  })

  it('should not run the tool again in the next process, and tell the model it was interrupted', () => {
    const report = runRest(dir)
    expect(report.runs).toEqual(['staging'])
    expect(report.seen).toHaveLength(1)
    expect(report.seen[0]!.toolResults).toHaveLength(1)
    expect(report.seen[0]!.toolResults[0]!.callId).toBe('c1')
    expect(JSON.parse(report.seen[0]!.toolResults[0]!.content)).toMatchObject({ error: 'TOOL_INTERRUPTED' })
    expect(report.threads).toEqual([{ id, status: 'completed', result: expect.stringContaining('TOOL_INTERRUPTED') }])
  })

  it('should replay its transcript to the same snapshot', () => {
    expect(verifyReplay(dir, id).matches).toBe(true)
  })
})

describe('a host killed while its thread waits at ask_human, answered by a process without a runtime', () => {
  let dir: string
  let id: string
  let requestId: string

  beforeAll(() => {
    dir = tempDir('spindle-ask-kill')
    const killed = worker(dir, 'ask-kill')
    expect(killed.signal, killed.stderr).toBe('SIGKILL')
    id = onlyThread(dir)
    requestId = pausedAt(dir, id)
  }, 60_000)

  it('should leave the question pending across the kill (the fault itself)', () => {
    expect(pendingApprovals(dir, id)).toEqual([expect.objectContaining({ id: requestId, kind: 'question', tool: 'ask_human', callId: 'q1' })])
  })

  it('should take the answer as a response file written by plain code', () => {
    const file = respondToApproval(dir, id, { answer: 'staging', by: 'ada' })
    expect(fs.existsSync(file)).toBe(true)
  })

  it('should complete the thread in the next runtime with the answer as the call result', () => {
    const report = runRest(dir)
    expect(report.seen).toEqual([{ turn: 2, toolResults: [{ callId: 'q1', content: 'staging' }] }])
    expect(report.threads).toEqual([{ id, status: 'completed', result: 'done: staging' }])
    expect(report.runs).toEqual([])
  })

  it('should replay its transcript to the same snapshot and record the answer next to the question', () => {
    expect(verifyReplay(dir, id).matches).toBe(true)
    expect(decisionFile(dir, id, requestId)).toMatchObject({ decision: 'answered', by: 'ada', answer: 'staging' })
  })
})

describe('a wait for an answer whose deadline passed while no process ran', () => {
  it('should give the call WAIT_TIMED_OUT as soon as the next runtime opens the directory, and complete the thread', () => {
    const dir = tempDir('spindle-ask-deadline-kill')
    const killed = worker(dir, 'ask-kill', '60000')
    expect(killed.signal, killed.stderr).toBe('SIGKILL')
    const id = onlyThread(dir)
    const requestId = pausedAt(dir, id)
    expect(pendingApprovals(dir, id)).toEqual([expect.objectContaining({ id: requestId, kind: 'question' })])

    // The next process opens the directory two minutes after the question was asked.
    const report = runRest(dir, 120_000)
    expect(report.seen).toHaveLength(1)
    expect(JSON.parse(report.seen[0]!.toolResults[0]!.content)).toMatchObject({ error: 'WAIT_TIMED_OUT' })
    expect(report.threads).toEqual([{ id, status: 'completed', result: expect.stringContaining('WAIT_TIMED_OUT') }])
    expect(verifyReplay(dir, id).matches).toBe(true)
    expect(decisionFile(dir, id, requestId)).toMatchObject({ decision: 'timed_out', by: 'deadline' })
  }, 60_000)
})

describe.each([
  ['a tool approval', 'ship', 'tool_approval', { approved: true, by: 'ada' }],
  ['a question', 'ask', 'question', { answer: 'production', by: 'ada' }],
] as const)('a host killed between pausing at %s and writing its request file', (_what, directive, kind, response) => {
  let dir: string
  let id: string
  let requestId: string

  beforeAll(() => {
    dir = tempDir(`spindle-pause-kill-${directive}`)
    const killed = worker(dir, 'pause-kill', directive)
    expect(killed.signal, `${killed.stdout}\n${killed.stderr}`).toBe('SIGKILL')
    id = onlyThread(dir)
  }, 60_000)

  it('should have the pause in the transcript and no request file (the fault itself)', () => {
    requestId = pausedAt(dir, id)
    expect(filesOf(dir, id, '.request.json')).toEqual([])
  })

  it('should have the request file written by the next runtime to open the directory', () => {
    const reopened = worker(dir, 'reopen', id)
    expect(reopened.code, `${reopened.signal}\n${reopened.stderr}`).toBe(0)
    expect(pendingApprovals(dir, id)).toEqual([expect.objectContaining({ id: requestId, kind, callId: directive === 'ship' ? 'c1' : 'q1' })])
  })

  it('should take an answer to that request and complete the thread with it', () => {
    respondToApproval(dir, id, response)
    const report = runRest(dir)
    if (directive === 'ship') {
      expect(report.runs).toEqual(['production'])
      expect(report.seen).toEqual([{ turn: 2, toolResults: [{ callId: 'c1', content: 'deployed to production' }] }])
    } else {
      expect(report.runs).toEqual([])
      expect(report.seen).toEqual([{ turn: 2, toolResults: [{ callId: 'q1', content: 'production' }] }])
    }
    expect(report.threads).toEqual([{ id, status: 'completed', result: expect.stringContaining('production') }])
    expect(verifyReplay(dir, id).matches).toBe(true)
  })
})
