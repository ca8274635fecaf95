/**
 * A runtime process killed with a real SIGKILL while a process tool runs: the tool's process group
 * must not outlive it, and the next runtime must do what docs/durability.md "What happens after a crash" says —
 * run an idempotent tool again, give a non-idempotent one a TOOL_INTERRUPTED result.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { createRuntime, readThreadFiles } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { crashScript, crashTool } from './processToolCrashShared.js'
import { alive } from '../helpers/processes.js'

const posix = process.platform !== 'win32'
const dirs: string[] = []
/** Every pid a test saw, SIGKILLed at the end in case an assertion failed half way. */
const seen = new Set<number>()
afterAll(() => {
  for (const pid of seen) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})


async function waitFor(what: string, condition: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** Starts the worker, waits until its tool's grandchild runs, SIGKILLs it; returns the pids it left. */
async function killWhileToolRuns(dir: string, work: string, mode: 'idempotent' | 'plain'): Promise<{ leader: number; grandchild: number }> {
  const worker = spawn(process.execPath, [compiled('test/runtime/processToolCrashWorker.js'), dir, work, mode], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  worker.stderr.on('data', (d) => (stderr += d))
  const exited = new Promise<NodeJS.Signals | null>((resolve) => worker.on('exit', (_code, signal) => resolve(signal)))
  const grandchildFile = path.join(work, 'grandchild')
  try {
    await waitFor('the tool to start its grandchild', () => fs.existsSync(grandchildFile) || worker.exitCode !== null)
  } catch (error) {
    worker.kill('SIGKILL')
    throw error
  }
  expect(worker.exitCode, stderr).toBeNull()
  const leader = Number(fs.readFileSync(path.join(work, 'runs'), 'utf8').trim().split('\n')[0])
  const grandchild = Number(fs.readFileSync(grandchildFile, 'utf8').trim())
  seen.add(leader)
  seen.add(grandchild)
  expect(alive(leader) && alive(grandchild)).toBe(true)
  worker.kill('SIGKILL')
  expect(await exited).toBe('SIGKILL')
  return { leader, grandchild }
}

/** Opens a new runtime on `dir` (recovering the killed thread) and returns the thread's tool result. */
async function recover(dir: string, work: string, idempotent: boolean): Promise<{ status: string; toolDone: { ok: boolean; output: unknown } }> {
  // The re-run of an idempotent call finishes at once.
  fs.writeFileSync(path.join(work, 'release'), '')
  const rt = await createRuntime({ dir, model: crashScript(), tools: [crashTool(work, idempotent)], userConfig: null, durability: 'process' })
  try {
    const [row] = rt.list()
    expect(row).toBeDefined()
    const outcome = await rt.get(row!.id).done
    const done = readThreadFiles(dir, row!.id).entries.filter((e) => e.type === 'TOOL_DONE')
    expect(done).toHaveLength(1)
    return { status: outcome.status, toolDone: done[0]!.data as { ok: boolean; output: unknown } }
  } finally {
    await rt.close()
  }
}

describe.runIf(posix)('a runtime killed with SIGKILL while a process tool runs', () => {
  it('leaves no process of the tool running, and the next runtime reports a non-idempotent call interrupted without running it again', async () => {
    const dir = tempDir('spindle-toolcrash')
    const work = tempDir('spindle-toolcrash-work')
    dirs.push(dir, work)
    const { leader, grandchild } = await killWhileToolRuns(dir, work, 'plain')

    // Nobody is left to stop the detached group but its watchdog: it must die anyway.
    await waitFor('the orphaned tool processes to die', () => !alive(leader) && !alive(grandchild))

    const { status, toolDone } = await recover(dir, work, false)
    expect(status).toBe('completed')
    expect(toolDone.ok).toBe(false)
    expect(toolDone.output).toMatchObject({ error: 'TOOL_INTERRUPTED', message: expect.stringMatching(/interrupted by a crash/) })
    // It was not run again.
    expect(fs.readFileSync(path.join(work, 'runs'), 'utf8').trim().split('\n')).toHaveLength(1)
  })

  it('leaves no process of the tool running, and the next runtime runs an idempotent call again', async () => {
    const dir = tempDir('spindle-toolcrash')
    const work = tempDir('spindle-toolcrash-work')
    dirs.push(dir, work)
    const { leader, grandchild } = await killWhileToolRuns(dir, work, 'idempotent')

    await waitFor('the orphaned tool processes to die', () => !alive(leader) && !alive(grandchild))

    const { status, toolDone } = await recover(dir, work, true)
    expect(status).toBe('completed')
    expect(toolDone).toMatchObject({ ok: true, output: { exitCode: 0, signal: null } })
    expect(fs.readFileSync(path.join(work, 'runs'), 'utf8').trim().split('\n')).toHaveLength(2)
  })
})
