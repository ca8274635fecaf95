/**
 * Issue 23, items 4 and 5, from the command line: a thread paused at a tool call is decided by
 * `spindle approve` (with edited input), `spindle deny` and `spindle answer`, each writing the
 * response file that the next runtime on the directory acts on; a decision of the wrong kind, or
 * input that is not JSON, is refused with nothing written; `spindle show` says what the thread
 * waits at and how to decide it. A real runtime leaves the thread paused and is closed; the
 * compiled CLI runs as a child process; a second runtime carries the thread on.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { RESUME_FILE } from '../../src/thread/requests.js'
import { showThread } from '../../src/operator/operator.js'
import { showLines } from '../../src/operator/showText.js'
import { CHOICES, QUESTION, carryOn, pausedAtCall } from '../helpers/callThreads.js'
import { compiled, plantLink, putBack, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

/** The response file of a request, parsed, or null when none is written. */
function response(dir: string, id: string, requestId: string): unknown {
  const file = path.join(dir, 'threads', id, 'approvals', `${requestId}.response.json`)
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null
}

describe('spindle approve, deny and answer at a tool call', () => {
  it('should approve a tool call with edited input, and the next runtime runs the tool with it', async () => {
    const dir = tempDir('spindle-call-approve')
    const { id, requestId } = await pausedAtCall(dir, 'ship')
    const run = spindle('approve', id, '--input', '{"env":"staging"}', '--message', 'staging first', '--dir', dir)
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toContain(`approve: wrote ${path.join(dir, 'threads', id, 'approvals', `${requestId}.response.json`)}`)
    expect(response(dir, id, requestId)).toMatchObject({ approved: true, input: { env: 'staging' }, message: 'staging first' })
    const { threads, runs } = await carryOn(dir)
    expect(runs).toEqual([{ env: 'staging' }])
    expect(threads).toEqual([{ id, status: 'completed', result: 'told: deployed to staging' }])
  })

  it('should deny a tool call with a reason, and the model gets the denial as the call result without the tool running', async () => {
    const dir = tempDir('spindle-call-deny')
    const { id, requestId } = await pausedAtCall(dir, 'ship')
    const run = spindle('deny', id, '--reason', 'not on a Friday', '--dir', dir)
    expect(run.code, run.stderr).toBe(0)
    expect(response(dir, id, requestId)).toMatchObject({ approved: false, message: 'not on a Friday' })
    const { threads, runs } = await carryOn(dir)
    expect(runs).toEqual([])
    expect(threads[0]).toMatchObject({ id, status: 'completed' })
    expect(threads[0]!.result).toContain('TOOL_DENIED')
    expect(threads[0]!.result).toContain('not on a Friday')
  })

  it('should answer a question as text, and the model gets the answer as the call result', async () => {
    const dir = tempDir('spindle-call-answer')
    const { id, requestId } = await pausedAtCall(dir, 'ask')
    const run = spindle('answer', id, 'Monday, after the stand-up', '--dir', dir)
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/^answer: wrote /)
    expect(response(dir, id, requestId)).toMatchObject({ answer: 'Monday, after the stand-up' })
    expect((await carryOn(dir)).threads).toEqual([{ id, status: 'completed', result: 'told: Monday, after the stand-up' }])
  })

  it('should answer with a JSON value given --json, printing what it wrote as JSON', async () => {
    const dir = tempDir('spindle-call-answer-json')
    const { id, requestId } = await pausedAtCall(dir, 'ask')
    const run = spindle('answer', id, '{"day":"Monday","hour":10}', '--json', '--dir', dir)
    expect(run.code, run.stderr).toBe(0)
    expect(JSON.parse(run.stdout)).toMatchObject({ threadId: id, action: 'answer' })
    expect(response(dir, id, requestId)).toMatchObject({ answer: { day: 'Monday', hour: 10 } })
    expect((await carryOn(dir)).threads).toEqual([{ id, status: 'completed', result: 'told: {"day":"Monday","hour":10}' }])
  })
})

describe('spindle approve told of a pause before its request file is written', () => {
  it('should wait for the request file the runtime writes a moment later, then write the approval', async () => {
    // A host that hears thread.approval_pending may decide before the runtime has written the
    // request file (it follows the suspension's commit). Here the file is held back for 300 ms.
    const dir = tempDir('spindle-call-approve-early')
    const { id, requestId } = await pausedAtCall(dir, 'ship')
    const request = path.join(dir, 'threads', id, 'approvals', `${requestId}.request.json`)
    const heldBack = `${request}.held`
    fs.renameSync(request, heldBack)
    const child = spawn(process.execPath, [compiled('src/cli.js'), 'approve', id, '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (chunk) => (stderr += chunk))
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve))
    await new Promise((resolve) => setTimeout(resolve, 300))
    fs.renameSync(heldBack, request)
    expect(await exited, stderr).toBe(0)
    expect(response(dir, id, requestId)).toMatchObject({ approved: true })
    const { runs, threads } = await carryOn(dir)
    expect(runs).toHaveLength(1)
    expect(threads[0]).toMatchObject({ id, status: 'completed' })
  })
})

