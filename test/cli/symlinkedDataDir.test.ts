/**
 * Symlinks planted inside a data directory by someone who can write it: a thread's approvals
 * folder, a thread folder or `threads/` itself pointing elsewhere, and `requests.log.jsonl` or
 * `requests.bell` replaced by a symlink or a FIFO. Nothing may be written through a link, no
 * process may block on a FIFO, the refusal names the path, other threads carry on, and the honest
 * request works once the link is gone. Real links on a real temp directory, real CLI processes.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { Problem } from '../../src/runtime/api.js'
import { readRequestLog, requestCancel, requestResume, respondToApproval } from '../../src/thread/requests.js'
import { BELL_FILE, BellReader } from '../../persistence/requestBell.js'
import { compiled, plantLink, putBack, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  return spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8', timeout: 15_000 })
}

function host(dir: string, mode: 'limit' | 'error' | 'run', timeout = 20_000) {
  return spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8', timeout })
}

/** A new thread left as `mode` leaves it (suspended at a limit, or after its retries ran out). */
function threadLeft(dir: string, mode: 'limit' | 'error'): string {
  const run = host(dir, mode)
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

/** Opens the directory in the next host process, which honours the request files, and lists the threads. */
function statuses(dir: string, timeout = 20_000): Map<string, { status: string; result: unknown }> {
  const run = host(dir, 'run', timeout)
  expect(run.error, 'the host process hung').toBeUndefined()
  expect(run.status, run.stderr).toBe(0)
  return new Map((JSON.parse(run.stdout) as Array<{ id: string; status: string; result: unknown }>).map((r) => [r.id, r]))
}

/** Every file below `dir` with its content: what must not change when nothing may be written there. */
function contents(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of fs.readdirSync(dir, { recursive: true }) as string[]) {
    const file = path.join(dir, name)
    if (fs.lstatSync(file).isFile()) out[name] = fs.readFileSync(file, 'utf8')
  }
  return out
}

/** Refused with DATA_DIR_INVALID: the CLI's exit status for it, not 0 (written) or 1 (a crash). */
function expectRefused(run: ReturnType<typeof spindle>): void {
  expect(run.error).toBeUndefined()
  expect(run.stderr).toContain('[DATA_DIR_INVALID]')
  expect(run.status).not.toBe(0)
  expect(run.status).not.toBe(1)
}

function thrown(fn: () => unknown): { code?: string; message: string } {
  try {
    fn()
  } catch (error) {
    return error as { code?: string; message: string }
  }
  throw new Error('expected a refusal, but it was written')
}

const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })

/** A runtime in this process, so that its problems can be looked at. */
function openRuntime(dir: string, problems: Problem[]) {
  return createRuntime({
    dir,
    model: scriptedModel(() => ({ text: 'done' })),
    tools: [noop],
    userConfig: null,
    onProblem: (problem) => problems.push(problem),
  })
}

