/**
 * runProcess and commandTool with real processes: exit codes, output limits, and that cancel and
 * timeout stop the whole process group (grandchildren included), with SIGKILL for what ignores SIGTERM.
 */
import fs from 'node:fs'
import { getEventListeners } from 'node:events'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { commandTool, runProcess } from '../../actors/processTool.js'
import { executeToolCall } from '../../actors/tools.js'
import type { Tool } from '../../actors/tools.js'
import { isSpindleError } from '../../src/base/errors.js'
import { tempDir } from '../helpers/dirs.js'
import { alive } from '../helpers/processes.js'

const posix = process.platform !== 'win32'
const dir = tempDir('spindle-process')
/** Every pid a test started, killed at the end in case an assertion failed half way. */
const started = new Set<number>()
afterAll(() => {
  for (const pid of started) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  fs.rmSync(dir, { recursive: true, force: true })
})

let files = 0
function pidFile(label: string): string {
  return path.join(dir, `${label}-${++files}.pid`)
}


async function waitFor<T>(what: string, probe: () => T | undefined, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** The pid a script wrote to `file`, once it has written all of it. */
async function readPid(file: string): Promise<number> {
  const pid = await waitFor(`a pid in ${file}`, () => {
    const text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : ''
    return /^\d+\n$/.test(text) ? Number(text.trim()) : undefined
  })
  started.add(pid)
  return pid
}

/** Polls until `pid` is gone (bounded), then reports whether it is. */
async function gone(pid: number, timeoutMs = 5000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  return !alive(pid)
}

describe.runIf(posix)('runProcess', () => {
  it('returns stdout, stderr and exit code 0 of a command that succeeds', async () => {
    const result = await runProcess('sh', ['-c', 'echo hello; echo oops >&2'], { signal: new AbortController().signal })
    expect(result).toEqual({ exitCode: 0, signal: null, stdout: 'hello\n', stderr: 'oops\n', truncated: false })
  })

  it('returns the non-zero exit code of a command that fails, without throwing', async () => {
    const result = await runProcess('sh', ['-c', 'echo failing >&2; exit 3'], { signal: new AbortController().signal })
    expect(result.exitCode).toBe(3)
    expect(result.signal).toBeNull()
    expect(result.stderr).toBe('failing\n')
  })

  it('passes input on stdin, and cwd and env', async () => {
    const result = await runProcess('sh', ['-c', 'cat; pwd; echo "$GREETING"'], {
      signal: new AbortController().signal,
      input: 'from stdin\n',
      cwd: dir,
      env: { PATH: process.env.PATH, GREETING: 'hi' },
    })
    expect(result.stdout).toBe(`from stdin\n${fs.realpathSync(dir)}\nhi\n`)
  })

  it('rejects with the command name when the command does not exist', async () => {
    const command = 'spindle-no-such-command-xyz'
    const error = await runProcess(command, [], { signal: new AbortController().signal }).then(
      () => undefined,
      (e: unknown) => e,
    )
    expect(isSpindleError(error)).toBe(true)
    expect((error as Error).message).toContain(command)
    expect((error as Error).message).toContain('not found')
  })

  it('says so when the working directory does not exist', async () => {
    await expect(runProcess('sh', ['-c', 'true'], { signal: new AbortController().signal, cwd: path.join(dir, 'missing') })).rejects.toThrow(
      /working directory .*missing.* does not exist/,
    )
  })

  it('never spawns when the signal is already aborted', async () => {
    const marker = path.join(dir, 'should-not-exist')
    const controller = new AbortController()
    controller.abort(new Error('cancelled before start'))
    await expect(runProcess('sh', ['-c', `touch '${marker}'`], { signal: controller.signal })).rejects.toThrow(/not started: cancelled before start/)
    await new Promise((r) => setTimeout(r, 100))
    expect(fs.existsSync(marker)).toBe(false)
  })

  it('on abort kills the whole group, grandchild included, and says what was stopped and why', async () => {
    const leaderFile = pidFile('leader')
    const grandchildFile = pidFile('grandchild')
    const controller = new AbortController()
    const run = runProcess('sh', ['-c', `echo $$ > '${leaderFile}'; sleep 60 & echo $! > '${grandchildFile}'; wait`], {
      signal: controller.signal,
    })
    const settled = run.then(
      () => undefined,
      (e: unknown) => e,
    )
    const leader = await readPid(leaderFile)
    const grandchild = await readPid(grandchildFile)
    expect(alive(leader)).toBe(true)
    expect(alive(grandchild)).toBe(true)

    controller.abort(new Error('thread cancelled'))
    const error = await settled
    expect(isSpindleError(error)).toBe(true)
    expect((error as Error).message).toMatch(new RegExp(`"sh -c .*" \\(pid ${leader}\\) was stopped.*: thread cancelled`))
    expect(await gone(leader)).toBe(true)
    expect(await gone(grandchild)).toBe(true)
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0)
  })

  it('SIGKILLs a group that ignores SIGTERM once the grace period is over', async () => {
    const leaderFile = pidFile('stubborn')
    const controller = new AbortController()
    const run = runProcess('sh', ['-c', `trap "" TERM; echo $$ > '${leaderFile}'; sleep 60`], { signal: controller.signal, killGraceMs: 200 })
    const settled = run.then(
      () => undefined,
      (e: unknown) => e,
    )
    const leader = await readPid(leaderFile)
    const abortedAt = Date.now()
    controller.abort(new Error('stop'))
    await new Promise((r) => setTimeout(r, 100))
    expect(alive(leader)).toBe(true) // it ignored SIGTERM, and the grace period is not over
    const error = await settled
    expect(Date.now() - abortedAt).toBeGreaterThanOrEqual(190)
    expect((error as Error).message).toMatch(/was stopped \(SIGKILL\): stop/)
    expect(await gone(leader)).toBe(true)
  })

  it('still SIGKILLs a grandchild that ignores SIGTERM after the promise settled on the leader dying', async () => {
    const grandchildFile = pidFile('stubborn-grandchild')
    const controller = new AbortController()
    // The grandchild ignores TERM and does not hold the output pipes, so the call settles as soon
    // as the leader dies; the grandchild must still be killed when the grace period ends.
    // It writes its pid only once its trap is set.
    const script = `sh -c 'trap "" TERM; echo $$ > "${grandchildFile}"; exec sleep 60' </dev/null >/dev/null 2>&1 & wait`
    const settled = runProcess('sh', ['-c', script], { signal: controller.signal, killGraceMs: 300 }).then(
      () => undefined,
      (e: unknown) => e,
    )
    const grandchild = await readPid(grandchildFile)
    controller.abort(new Error('stop'))
    const error = await settled
    expect((error as Error).message).toMatch(/was stopped \(SIGTERM\): stop/)
    expect(alive(grandchild)).toBe(true)
    expect(await gone(grandchild)).toBe(true)
  })

  it('stops background processes the leader left behind when it exits by itself', async () => {
    const grandchildFile = pidFile('leftover')
    const startedAt = Date.now()
    // The leftover holds stdout open: without the sweep the call would take 60 s.
    const result = await runProcess('sh', ['-c', `sleep 60 & echo $! > '${grandchildFile}'; echo done`], { signal: new AbortController().signal })
    expect(result).toMatchObject({ exitCode: 0, stdout: 'done\n' })
    expect(Date.now() - startedAt).toBeLessThan(20_000) // well short of the 60 s sleep, with room for a loaded machine
    const grandchild = await readPid(grandchildFile)
    expect(await gone(grandchild)).toBe(true)
  })

  it('truncates output over maxOutputBytes, marks it, and still drains the rest', async () => {
    const result = await runProcess('sh', ['-c', 'head -c 200000 /dev/zero | tr "\\0" a; echo fine >&2'], {
      signal: new AbortController().signal,
      maxOutputBytes: 1000,
    })
    expect(result.exitCode).toBe(0)
    expect(result.truncated).toBe(true)
    expect(result.stdout.startsWith('a'.repeat(1000) + '\n[output truncated: 199000 of 200000 bytes not shown]')).toBe(true)
    expect(result.stdout).not.toContain('a'.repeat(1001))
    expect(result.stderr).toBe('fine\n')
  })

  it('does not split a multi-byte character when truncating', async () => {
    const result = await runProcess('sh', ['-c', 'printf "ééé"'], { signal: new AbortController().signal, maxOutputBytes: 3 })
    expect(result.truncated).toBe(true)
    expect(result.stdout).toMatch(/^é\n\[output truncated/)
  })

  it('leaves no abort listener or timer behind once settled', async () => {
    const controller = new AbortController()
    const timers = (): number => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length
    const before = timers()
    await runProcess('sh', ['-c', 'echo ok'], { signal: controller.signal })
    await expect(runProcess('spindle-no-such-command-xyz', [], { signal: controller.signal })).rejects.toThrow()
    expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0)
    // At most as many: a timer an earlier test left to run out may end meanwhile, none may be added.
    expect(timers()).toBeLessThanOrEqual(before)
  })
})

