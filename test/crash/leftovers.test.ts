/**
 * Recovery matrix rows "killed in a narrow window" (issue 22, item 8): a real process
 * (leftoversWorker.ts) is killed with SIGKILL at the instant an fs call would close a window —
 * after an empty journal file is made and before its header, while the journal's probe file
 * exists, before an atomic write's rename, after a runtime claimed a request and before it
 * carried it out, after the request bell was set aside and before it was removed. What must hold:
 * `spindle doctor` names what was left, the next runtime that opens the directory removes it (a
 * claimed request: carries it out), and doctor names nothing after. The same file held by a live
 * process — the worker stopped with SIGSTOP at the same instant — is left alone until that process
 * is killed.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import type { Runtime } from '../../src/index.js'
import { createRuntime, readRequestLog, scriptedModel } from '../../src/index.js'
import { doctor } from '../../src/operator/operator.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { alive } from '../helpers/processes.js'

const WORKER = compiled('test/crash/leftoversWorker.js')

/** One worker step run to its end (or its kill). */
function worker(dir: string, ...args: string[]) {
  const run = spawnSync(process.execPath, [WORKER, dir, ...args], { encoding: 'utf8', timeout: 60_000 })
  return { code: run.status, signal: run.signal, stdout: run.stdout.trim(), stderr: run.stderr }
}

/** A worker step killed at its window: it must have got there. */
function killedAt(dir: string, ...args: string[]): void {
  const run = worker(dir, ...args, 'kill')
  expect(run.stdout, run.stderr).toBe('at window')
  expect(run.signal).toBe('SIGKILL')
}