describe('a symlinked folder on the way to a request file', () => {
  it('should refuse `spindle approve` through a symlinked approvals folder, naming it, and approve once it is a folder again', () => {
    const dir = tempDir('spindle-link-approvals')
    const [linked, other] = [threadLeft(dir, 'limit'), threadLeft(dir, 'limit')]
    const approvals = path.join(dir, 'threads', linked, 'approvals')
    const elsewhere = plantLink(approvals)
    const before = contents(elsewhere)

    // Before the fix the response file was written in `elsewhere` and approve exited 0.
    const refused = spindle('approve', linked, '--dir', dir)
    expectRefused(refused)
    expect(refused.stderr).toContain(`${approvals} is a symbolic link (to ${elsewhere}), not a directory`)
    expect(thrown(() => respondToApproval(dir, linked, { approved: true }))).toMatchObject({ code: 'DATA_DIR_INVALID' })
    expect(contents(elsewhere)).toEqual(before)

    expect(spindle('approve', other, '--dir', dir).status).toBe(0)
    putBack(approvals, elsewhere)
    const approved = spindle('approve', linked, '--dir', dir)
    expect(approved.status, approved.stderr).toBe(0)
    const rows = statuses(dir)
    expect(rows.get(linked)).toMatchObject({ status: 'completed', result: 'capped done' })
    expect(rows.get(other)).toMatchObject({ status: 'completed', result: 'capped done' })
  })

  it('should refuse `spindle cancel` when the thread folder is a symlink, and cancel once it is put back', () => {
    const dir = tempDir('spindle-link-thread')
    const [linked, other] = [threadLeft(dir, 'limit'), threadLeft(dir, 'limit')]
    const folder = path.join(dir, 'threads', linked)
    const elsewhere = plantLink(folder)
    const before = contents(elsewhere)

    // Before the fix cancel.requested was written in `elsewhere` and cancel exited 0.
    const refused = spindle('cancel', linked, '--dir', dir)
    expectRefused(refused)
    expect(refused.stderr).toContain(`${folder} is a symbolic link (to ${elsewhere}), not a directory`)
    expect(thrown(() => requestCancel(dir, linked))).toMatchObject({ code: 'DATA_DIR_INVALID' })
    expect(contents(elsewhere)).toEqual(before)

    expect(spindle('approve', other, '--dir', dir).status).toBe(0)
    putBack(folder, elsewhere)
    expect(spindle('cancel', linked, '--dir', dir).status).toBe(0)
    const rows = statuses(dir)
    expect(rows.get(linked)).toMatchObject({ status: 'cancelled' })
    expect(rows.get(other)).toMatchObject({ status: 'completed' })
  })

  it('should refuse `spindle resume` when `threads/` itself is a symlink, and resume once it is put back', () => {
    const dir = tempDir('spindle-link-threads')
    const id = threadLeft(dir, 'error')
    const threads = path.join(dir, 'threads')
    const elsewhere = plantLink(threads)
    const before = contents(elsewhere)

    // Before the fix resume.requested was written in `elsewhere` and resume exited 0.
    const refused = spindle('resume', id, '--dir', dir)
    expectRefused(refused)
    expect(refused.stderr).toContain(`${threads} is a symbolic link (to ${elsewhere}), not a directory`)
    expect(thrown(() => requestResume(dir, id))).toMatchObject({ code: 'DATA_DIR_INVALID' })
    expect(contents(elsewhere)).toEqual(before)

    putBack(threads, elsewhere)
    expect(spindle('resume', id, '--dir', dir).status).toBe(0)
    expect(statuses(dir).get(id)).toMatchObject({ status: 'completed', result: 'flaky done' })
  })

  it("should not write a suspended thread's approval request through a symlinked approvals folder in the runtime", async () => {
    const dir = tempDir('spindle-link-runtime')
    const id = threadLeft(dir, 'limit')
    const approvals = path.join(dir, 'threads', id, 'approvals')
    // The request file is gone (as after a kill before it was written): the runtime writes it again.
    fs.rmSync(approvals, { recursive: true })
    const elsewhere = path.join(tempDir('spindle-link-target'), 'approvals')
    fs.mkdirSync(elsewhere)
    fs.symlinkSync(elsewhere, approvals)

    const problems: Problem[] = []
    const rt = await openRuntime(dir, problems)
    expect(rt.list().find((r) => r.id === id)?.status).toBe('suspended')
    await rt.close()
    // Before the fix the runtime wrote <rid>.request.json in `elsewhere`.
    expect(fs.readdirSync(elsewhere)).toEqual([])
    expect(problems).toContainEqual(
      expect.objectContaining({ code: 'DATA_DIR_INVALID', threadId: id, message: expect.stringContaining(`${approvals} is a symbolic link`) }),
    )

    fs.unlinkSync(approvals)
    const again = await openRuntime(dir, [])
    await again.close()
    expect(fs.readdirSync(approvals)).toEqual([expect.stringMatching(/\.request\.json$/)])
    expect(spindle('approve', id, '--dir', dir).status).toBe(0)
    expect(statuses(dir).get(id)).toMatchObject({ status: 'completed' })
  })
})

