/**
 * commandTool and runProcess against careless specs and hostile commands: bad options fail when the
 * tool is defined, and the watchdog that stops a group when the host dies goes away with the call.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { commandTool, runProcess } from '../../actors/processTool.js'
import { isSpindleError } from '../../src/base/errors.js'

const posix = process.platform !== 'win32'
const never = () => new AbortController().signal

function spec(extra: { maxOutputBytes?: number; killGraceMs?: number }) {
  return { name: 'sh', description: 'Runs sh', input: z.object({}), command: () => ({ command: 'true', args: [] }), ...extra }
}

/** The live watchdogs this process started (they are told their group on stdin, so are found by parent). */
function watchdogs(): number[] {
  const found: number[] = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const argv = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0')
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8')
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (state !== 'Z' && Number(ppid) === process.pid && argv.includes('spindle-watchdog')) found.push(Number(entry))
    } catch {
      // gone meanwhile
    }
  }
  return found
}

describe('commandTool options', () => {
  it('refuses a maxOutputBytes that is not a non-negative integer when the tool is defined', () => {
    for (const maxOutputBytes of [Number.POSITIVE_INFINITY, -1, 1.5, Number.NaN]) {
      expect(() => commandTool(spec({ maxOutputBytes }))).toThrow(/maxOutputBytes of "sh"/)
    }
  })

  it('refuses a killGraceMs that is negative, NaN or beyond a timer range when the tool is defined', () => {
    for (const killGraceMs of [-1, Number.NaN, Number.POSITIVE_INFINITY, 3_000_000_000]) {
      expect(() => commandTool(spec({ killGraceMs }))).toThrow(/killGraceMs of "sh"/)
    }
    expect(() => commandTool(spec({ killGraceMs: 0, maxOutputBytes: 0 }))).not.toThrow()
  })

  it('runProcess refuses a killGraceMs beyond a timer range, which would cut the output short at once', async () => {
    const error = await runProcess('true', [], { signal: never(), killGraceMs: 3_000_000_000 }).catch((e: unknown) => e)
    expect(isSpindleError(error) && error.code).toBe('INVALID_OPTIONS')
  })
})

describe.runIf(posix && fs.existsSync('/proc/self/cmdline'))('the process group watchdog', () => {
  it('is gone once a call that ran to its end has settled', async () => {
    let pgid = 0
    const result = await runProcess('sh', ['-c', 'echo $$'], { signal: never() })
    pgid = Number(result.stdout.trim())
    expect(pgid).toBeGreaterThan(0)
    const deadline = Date.now() + 10_000
    while (watchdogs().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
    expect(watchdogs()).toEqual([])
  })

  it('is gone when the command could not be started (it is started first, and never told a group)', async () => {
    await expect(runProcess('/nonexistent/spindle-no-such-command', [], { signal: never() })).rejects.toThrow()
    const deadline = Date.now() + 10_000
    while (watchdogs().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
    expect(watchdogs()).toEqual([])
  })

  it('guards a running call, and is gone once the call was aborted and its group stopped', async () => {
    const controller = new AbortController()
    const pidFile = path.join(os.tmpdir(), `spindle-watchdog-${process.pid}-${Date.now()}.pid`)
    const pending = runProcess('sh', ['-c', `echo $$ > ${pidFile}; exec sleep 60`], { signal: controller.signal, killGraceMs: 200 })
    const deadline = Date.now() + 10_000
    while (!fs.existsSync(pidFile) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
    expect(Number(fs.readFileSync(pidFile, 'utf8').trim())).toBeGreaterThan(0)
    fs.rmSync(pidFile, { force: true })
    expect(watchdogs()).toHaveLength(1)
    controller.abort(new Error('stop'))
    await expect(pending).rejects.toThrow(/was stopped/)
    while (watchdogs().length > 0 && Date.now() < deadline + 10_000) await new Promise((r) => setTimeout(r, 20))
    expect(watchdogs()).toEqual([])
  })

  it('reports an exit by signal and keeps undecodable bytes as replacement characters', async () => {
    const killed = await runProcess('sh', ['-c', 'kill -KILL $$'], { signal: never() })
    expect(killed).toMatchObject({ exitCode: null, signal: 'SIGKILL' })
    const binary = await runProcess('sh', ['-c', "printf '\\377\\376ok'"], { signal: never() })
    expect(binary.stdout).toBe('\uFFFD\uFFFDok')
  })
})