/** A worker step stopped (alive) at its window; `kill` ends it and waits until it is gone. */
function stoppedAt(dir: string, ...args: string[]): Promise<{ pid: number; kill(): Promise<void> }> {
  const child = spawn(process.execPath, [WORKER, dir, ...args, 'stop'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  return new Promise((resolve, reject) => {
    let stdout = ''
    child.stdout.on('data', (d) => {
      stdout += d
      if (stdout.includes('at window')) {
        resolve({
          pid: child.pid!,
          kill: async () => {
            child.kill('SIGKILL')
            await exited
          },
        })
      }
    })
    void exited.then(() => reject(new Error(`the worker ended before its window: ${stdout} ${stderr}`)))
  })
}

const model = scriptedModel((r) => (r.directiveName === 'hang' ? { faults: [{ fault: 'hang' }], reply: { text: '' } } : { text: `${r.directiveName} done` }))
const open: Runtime[] = []
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

/** A runtime opening `dir`, closed after the test. */
async function openRuntime(dir: string): Promise<Runtime> {
  const rt = await createRuntime({ dir, model, userConfig: null })
  open.push(rt)
  return rt
}

/** A runtime opens `dir` and closes at once. */
async function openAndClose(dir: string): Promise<void> {
  await (await createRuntime({ dir, model, userConfig: null })).close()
}

/** A data directory a runtime has opened: it has its registry. */
async function dataDir(): Promise<string> {
  const dir = tempDir('spindle-leftovers')
  await openAndClose(dir)
  return dir
}

/** Doctor's LEFTOVER_FILE findings, by the file they name. */
function leftoverFindings(dir: string) {
  return doctor(dir).findings.filter((f) => f.code === 'LEFTOVER_FILE')
}

function entries(dir: string, sub: string): string[] {
  const at = path.join(dir, sub)
  return fs.existsSync(at) ? fs.readdirSync(at).sort() : []
}

/** Files anywhere in the data directory whose names hold `infix`, relative to it. */
function strays(dir: string, infix: string): string[] {
  return (fs.readdirSync(dir, { recursive: true }) as string[]).filter((name) => path.basename(name).includes(infix)).sort()
}

describe('files a process killed in a narrow window leaves', () => {
  it('should remove the empty journal file of a process killed before writing its header; doctor names it until then', async () => {
    const dir = await dataDir()
    killedAt(dir, 'journal')
    const [left, ...more] = entries(dir, 'journal')
    expect(more).toEqual([])
    const file = path.join(dir, 'journal', left!)
    expect(left).toMatch(/\.000001\.journal$/)
    expect(fs.statSync(file).size).toBe(0)
    expect(leftoverFindings(dir)).toEqual([
      expect.objectContaining({ threadId: '(journal)', kind: 'stray', message: expect.stringContaining(`${file} is a transcript journal file without a header`), repair: expect.stringContaining('Opening a runtime on this directory removes it') }),
    ])

    await openAndClose(dir)

    expect(entries(dir, 'journal')).toEqual([])
    expect(leftoverFindings(dir)).toEqual([])
  })

  it('should leave the empty journal file of a live process alone, and remove it once that process is killed', async () => {
    const dir = await dataDir()
    const holder = await stoppedAt(dir, 'journal')
    const [left] = entries(dir, 'journal')
    expect(fs.statSync(path.join(dir, 'journal', left!)).size).toBe(0)

    await openAndClose(dir)
    expect(alive(holder.pid)).toBe(true)
    expect(entries(dir, 'journal')).toEqual([left])
    // A write under way is no finding.
    expect(leftoverFindings(dir)).toEqual([])

    await holder.kill()
    expect(leftoverFindings(dir)).toHaveLength(1)
    await openAndClose(dir)
    expect(entries(dir, 'journal')).toEqual([])
  })

  it("should remove the probe file of a process killed while it probed the journal directory, and leave a live process's", async () => {
    const dir = await dataDir()
    killedAt(dir, 'probe')
    const holder = await stoppedAt(dir, 'probe')
    const probes = entries(dir, 'journal').filter((n) => n.startsWith('.birth-probe-'))
    expect(probes).toHaveLength(2)
    const [dead, live] = probes[0]!.startsWith(`${holder.pid}-`, '.birth-probe-'.length) ? [probes[1]!, probes[0]!] : [probes[0]!, probes[1]!]
    expect(leftoverFindings(dir).map((f) => f.message)).toEqual([expect.stringContaining(path.join(dir, 'journal', dead))])

    await openAndClose(dir)
    expect(entries(dir, 'journal')).toEqual([live])

    await holder.kill()
    await openAndClose(dir)
    expect(entries(dir, 'journal')).toEqual([])
    expect(leftoverFindings(dir)).toEqual([])
  })

  it("should remove the temp file of a request written by a process killed before its rename, and leave a live writer's", async () => {
    const dir = tempDir('spindle-leftovers')
    const id = worker(dir, 'setup-hang').stdout
    killedAt(dir, 'temp', id)
    const [dead, ...more] = strays(dir, '.tmp-')
    expect(more).toEqual([])
    expect(path.basename(dead!)).toMatch(/^cancel\.requested\.tmp-/)
    // The whole request was written: only its rename never came.
    expect(JSON.parse(fs.readFileSync(path.join(dir, dead!), 'utf8'))).toMatchObject({ reason: 'from the leftovers test' })
    expect(fs.existsSync(path.join(dir, 'threads', id, 'cancel.requested'))).toBe(false)
    expect(leftoverFindings(dir)).toEqual([expect.objectContaining({ kind: 'stray', message: expect.stringContaining('the temp file of a write of cancel.requested') })])

    const holder = await stoppedAt(dir, 'temp', id)
    const live = strays(dir, '.tmp-').find((n) => n !== dead)!
    await openAndClose(dir)
    expect(strays(dir, '.tmp-')).toEqual([live])

    await holder.kill()
    await openAndClose(dir)
    expect(strays(dir, '.tmp-')).toEqual([])
    expect(leftoverFindings(dir)).toEqual([])
  })

  it('should carry out a cancel request that a runtime claimed and was killed before carrying out', async () => {
    const dir = tempDir('spindle-leftovers')
    const id = worker(dir, 'setup-hang').stdout
    killedAt(dir, 'claim', id, 'cancel')
    expect(strays(dir, '.claimed')).toHaveLength(1)
    expect(fs.existsSync(path.join(dir, 'threads', id, 'cancel.requested'))).toBe(false)
    expect(leftoverFindings(dir)).toEqual([
      expect.objectContaining({ threadId: id, message: expect.stringContaining(`a cancel request for ${id} that a runtime claimed`), repair: expect.stringContaining('carries the request out') }),
    ])

    const rt = await openRuntime(dir)

    await expect(rt.get(id).done).resolves.toMatchObject({ status: 'cancelled' })
    expect(strays(dir, '.claimed')).toEqual([])
    expect(readRequestLog(dir)).toEqual([expect.objectContaining({ kind: 'cancel', threadId: id, outcome: 'honoured', reason: 'from the leftovers test' })])
    expect(leftoverFindings(dir)).toEqual([])
  })

  it('should leave a cancel request claimed by a live runtime alone, and carry it out once that runtime is killed', async () => {
    const dir = tempDir('spindle-leftovers')
    const id = worker(dir, 'setup-hang').stdout
    const holder = await stoppedAt(dir, 'claim', id, 'cancel')
    const claimed = strays(dir, '.claimed')
    expect(claimed).toHaveLength(1)

    const rt = await openRuntime(dir)
    await rt.checkRequests({ sweep: true })
    expect(strays(dir, '.claimed')).toEqual(claimed)
    expect(rt.list().find((r) => r.id === id)?.status).toBe('running')
    await rt.close()

    await holder.kill()
    const next = await openRuntime(dir)
    await expect(next.get(id).done).resolves.toMatchObject({ status: 'cancelled' })
    expect(strays(dir, '.claimed')).toEqual([])
  })

  it('should resume a suspended thread whose resume request a runtime claimed and was killed before carrying out', async () => {
    const dir = tempDir('spindle-leftovers')
    const id = worker(dir, 'setup-error').stdout
    killedAt(dir, 'claim', id, 'resume')
    expect(strays(dir, '.claimed')).toEqual([expect.stringContaining('resume.requested')])

    const rt = await openRuntime(dir)

    await expect(rt.get(id).done).resolves.toMatchObject({ status: 'completed', result: 'flaky done' })
    expect(strays(dir, '.claimed')).toEqual([])
    expect(readRequestLog(dir)).toEqual([expect.objectContaining({ kind: 'resume', threadId: id, outcome: 'honoured', reason: 'resumed' })])
  })

  it('should not resume a thread again whose resume a runtime recorded just before it was killed', async () => {
    const dir = tempDir('spindle-leftovers')
    const id = worker(dir, 'setup-error').stdout
    const run = worker(dir, 'resumed', id)
    expect(run.signal, run.stderr).toBe('SIGKILL')
    expect(strays(dir, '.claimed')).toEqual([expect.stringContaining('resume.requested')])

    const rt = await openRuntime(dir)

    await expect(rt.get(id).done).resolves.toMatchObject({ status: 'completed', result: 'flaky done' })
    expect(strays(dir, '.claimed')).toEqual([])
    const transcript = fs.readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { type: string })
    expect(transcript.filter((e) => e.type === 'RESUME')).toHaveLength(1)
    expect(readRequestLog(dir)).toEqual([expect.objectContaining({ kind: 'resume', threadId: id, outcome: 'honoured', reason: expect.stringContaining('not carried out again') })])
  })

  it('should remove a request bell a process set aside and was killed before removing', async () => {
    const dir = await dataDir()
    killedAt(dir, 'bell')
    const aside = fs.readdirSync(dir).filter((n) => n.startsWith('requests.bell.'))
    expect(aside).toEqual([expect.stringMatching(/\.old$/)])
    expect(leftoverFindings(dir)).toEqual([expect.objectContaining({ threadId: '(requests)', message: expect.stringContaining('a request bell set aside') })])

    await openAndClose(dir)

    expect(fs.readdirSync(dir).filter((n) => n.startsWith('requests.bell.'))).toEqual([])
    expect(leftoverFindings(dir)).toEqual([])
  })
})