describe('requests.log.jsonl and requests.bell that are not regular files', () => {
  it('should honour a cancel without logging it through a symlinked request log, and say where and why', async () => {
    const dir = tempDir('spindle-link-log')
    const [first, second] = [threadLeft(dir, 'limit'), threadLeft(dir, 'limit')]
    const victim = path.join(tempDir('spindle-link-target'), 'victim.log')
    fs.writeFileSync(victim, 'keep me\n')
    const log = path.join(dir, 'requests.log.jsonl')
    fs.rmSync(log, { force: true })
    fs.symlinkSync(victim, log)

    requestCancel(dir, first, { reason: 'stop' })
    const problems: Problem[] = []
    const rt = await openRuntime(dir, problems)
    expect(rt.list().find((r) => r.id === first)?.status).toBe('cancelled')
    expect(rt.list().find((r) => r.id === second)?.status).toBe('suspended')
    await rt.close()
    // Before the fix the log line was appended to the victim.
    expect(fs.readFileSync(victim, 'utf8')).toBe('keep me\n')
    expect(problems).toContainEqual(
      expect.objectContaining({ code: 'DATA_DIR_INVALID', threadId: first, message: expect.stringContaining(`to ${log}: it is a symbolic link, not a regular file`) }),
    )
    expect(readRequestLog(dir)).toEqual([])

    fs.unlinkSync(log)
    requestCancel(dir, second)
    const again = await openRuntime(dir, [])
    await again.close()
    expect(fs.lstatSync(log).isFile()).toBe(true)
    expect(readRequestLog(dir)).toEqual([expect.objectContaining({ kind: 'cancel', threadId: second, outcome: 'honoured' })])
  })

  it('should not block the runtime on a request log that is a FIFO, and still honour the request', () => {
    const dir = tempDir('spindle-fifo-log')
    const id = threadLeft(dir, 'limit')
    const log = path.join(dir, 'requests.log.jsonl')
    fs.rmSync(log, { force: true })
    expect(spawnSync('mkfifo', [log]).status).toBe(0)
    requestCancel(dir, id)
    // Before the fix appending opened the FIFO for writing and waited for a reader for good.
    expect(statuses(dir, 10_000).get(id)).toMatchObject({ status: 'cancelled' })
    expect(fs.lstatSync(log).isFIFO()).toBe(true)
  })

  it('should not ring the bell through a symlink: the CLI warns, the request is honoured, the runtime sets the link aside', async () => {
    const dir = tempDir('spindle-link-bell')
    const id = threadLeft(dir, 'limit')
    const victim = path.join(tempDir('spindle-link-target'), 'victim.txt')
    fs.writeFileSync(victim, 'keep me\n')
    const bell = path.join(dir, BELL_FILE)
    fs.rmSync(bell, { force: true })
    fs.symlinkSync(victim, bell)

    const cancelled = spindle('cancel', id, '--dir', dir)
    expect(cancelled.status, cancelled.stderr).toBe(0)
    // Before the fix the thread id was appended to the victim, without a word.
    expect(fs.readFileSync(victim, 'utf8')).toBe('keep me\n')
    expect(cancelled.stderr).toContain(`Did not ring ${bell} for thread ${id}: it is a symbolic link`)

    const problems: Problem[] = []
    const rt = await openRuntime(dir, problems)
    expect(rt.list().find((r) => r.id === id)?.status).toBe('cancelled')
    await rt.close()
    expect(fs.lstatSync(bell, { throwIfNoEntry: false })).toBeUndefined()
    expect(fs.readFileSync(victim, 'utf8')).toBe('keep me\n')
    expect(problems).toContainEqual(expect.objectContaining({ code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${bell} was a symbolic link`) }))
  })

  it('should not hang `spindle cancel` on a bell that is a FIFO', () => {
    const dir = tempDir('spindle-fifo-bell')
    const id = threadLeft(dir, 'limit')
    const bell = path.join(dir, BELL_FILE)
    fs.rmSync(bell, { force: true })
    expect(spawnSync('mkfifo', [bell]).status).toBe(0)
    // Before the fix appending to the FIFO waited for a reader: this timed out.
    const cancelled = spindle('cancel', id, '--dir', dir)
    expect(cancelled.error, 'spindle cancel hung on the FIFO').toBeUndefined()
    expect(cancelled.status, cancelled.stderr).toBe(0)
    expect(cancelled.stderr).toContain(`Did not ring ${bell} for thread ${id}: it is a FIFO or socket`)
    expect(statuses(dir).get(id)).toMatchObject({ status: 'cancelled' })
    expect(fs.lstatSync(bell, { throwIfNoEntry: false })?.isFIFO() ?? false).toBe(false)
  })

  it("should not read the thread ids of a file the bell's symlink points at", () => {
    const root = tempDir('spindle-link-bell-reader')
    const reader = new BellReader(root)
    reader.read()
    const outside = path.join(tempDir('spindle-link-target'), 'ids.txt')
    fs.writeFileSync(outside, 'planted-000000000000\n')
    fs.symlinkSync(outside, path.join(root, BELL_FILE))
    // Before the fix stat followed the link and the planted id came back as a ring.
    const rings = reader.read()
    expect([...rings.ids]).toEqual([])
    expect(rings.missed).toBe(true)
    expect(fs.readFileSync(outside, 'utf8')).toBe('planted-000000000000\n')
  })
})
