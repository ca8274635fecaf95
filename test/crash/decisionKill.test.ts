/**
 * Recovery matrix row "killed between a decision and its file" (issue 22, item 5): a real host
 * process decides a thread's approval request — `rt.approve` or `rt.deny` — and is killed with
 * SIGKILL at the instant it opens the decision file, after the decision is durable in the
 * transcript. The request file is left without its decision. What must hold: it is not pending,
 * `spindle approve` and `spindle deny` refuse the thread (exit 6, nothing written), `spindle doctor`
 * names the missing decision, and the next runtime writes the decision from the transcript.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { writeFileAtomicSync } from '../../persistence/atomicFile.js'
import { makeEnvelope } from '../../persistence/envelope.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { STATE_FILE, dataPaths, threadFile } from '../../persistence/paths.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { pendingApprovals, replayTranscript } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function worker(dir: string, ...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('test/crash/decisionKillWorker.js'), dir, ...args], { encoding: 'utf8' })
  return { code: run.status, signal: run.signal, stdout: run.stdout.trim(), stderr: run.stderr }
}

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

type Finding = { threadId: string; kind: string; code: string; message: string; repair: string }
const doctor = (dir: string): Finding[] => JSON.parse(spindle('doctor', '--dir', dir, '--json').stdout).findings

/** Suspends a thread at its turn limit in a host process; its id and approval request's. */
function suspendOne(dir: string): { id: string; requestId: string } {
  const suspended = worker(dir, 'suspend')
  expect(suspended.code, suspended.stderr).toBe(0)
  const id = suspended.stdout
  const requestId = fs.readdirSync(path.join(dir, 'threads', id, 'approvals')).find((n) => n.endsWith('.request.json'))!.replace('.request.json', '')
  return { id, requestId }
}

/**
 * What the kill leaves when the thread's last checkpoint round (state.json, then the registry row)
 * had committed before it: both say what the transcript replays to. Written with the real stores,
 * as that round writes them; the transcript, the lease and the approvals folder stay as the kill left them.
 */
function commitEnd(dir: string, id: string): void {
  const paths = dataPaths(dir)
  const transcripts = createJsonlTranscriptStore({ paths, durability: 'fsync' })
  const { position } = transcripts.open(id)
  const { entries } = transcripts.read(id)
  transcripts.close(id)
  const replayed = replayTranscript(entries)
  writeFileAtomicSync(threadFile(paths, id, STATE_FILE), JSON.stringify(makeEnvelope(id, replayed.status, position, replayed.snapshot, Date.now())), { fsync: true, under: paths.root })
  const registry = openSqliteRegistry({ path: paths.registry, durability: 'fsync' })
  try {
    registry.updateStatus(id, replayed.status, Date.now())
  } finally {
    registry.close()
  }
}

describe.each([
  ['approve', 'approved', { status: 'completed', result: 'capped done' }],
  ['deny', 'denied', { status: 'cancelled', result: 'turn 2' }],
] as const)('a host killed after %s recorded the decision, before its decision file', (action, decision, outcome) => {
  let dir: string
  let id: string
  let requestId: string
  const approvals = () => path.join(dir, 'threads', id, 'approvals')
  const decisionFile = () => path.join(approvals(), `${requestId}.decision.json`)

  beforeAll(() => {
    dir = tempDir(`spindle-decision-kill-${action}`)
    ;({ id, requestId } = suspendOne(dir))
    const killed = worker(dir, `${action}-kill`, id)
    expect(killed.signal, `${killed.stdout}\n${killed.stderr}`).toBe('SIGKILL')
  }, 60_000)

  it('should have the decision in the transcript and no decision file (the fault itself)', () => {
    const entries = fs.readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    expect(entries).toContainEqual(expect.objectContaining({ type: 'approval_decided', data: expect.objectContaining({ requestId, decision, by: 'ada' }) }))
    expect(fs.existsSync(decisionFile())).toBe(false)
  })

  it('should list no pending approval for the thread', () => {
    expect(pendingApprovals(dir, id)).toEqual([])
  })

  it('should refuse spindle approve and spindle deny with THREAD_NOT_SUSPENDED, writing no response', () => {
    for (const command of ['approve', 'deny']) {
      const refused = spindle(command, id, '--dir', dir)
      expect(refused.code, refused.stdout).toBe(6)
      expect(refused.stderr).toContain('[THREAD_NOT_SUSPENDED]')
      expect(refused.stderr).toContain(`Thread ${id} is not suspended at an approval request`)
    }
    expect(fs.readdirSync(approvals()).filter((n) => n.includes('.response'))).toEqual([])
  })

  it('should be reported by doctor as a decision missing, with the transcript’s decision and the repair', () => {
    // The thread's end may be in the registry by the kill (its own settle round races the
    // decision file): then no runtime carries it on, and the repair is a rebuild.
    const registry = openSqliteRegistry({ path: dataPaths(dir).registry, durability: 'fsync' })
    const status = registry.get(id)?.status
    registry.close()
    const missing = doctor(dir).filter((f) => f.code === 'DECISION_MISSING')
    expect(missing).toEqual([
      expect.objectContaining({
        threadId: id,
        kind: 'lag',
        message: expect.stringContaining(`Approval request ${requestId} of ${id} has no decision file`),
        repair: !['completed', 'cancelled', 'error'].includes(status ?? '') ? expect.stringContaining('Open a runtime on this directory') : `\`spindle rebuild ${id} --apply\` writes the decision file from the transcript.`,
      }),
    ])
    expect(missing[0]!.message).toContain(`it was ${decision} by ada`)
  })

  it('should have its decision written from the transcript by the next runtime, which carries the thread to its end', () => {
    const after = worker(dir, 'run')
    expect(after.code, after.stderr).toBe(0)
    expect(JSON.parse(after.stdout)).toEqual([expect.objectContaining({ id, ...outcome })])
    expect(JSON.parse(fs.readFileSync(decisionFile(), 'utf8'))).toMatchObject({
      decision,
      by: 'ada',
      recovered: true,
      ...(action === 'approve' ? { limits: { turns: 10 }, message: 'go on' } : { message: 'too dear' }),
    })
    expect(doctor(dir).filter((f) => f.threadId === id)).toEqual([])
  })
})

