/**
 * Issue 22: `spindle show` as a person reads it. A suspended thread says why and prints the command
 * that moves it on; a cancelled one says why it was cancelled, not where it once waited; one
 * restart is reported as the ordinary thing it is. Real host processes leave the threads; the
 * compiled CLI reads them.
 */
import { spawn, spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function host(dir: string, mode: 'limit' | 'error' | 'run'): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

/** A host killed with SIGKILL while its thread waits for the model; returns the thread's id. */
async function crashedHost(dir: string): Promise<string> {
  const child = spawn(process.execPath, [compiled('test/cli/hostWorker.js'), dir, 'hang'], { stdio: ['ignore', 'pipe', 'inherit'] })
  const id = await new Promise<string>((resolve) => {
    let printed = ''
    child.stdout.on('data', (d: Buffer) => {
      printed += d
      if (printed.includes('\n')) resolve(printed.trim())
    })
  })
  child.kill('SIGKILL')
  await new Promise((resolve) => child.on('exit', resolve))
  return id
}

describe('spindle show', () => {
  it('should show what a thread at its limit proposes and the approve command with the proposed limit', () => {
    const dir = tempDir('spindle-show-limit')
    const id = host(dir, 'limit')
    const show = spindle('show', id, '--dir', dir)
    expect(show.code, show.stderr).toBe(0)
    expect(show.stdout).toMatch(/^suspended   at its turns limit \(2 of 2\), waiting for a person$/m)
    expect(show.stdout).toMatch(/^proposed    raise turns to 4$/m)
    expect(show.stdout).toContain(`\nnext        spindle approve ${id} --turns 4 --dir ${dir}, or spindle deny ${id} --dir ${dir}\n`)
  })

  it('should show the error a thread suspended for and the resume command', () => {
    const dir = tempDir('spindle-show-error')
    const id = host(dir, 'error')
    const show = spindle('show', id, '--dir', dir)
    expect(show.code, show.stderr).toBe(0)
    expect(show.stdout).toMatch(/^suspended   after model errors that outlasted their retries$/m)
    expect(show.stdout).toMatch(/^failure     \[\w+\] .+/m)
    expect(show.stdout).toContain(`\nnext        spindle resume ${id} --dir ${dir}, or spindle cancel ${id} --dir ${dir}\n`)
  })

  it('should show why a thread cancelled while suspended was cancelled, and not its old suspension', () => {
    const dir = tempDir('spindle-show-cancelled')
    const id = host(dir, 'limit')
    expect(spindle('cancel', id, '--reason', 'no longer needed', '--dir', dir).code).toBe(0)
    host(dir, 'run')
    const show = spindle('show', id, '--dir', dir)
    expect(show.stdout).toMatch(/^[\w-]+ {2}cancelled$/m)
    expect(show.stdout).toMatch(/^cancelled   .*no longer needed/m)
    expect(show.stdout).not.toMatch(/^suspended/m)
    expect(show.stdout).not.toMatch(/^next/m)
  })

  it('should say calmly that a thread carried on after one restart', async () => {
    const dir = tempDir('spindle-show-recovered')
    const id = await crashedHost(dir)
    host(dir, 'run')
    const show = spindle('show', id, '--dir', dir)
    expect(show.code, show.stderr).toBe(0)
    expect(show.stdout).toMatch(/^recovered   carried on after a restart \(found at transcript seq \d+\)$/m)
    expect(show.stdout).not.toContain('in a row')
    expect(show.stdout).not.toContain('supervision.maxRecoveries')
  })
})