describe.runIf(posix)('commandTool', () => {
  const context = (signal: AbortSignal) => ({ signal, idempotencyKey: 't:1:c1', threadId: 't' })

  it('returns a non-zero exit as a normal result for the model', async () => {
    const tool = commandTool({
      name: 'shell',
      description: 'Runs a shell script',
      input: z.object({ script: z.string() }),
      command: ({ script }) => ({ command: 'sh', args: ['-c', script] }),
    })
    const tools = new Map<string, Tool>([[tool.name, tool as Tool]])
    const outcome = await executeToolCall(tools, { id: 'c1', name: 'shell', input: { script: 'echo out; exit 2' } }, context(new AbortController().signal), 10_000)
    expect(outcome).toEqual({ ok: true, output: { exitCode: 2, signal: null, stdout: 'out\n', stderr: '', truncated: false } })
  })

  it('on its timeout yields TOOL_TIMEOUT and the process group is dead afterwards', async () => {
    const leaderFile = pidFile('tool-leader')
    const grandchildFile = pidFile('tool-grandchild')
    const tool = commandTool({
      name: 'slow',
      description: 'Never finishes',
      input: z.object({}),
      timeoutMs: 300,
      command: () => ({ command: 'sh', args: ['-c', `echo $$ > '${leaderFile}'; sleep 60 & echo $! > '${grandchildFile}'; wait`] }),
    })
    const tools = new Map<string, Tool>([[tool.name, tool as Tool]])
    const startedAt = Date.now()
    const outcome = await executeToolCall(tools, { id: 'c1', name: 'slow', input: {} }, context(new AbortController().signal), 60_000)
    expect(outcome.ok).toBe(false)
    expect(outcome.output).toMatchObject({ error: 'TOOL_TIMEOUT' })
    expect(Date.now() - startedAt).toBeLessThan(20_000) // well short of the 60 s sleep, with room for a loaded machine
    const leader = await readPid(leaderFile)
    const grandchild = await readPid(grandchildFile)
    expect(await gone(leader)).toBe(true)
    expect(await gone(grandchild)).toBe(true)
  })

  it('stops the process group when the thread is cancelled', async () => {
    const leaderFile = pidFile('cancel-leader')
    const tool = commandTool({
      name: 'slow',
      description: 'Never finishes',
      input: z.object({}),
      command: () => ({ command: 'sh', args: ['-c', `echo $$ > '${leaderFile}'; sleep 60`] }),
    })
    const tools = new Map<string, Tool>([[tool.name, tool as Tool]])
    const controller = new AbortController()
    const pending = executeToolCall(tools, { id: 'c1', name: 'slow', input: {} }, context(controller.signal), 60_000)
    const leader = await readPid(leaderFile)
    controller.abort(new Error('thread cancelled'))
    const outcome = await pending
    expect(outcome.output).toMatchObject({ error: 'TOOL_FAILED', message: expect.stringMatching(/was stopped.*thread cancelled/) })
    expect(await gone(leader)).toBe(true)
  })
})