// The kill above lands before the checkpoint round that records the thread's end (state.json and the
// registry still say suspended). A round that commits first cannot be made to land reliably before
// the kill: its state is planted from the kill's own files (commitEnd), so that the registry says
// cancelled and no runtime recovers the thread.
describe('a host killed after deny recorded the decision and committed the thread\'s end, before the decision file', () => {
  let dir: string
  let id: string
  let requestId: string
  const decisionFile = () => path.join(dir, 'threads', id, 'approvals', `${requestId}.decision.json`)

  beforeAll(() => {
    dir = tempDir('spindle-decision-kill-ended')
    ;({ id, requestId } = suspendOne(dir))
    const killed = worker(dir, 'deny-kill', id)
    expect(killed.signal, `${killed.stdout}\n${killed.stderr}`).toBe('SIGKILL')
    commitEnd(dir, id)
  }, 60_000)

  it('should refuse spindle approve on the cancelled thread with THREAD_NOT_SUSPENDED', () => {
    const refused = spindle('approve', id, '--dir', dir)
    expect(refused.code).toBe(6)
    expect(refused.stderr).toContain(`Thread ${id} is not suspended at an approval request in`)
    expect(refused.stderr).toContain('it is cancelled, not suspended')
  })

  it('should be reported by doctor with rebuild as the repair, since no runtime recovers a cancelled thread', () => {
    expect(doctor(dir).filter((f) => f.code === 'DECISION_MISSING')).toEqual([
      expect.objectContaining({ threadId: id, kind: 'lag', repair: `\`spindle rebuild ${id} --apply\` writes the decision file from the transcript.` }),
    ])
  })

  it('should have its decision written by the next runtime, which the dead process\'s lease leads to the thread', () => {
    const after = worker(dir, 'run')
    expect(after.code, after.stderr).toBe(0)
    expect(JSON.parse(after.stdout)).toEqual([expect.objectContaining({ id, status: 'cancelled' })])
    expect(JSON.parse(fs.readFileSync(decisionFile(), 'utf8'))).toMatchObject({ decision: 'denied', by: 'ada', message: 'too dear', recovered: true })
    expect(doctor(dir).filter((f) => f.threadId === id)).toEqual([])
  })
})

describe('a cancelled thread left without its decision file and without a lease to lead a runtime to it', () => {
  it('should have the decision written from its transcript by spindle rebuild --apply, doctor\'s repair', () => {
    const dir = tempDir('spindle-decision-rebuild')
    const { id, requestId } = suspendOne(dir)
    const killed = worker(dir, 'deny-kill', id)
    expect(killed.signal).toBe('SIGKILL')
    commitEnd(dir, id)
    expect(spindle('locks', '--apply', '--dir', dir).code).toBe(0)

    const dry = spindle('rebuild', id, '--dir', dir, '--json')
    expect(JSON.parse(dry.stdout).decisions).toEqual([{ requestId, decision: 'denied', written: false }])
    const applied = spindle('rebuild', id, '--apply', '--dir', dir, '--json')
    expect(applied.code, applied.stderr).toBe(0)
    expect(JSON.parse(applied.stdout).decisions).toEqual([{ requestId, decision: 'denied', written: true }])
    expect(JSON.parse(fs.readFileSync(path.join(dir, 'threads', id, 'approvals', `${requestId}.decision.json`), 'utf8'))).toMatchObject({ decision: 'denied', by: 'ada', recovered: true })
    expect(doctor(dir).filter((f) => f.threadId === id)).toEqual([])
  })
})
