/**
 * Issue 22, item 6: `spindle approve` and `spindle deny` check an answer against the thread's stored
 * state before writing it, and refuse what the runtime would refuse; an answer the runtime rejected
 * all the same (a response file written by hand) shows where a person looks — `spindle show`, the
 * inspector's thread page, `spindle doctor`. Real processes: a host leaves the thread suspended at
 * its turn limit (2 turns used of 2), the CLI answers, the next host acts.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { startInspector } from '../../src/operator/inspector.js'
import type { Inspector } from '../../src/operator/inspector.js'
import { readRequestLog } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function host(dir: string, ...args: string[]): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, ...args], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

/** The thread's approval request id, and the files of its approvals folder by name. */
function approvals(dir: string, id: string) {
  const folder = path.join(dir, 'threads', id, 'approvals')
  const names = fs.readdirSync(folder).sort()
  const requestId = names.find((n) => n.endsWith('.request.json'))!.replace('.request.json', '')
  return { folder, names, requestId, response: path.join(folder, `${requestId}.response.json`) }
}

describe('spindle approve and deny, checked against the thread before writing', () => {
  it('should refuse limits the thread has used already as rt.approve does: exit 6, LIMIT_STILL_EXCEEDED, the same message, nothing written', () => {
    const dir = tempDir('spindle-approve-still-exceeded')
    const id = host(dir, 'limit')
    const refused = spindle('approve', id, '--turns', '2', '--dir', dir)
    expect(refused.code, refused.stdout).toBe(6)
    const runtime = JSON.parse(host(dir, 'approve', id, '2')) as { code: string; message: string }
    expect(runtime.code).toBe('LIMIT_STILL_EXCEEDED')
    expect(refused.stderr).toBe(`spindle: ${runtime.message} [LIMIT_STILL_EXCEEDED]\n`)
    expect(approvals(dir, id).names.filter((n) => n.includes('.response'))).toEqual([])
  })

  it('should refuse a second answer while the first waits for the runtime, naming its file and who wrote it', () => {
    const dir = tempDir('spindle-approve-waiting')
    const id = host(dir, 'limit')
    expect(spindle('deny', id, '--reason', 'too dear', '--dir', dir).code).toBe(0)
    const { response } = approvals(dir, id)
    const first = fs.readFileSync(response, 'utf8')

    const second = spindle('approve', id, '--turns', '10', '--dir', dir)
    expect(second.code, second.stdout).toBe(6)
    expect(second.stderr).toContain('[APPROVAL_ALREADY_ANSWERED]')
    expect(second.stderr).toContain(`${response} holds a denial by ${JSON.parse(first).by}`)
    expect(second.stderr).toContain('--replace')
    expect(fs.readFileSync(response, 'utf8')).toBe(first)
  })

  it('should write over the waiting answer with --replace, and the runtime acts on the new one', () => {
    const dir = tempDir('spindle-approve-replace')
    const id = host(dir, 'limit')
    expect(spindle('deny', id, '--dir', dir).code).toBe(0)
    const replaced = spindle('approve', id, '--turns', '10', '--replace', '--dir', dir)
    expect(replaced.code, replaced.stderr).toBe(0)
    expect(JSON.parse(fs.readFileSync(approvals(dir, id).response, 'utf8'))).toMatchObject({ approved: true, limits: { turns: 10 } })
    expect(JSON.parse(host(dir, 'run'))).toEqual([expect.objectContaining({ id, status: 'completed', result: 'capped done' })])
  })
})

describe('an approval answer the runtime rejected (written by hand, below what the thread used)', () => {
  let dir: string
  let id: string
  let requestId: string
  let inspector: Inspector | null = null
  afterEach(async () => {
    await inspector?.close()
    inspector = null
  })

  beforeAll(() => {
    dir = tempDir('spindle-answer-rejected')
    id = host(dir, 'limit')
    const files = approvals(dir, id)
    requestId = files.requestId
    fs.writeFileSync(files.response, JSON.stringify({ approved: true, limits: { turns: 1 }, by: 'mallory' }))
    // The next host finds the answer as it opens the directory, and rejects it; the thread stays suspended.
    expect(JSON.parse(host(dir, 'run'))).toEqual([expect.objectContaining({ id, status: 'suspended' })])
  }, 60_000)

  it('should be set aside, its log line naming where it is kept', () => {
    const kept = path.join(approvals(dir, id).folder, `${requestId}.response.rejected.json`)
    expect(fs.existsSync(kept)).toBe(true)
    expect(readRequestLog(dir)).toEqual([
      expect.objectContaining({ kind: 'approval', threadId: id, outcome: 'refused', keptAs: kept, reason: expect.stringContaining('would suspend it again at once') }),
    ])
  })

  it('should show in spindle show, with who wrote it and why it was rejected', () => {
    const shown = spindle('show', id, '--dir', dir)
    expect(shown.code, shown.stderr).toBe(0)
    expect(shown.stdout).toMatch(new RegExp(`rejected\\s+approve \\(turns 1\\) by mallory to ${requestId} at \\S+: Approving thread ${id} with these limits would suspend it again at once`))
    expect(shown.stdout).toMatch(new RegExp(`approval\\s+${requestId} waits for an answer`))
    const json = JSON.parse(spindle('show', id, '--dir', dir, '--json').stdout)
    expect(json.approvals.rejected).toEqual([
      expect.objectContaining({ requestId, answer: { approved: true, limits: { turns: 1 }, by: 'mallory', message: null }, reason: expect.stringContaining('Raise turns above 2') }),
    ])
  })

  // What the page makes of it is tested in headless Chromium (inspectBrowser.test.ts).
  it("should be served to the inspector's thread page", async () => {
    inspector = await startInspector({ dir })
    const base = inspector.url.split('?')[0]!
    const headers = { 'x-spindle-token': inspector.token }
    const rejected = await fetch(`${base}api/threads/${id}/rejected`, { headers })
    expect(rejected.status).toBe(200)
    expect(await rejected.json()).toEqual([
      expect.objectContaining({ requestId, summary: 'approve (turns 1) by mallory', reason: expect.stringContaining('would suspend it again at once') }),
    ])
    expect((await fetch(`${base}api/threads/nobody-aaaaaaaaaaaa/rejected`, { headers })).status).toBe(404)
  })

  it('should be reported by doctor without failing it, saying the request is still open and how to answer', () => {
    const run = spindle('doctor', '--dir', dir, '--json')
    expect(run.code, run.stderr).toBe(0)
    expect(JSON.parse(run.stdout).findings).toEqual([
      expect.objectContaining({
        threadId: id,
        kind: 'answer',
        code: 'ANSWER_REJECTED',
        message: expect.stringContaining('by mallory) was rejected at'),
        repair: expect.stringContaining(`spindle approve ${id}`),
      }),
    ])
    expect(JSON.parse(run.stdout).findings[0].message).toContain('The request is still open')
  })
})