describe('spindle decisions of the wrong kind at a tool call, refused with nothing written', () => {
  const dir = tempDir('spindle-call-refusals')
  let ship: { id: string; requestId: string }
  let ask: { id: string; requestId: string }
  beforeAll(async () => {
    ship = await pausedAtCall(dir, 'ship')
    ask = await pausedAtCall(dir, 'ask')
  }, 60_000)

  it('should refuse limits at a tool approval: exit 3, saying limits apply only at a limit', () => {
    const run = spindle('approve', ship.id, '--turns', '10', '--dir', dir)
    expect(run.code, run.stdout).toBe(3)
    expect(run.stderr).toBe(`spindle: Thread ${ship.id} waits at a tool approval (deploy): limits apply only at a limit. Nothing was written. [INVALID_OPTIONS]\n`)
    expect(response(dir, ship.id, ship.requestId)).toBeNull()
  })

  it('should refuse --input that is not JSON: exit 3, showing what was given and how to quote it', () => {
    const run = spindle('approve', ship.id, '--input', '{env: staging}', '--dir', dir)
    expect(run.code, run.stdout).toBe(3)
    expect(run.stderr).toMatch(/^spindle: --input is not valid JSON \(.+\): "\{env: staging\}"\. Quote it for the shell, e\.g\. '\{"env":"staging"\}'\. Nothing was written\. \[INVALID_OPTIONS\]\n$/)
    expect(response(dir, ship.id, ship.requestId)).toBeNull()
  })

  it('should refuse an approval at a question: exit 6, pointing at spindle answer', () => {
    const run = spindle('approve', ask.id, '--dir', dir)
    expect(run.code, run.stdout).toBe(6)
    expect(run.stderr).toContain(`Thread ${ask.id} waits for an answer to its ask_human call, not for an approval: answer it (spindle answer ${ask.id} <answer> --dir ${dir}). Nothing was written. [NO_PENDING_APPROVAL]`)
    expect(response(dir, ask.id, ask.requestId)).toBeNull()
  })

  it('should refuse an answer at a tool approval: exit 6, pointing at approve or deny', () => {
    const run = spindle('answer', ship.id, 'yes', '--dir', dir)
    expect(run.code, run.stdout).toBe(6)
    expect(run.stderr).toContain(`Thread ${ship.id} waits at a tool approval (deploy), not for an answer: approve or deny it (spindle approve ${ship.id} --dir ${dir}, or spindle deny ${ship.id} --dir ${dir}). Nothing was written. [NO_PENDING_APPROVAL]`)
    expect(response(dir, ship.id, ship.requestId)).toBeNull()
  })

  it('should refuse a resume at a tool call: exit 6, saying which decision moves it on', () => {
    const run = spindle('resume', ask.id, '--dir', dir)
    expect(run.code, run.stdout).toBe(6)
    expect(run.stderr).toContain(`answer it (spindle answer ${ask.id} <answer>)`)
    expect(fs.existsSync(path.join(dir, 'threads', ask.id, RESUME_FILE))).toBe(false)
  })

  it('should show a thread at a tool approval: the tool, its input, the request, the deadline and the commands', () => {
    const run = spindle('show', ship.id, '--dir', dir)
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/^suspended +at a tool approval: its deploy call waits for a person to approve or deny it$/m)
    expect(run.stdout).toMatch(/^tool +deploy \(call c1\)$/m)
    expect(run.stdout).toMatch(/^input +\{"env":"production"\}$/m)
    expect(run.stdout).toMatch(new RegExp(`^request id +${ship.requestId}$`, 'm'))
    expect(run.stdout).toMatch(/^deadline +none: it waits until decided$/m)
    expect(run.stdout).toMatch(
      new RegExp(`^next +spindle approve ${ship.id} --dir ${dir} \\(add --input '<json>' to run it with other input\\), or spindle deny ${ship.id} --reason '<why>' --dir ${dir}$`, 'm'),
    )
  })

  it('should show a thread waiting for an answer: the question, its choices and the answer command', () => {
    const run = spindle('show', ask.id, '--dir', dir)
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/^suspended +waiting for an answer to its ask_human call$/m)
    expect(run.stdout).toContain(`\nquestion    ${QUESTION}\n`)
    expect(run.stdout).toMatch(new RegExp(`^choices +${CHOICES.map((c) => `"${c}"`).join(', ')}$`, 'm'))
    expect(run.stdout).toMatch(new RegExp(`^request id +${ask.requestId}$`, 'm'))
    expect(run.stdout).toMatch(new RegExp(`^next +spindle answer ${ask.id} ${CHOICES[0]} --dir ${dir} \\(or another answer; --json to give a JSON value\\)$`, 'm'))
  })

  it('should say a deadline has passed once it has', async () => {
    const due = tempDir('spindle-call-overdue')
    const { id } = await pausedAtCall(due, 'ship', { timeoutSeconds: 3600 })
    const deadline = showLines(showThread(due, id), due).find(([label]) => label === 'deadline')![1]
    expect(deadline).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/)
    const after = showLines(showThread(due, id), due, Date.parse(deadline) + 1).find(([label]) => label === 'deadline')![1]
    expect(after).toBe(`${deadline} (overdue: the runtime running this directory acts on it as approvals.onTimeout says)`)
  })

  it('should refuse an answer through a symlinked approvals folder, as an approval is refused, writing nothing there', () => {
    const approvals = path.join(dir, 'threads', ask.id, 'approvals')
    const elsewhere = plantLink(approvals)
    try {
      const run = spindle('answer', ask.id, 'Monday', '--dir', dir)
      expect(run.code, run.stdout).toBe(5)
      expect(run.stderr).toContain(`${approvals} is a symbolic link (to ${elsewhere}), not a directory`)
      expect(run.stderr).toContain('[DATA_DIR_INVALID]')
      expect(fs.readdirSync(elsewhere).filter((n) => n.includes('.response'))).toEqual([])
    } finally {
      putBack(approvals, elsewhere)
    }
  })

  it('should list both with their suspend reasons in spindle ls', () => {
    const run = spindle('ls', '--dir', dir)
    expect(run.stdout).toMatch(new RegExp(`^${ship.id} +suspended \\(tool_approval\\) `, 'm'))
    expect(run.stdout).toMatch(new RegExp(`^${ask.id} +suspended \\(waiting for an answer\\) `, 'm'))
  })
})
