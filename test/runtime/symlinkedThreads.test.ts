/**
 * The runtime itself (not only the CLI) inside a data directory where someone planted symlinks or
 * FIFOs: `threads/` or `journal/` linked elsewhere, one thread folder replaced by a link after a
 * kill, a link at `state.json`, `state.json.tmp` or `transcript.jsonl`, a thread folder or its
 * `approvals/` swapped for a link while the runtime watches the thread, a FIFO where a file is
 * written or read. Nothing may be read or written through a link, nothing may block, one bad thread
 * fails alone. Real links and FIFOs on a real temp directory, a real runtime.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { ModelAdapter } from '../../src/index.js'
import type { Problem, Runtime, RuntimeOptions } from '../../src/runtime/api.js'
import { doctor, rebuildThread } from '../../src/operator/operator.js'
import { prefetchThreadFiles } from '../../persistence/prefetch.js'
import { compiled, plantLink, putBack, tempDir } from '../helpers/dirs.js'
import { inState, until } from '../helpers/threads.js'

const open: Runtime[] = []
async function runtime(options: Omit<RuntimeOptions, 'tools' | 'userConfig'>): Promise<Runtime> {
  const rt = await createRuntime({ tools: [noop], userConfig: null, ...options })
  open.push(rt)
  return rt
}
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })
const hangOnTurn2 = scriptedModel([{ toolCalls: [{ name: 'noop', input: {} }] }, { faults: [{ fault: 'hang' }], reply: { text: 'never' } }])
const finishes = scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'noop', input: {} }] } : { text: `finished at turn ${r.turn}` }))
/** Never finishes on its own: a thread with a turn limit suspends at it. */
const endless = scriptedModel((r) => ({ text: `turn ${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] }))
/** No poll of its own during a test: the test calls checkRequests when it wants one. */
const noPolling = { requests: { pollMs: 3_600_000 } }

/** `n` threads left mid model call (turn 2) in `dir` by a runtime that then stopped. */
async function leaveMidCall(dir: string, n: number): Promise<string[]> {
  const rt = await createRuntime({ dir, model: hangOnTurn2, tools: [noop], userConfig: null })
  const threads = []
  for (let i = 0; i < n; i++) threads.push(await rt.spawn({ directive: { name: `t${i}`, prompt: 'p' } }))
  await Promise.all(threads.map((t) => until(t, (v) => v.usage.turns === 1 && inState('callingModel')(v))))
  await rt.close()
  return threads.map((t) => t.id)
}

/** The error of a runtime opened on `dir`, or null when it opened (kept, to be closed). */
async function refusedOpen(dir: string): Promise<{ code: string; message: string } | null> {
  return createRuntime({ dir, model: finishes, tools: [noop], userConfig: null }).then(
    (rt) => {
      open.push(rt)
      return null
    },
    (error: unknown) => error as { code: string; message: string },
  )
}

function fileOf(dir: string, id: string, name: string): string {
  return path.join(dir, 'threads', id, name)
}

/**
 * Everything below `dir`, links not followed: each entry's kind, a file's bytes, a link's target.
 * What must be equal before and after when nothing may be read or written there.
 */
function tree(dir: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of fs.readdirSync(dir, { recursive: true }) as string[]) {
    const entry = path.join(dir, name)
    const stat = fs.lstatSync(entry)
    if (stat.isSymbolicLink()) out[name] = `link to ${fs.readlinkSync(entry)}`
    else if (stat.isFile()) out[name] = `file ${fs.readFileSync(entry).toString('base64')} ${stat.mtimeMs}`
    else out[name] = stat.isDirectory() ? `dir ${stat.mtimeMs}` : 'special'
  }
  return out
}

function mkfifo(file: string): void {
  expect(spawnSync('mkfifo', [file]).status).toBe(0)
}

/** Opens `dir` in a runtime of its own process and runs every thread there to its end (or to a hang, then killed). */
function hostRun(dir: string) {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, 'run'], { encoding: 'utf8', timeout: 10_000 })
  expect(run.error, 'the runtime hung').toBeUndefined()
  expect(run.status, run.stderr).toBe(0)
  return new Map((JSON.parse(run.stdout) as Array<{ id: string; status: string }>).map((r) => [r.id, r.status]))
}

/** A runtime holding one thread suspended at its turn limit, with its approval request written. */
async function suspendedAtLimit(dir: string, problems: Problem[]) {
  const rt = await runtime({ dir, model: endless, config: noPolling, onProblem: (p) => problems.push(p) })
  const thread = await rt.spawn({ directive: { name: 'capped', prompt: 'p' }, limits: { turns: 2 } })
  expect((await thread.done).status).toBe('suspended')
  const approvals = fileOf(dir, thread.id, 'approvals')
  // Written once the suspension is durable.
  while (!fs.existsSync(approvals) || fs.readdirSync(approvals).length === 0) await new Promise((r) => setTimeout(r, 10))
  const requestId = fs.readdirSync(approvals)[0]!.replace(/\.request\.json$/, '')
  const nonce = rt.list().find((r) => r.id === thread.id)!.nonce
  return { rt, id: thread.id, approvals, requestId, nonce }
}

describe('a symlinked threads/ or journal/', () => {
  it('should refuse to open the directory, naming the link and where it points, and write nothing there', async () => {
    for (const entry of ['threads', 'journal']) {
      const dir = tempDir('spindle-rt-link-top')
      await leaveMidCall(dir, 1)
      const link = path.join(dir, entry)
      fs.mkdirSync(link, { recursive: true })
      const elsewhere = plantLink(link)
      const before = tree(elsewhere)
      const registry = fs.readFileSync(path.join(dir, 'registry.db'))

      // Before the fix the runtime opened the directory and recovered the thread through the link.
      const refused = await refusedOpen(dir)
      expect(refused).toMatchObject({ code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${link} is a symbolic link (to ${elsewhere}), not a directory`) })
      expect(refused?.message).toContain('Move the link aside')
      expect(tree(elsewhere)).toEqual(before)
      expect(fs.readFileSync(path.join(dir, 'registry.db')).equals(registry)).toBe(true)
      expect(() => doctor(dir)).toThrow(expect.objectContaining({ code: 'DATA_DIR_INVALID' }))
    }
  })

  it('should refuse a new data directory whose threads/ links to an empty folder, leaving it empty', async () => {
    const dir = tempDir('spindle-rt-link-new')
    const elsewhere = tempDir('spindle-link-target')
    fs.symlinkSync(elsewhere, path.join(dir, 'threads'))
    await expect(runtime({ dir, model: finishes })).rejects.toMatchObject({ code: 'DATA_DIR_INVALID' })
    expect(fs.readdirSync(elsewhere)).toEqual([])
  })
})

describe("a symlink at one of the data directory's SQLite files", () => {
  it('should refuse to open the directory, naming the link, and write nothing through it (registry.db-wal, ledger.db)', async () => {
    for (const name of ['registry.db-wal', 'ledger.db']) {
      const dir = tempDir('spindle-rt-link-sqlite')
      await leaveMidCall(dir, 1)
      const entry = path.join(dir, name)
      // A file outside the data directory that SQLite would have written its log or pages into.
      const victim = path.join(tempDir('spindle-link-victim'), 'precious')
      fs.writeFileSync(victim, 'keep me')
      fs.rmSync(entry, { force: true })
      fs.symlinkSync(victim, entry)

      const refused = await refusedOpen(dir)
      expect(refused, name).toMatchObject({ code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${entry} is a symbolic link (to ${victim}), not a file`) })
      expect(fs.readFileSync(victim, 'utf8')).toBe('keep me')
      expect(fs.lstatSync(entry).isSymbolicLink()).toBe(true)
    }
  })
})

describe('a thread folder replaced by a symlink after a kill', () => {
  it('should fail that thread alone at recovery, naming the link, carry the others on, and touch nothing at the target', async () => {
    const dir = tempDir('spindle-rt-link-folder')
    const [linked, a, b] = (await leaveMidCall(dir, 3)) as [string, string, string]
    const folder = path.join(dir, 'threads', linked)
    const elsewhere = plantLink(folder)
    const before = tree(elsewhere)

    const problems: Problem[] = []
    const rt = await runtime({ dir, model: finishes, onProblem: (p) => problems.push(p) })
    // Before the fix the thread was read, recovered and written through the link like the others.
    expect(rt.lastRecovery.failed).toEqual([
      { threadId: linked, code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${folder} is a symbolic link (to ${elsewhere}), not a directory`) },
    ])
    expect(rt.lastRecovery.resumed.sort()).toEqual([a, b].sort())
    const outcomes = await Promise.all([rt.get(a).done, rt.get(b).done])
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed'])
    expect(problems).toContainEqual(expect.objectContaining({ code: 'DATA_DIR_INVALID', threadId: linked }))
    expect(rt.get(linked).status).toBe('error')
    await rt.checkRequests({ sweep: true })
    await rt.close()
    open.length = 0
    expect(tree(elsewhere)).toEqual(before)
    expect(fs.lstatSync(folder).isSymbolicLink()).toBe(true)
    expect(doctor(dir).findings).toContainEqual(
      expect.objectContaining({ threadId: linked, kind: 'damage', code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${folder} is a symbolic link`) }),
    )
    expect(() => rebuildThread(dir, linked, { apply: true })).toThrow(expect.objectContaining({ code: 'DATA_DIR_INVALID' }))
    expect(tree(elsewhere)).toEqual(before)

    // The folder put back, as the message says: rebuilt from its transcript, the thread goes on.
    putBack(folder, elsewhere)
    rebuildThread(dir, linked, { apply: true })
    const again = await runtime({ dir, model: finishes })
    expect(again.lastRecovery.resumed).toEqual([linked])
    expect((await again.get(linked).done).status).toBe('completed')
  })

  it("should not let the read-ahead worker read a linked thread folder's files", async () => {
    const dir = tempDir('spindle-rt-link-prefetch')
    const [linked, plain] = (await leaveMidCall(dir, 2)) as [string, string]
    plantLink(path.join(dir, 'threads', linked))
    const prefetch = prefetchThreadFiles(path.join(dir, 'threads'), [linked, plain], { watchFile: 'cancel.requested' })
    const fromLink = prefetch.take(linked)
    const fromPlain = prefetch.take(plain)
    await prefetch.close()
    if (fromPlain?.transcript && 'fd' in fromPlain.transcript) fs.closeSync(fromPlain.transcript.fd)
    // Before the fix the worker read state.json and opened transcript.jsonl through the link.
    expect(fromLink).toEqual({})
    expect(fromPlain?.state).toHaveProperty('bytes')
    expect(fromPlain?.transcript).toHaveProperty('fd')
  })
})

describe("a symlink at a thread's file name", () => {
  it('should not read a linked state.json, nor write through a link at state.json.tmp', async () => {
    const dir = tempDir('spindle-rt-link-state')
    const [id, other] = (await leaveMidCall(dir, 2)) as [string, string]
    const state = fileOf(dir, id, 'state.json')
    const outside = plantLink(state)
    const victim = path.join(tempDir('spindle-link-target'), 'victim.txt')
    fs.writeFileSync(victim, 'keep me\n')
    const temp = fileOf(dir, other, 'state.json.tmp')
    fs.symlinkSync(victim, temp)
    const outsideBefore = fs.readFileSync(outside)

    const problems: Problem[] = []
    const rt = await runtime({ dir, model: finishes, onProblem: (p) => problems.push(p) })
    // Before the fix state.json was read through the link: nothing was rebuilt, nothing reported.
    expect(rt.lastRecovery.rebuilt).toEqual([id])
    expect(problems).toContainEqual(expect.objectContaining({ code: 'STATE_CORRUPT', threadId: id, message: expect.stringContaining(`${state} is a symbolic link`) }))
    const outcomes = await Promise.all([rt.get(id).done, rt.get(other).done])
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed'])
    await rt.close()
    // Before the fix the checkpoint of `other` was written into the victim.
    expect(fs.readFileSync(victim, 'utf8')).toBe('keep me\n')
    expect(fs.readFileSync(outside).equals(outsideBefore)).toBe(true)
    // The links were replaced by real checkpoints (a rename replaces a link, never follows it).
    expect(fs.lstatSync(state).isFile()).toBe(true)
    expect(fs.lstatSync(fileOf(dir, other, 'state.json')).isFile()).toBe(true)
    expect(fs.existsSync(temp)).toBe(false)
  })

  it('should fail a thread whose transcript.jsonl is a link, append nothing to its target, and carry the other on', async () => {
    const dir = tempDir('spindle-rt-link-transcript')
    const [id, other] = (await leaveMidCall(dir, 2)) as [string, string]
    const transcript = fileOf(dir, id, 'transcript.jsonl')
    const outside = plantLink(transcript)
    const before = fs.readFileSync(outside)

    const rt = await runtime({ dir, model: finishes })
    // Before the fix the transcript was opened through the link and the recovery appended to it.
    expect(rt.lastRecovery.failed).toEqual([
      { threadId: id, code: 'TRANSCRIPT_CORRUPT', message: expect.stringContaining(`${transcript} is a symbolic link (to ${outside}), not a file`) },
    ])
    expect((await rt.get(other).done).status).toBe('completed')
    await rt.close()
    expect(fs.readFileSync(outside).equals(before)).toBe(true)
    expect(fs.lstatSync(transcript).isSymbolicLink()).toBe(true)
  })
})

describe('a thread folder swapped for a symlink while its thread runs', () => {
  it('should write no checkpoint through the link, end that thread in error naming it, and finish the other', async () => {
    // Setup: two threads waiting in their second model call, behind a gate.
    const dir = tempDir('spindle-rt-swap-running')
    let open2!: () => void
    const gate = new Promise<void>((resolve) => (open2 = resolve))
    const usage = { inputTokens: 1, outputTokens: 1 }
    const model: ModelAdapter = {
      name: 'gated',
      generate: async (request) => {
        if (request.turn === 1) return { text: '', toolCalls: [{ id: 'c1', name: 'noop', input: {} }], usage }
        await gate
        if (request.directiveName === 'other') return { text: `finished at turn ${request.turn}`, toolCalls: [], usage }
        // The swapped thread goes on working (a tool, then a model call that waits to be stopped).
        if (request.turn === 2) return { text: '', toolCalls: [{ id: 'c2', name: 'noop', input: {} }], usage }
        return new Promise((_, reject) => request.signal.addEventListener('abort', () => reject(request.signal.reason)))
      },
    }
    const problems: Problem[] = []
    const rt = await runtime({ dir, model, onProblem: (p) => problems.push(p) })
    const swapped = await rt.spawn({ directive: { name: 'swapped', prompt: 'p' } })
    const other = await rt.spawn({ directive: { name: 'other', prompt: 'p' } })
    await Promise.all([swapped, other].map((t) => until(t, (v) => v.usage.turns === 1 && inState('callingModel')(v))))
    // Its state.json says so: the checkpoint round before the fault has written it.
    const written = (): boolean => fs.existsSync(fileOf(dir, swapped.id, 'state.json')) && JSON.parse(fs.readFileSync(fileOf(dir, swapped.id, 'state.json'), 'utf8')).snapshot.context.usage.turns === 1
    while (!written()) await new Promise((r) => setTimeout(r, 10))
    // Fault: the folder moved aside and a link to a decoy folder put in its place.
    const folder = path.join(dir, 'threads', swapped.id)
    const aside = path.join(tempDir('spindle-moved-aside'), swapped.id)
    fs.renameSync(folder, aside)
    const decoy = tempDir('spindle-decoy')
    fs.writeFileSync(path.join(decoy, 'state.json'), 'the decoy')
    fs.symlinkSync(decoy, folder)
    const before = tree(decoy)
    open2()
    // After: nothing written at the decoy; the thread ends in error naming the link; the other completes.
    const [a, b] = await Promise.all([swapped.done, other.done])
    expect(a).toMatchObject({ status: 'error', error: { code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${folder} is a symbolic link (to ${decoy})`) } })
    expect(b).toMatchObject({ status: 'completed', result: 'finished at turn 2' })
    expect(problems).toContainEqual(expect.objectContaining({ code: 'DATA_DIR_INVALID', threadId: swapped.id }))
    expect(rt.list().find((r) => r.id === swapped.id)?.status).toBe('error')
    expect(tree(decoy)).toEqual(before)
  })
})

describe('request files under a folder swapped for a symlink while the runtime watches the thread', () => {
  it('should neither claim nor read a cancel request through a linked thread folder, and say so once', async () => {
    const dir = tempDir('spindle-rt-poll-folder')
    const problems: Problem[] = []
    const { rt, id, nonce } = await suspendedAtLimit(dir, problems)
    const folder = path.join(dir, 'threads', id)
    const elsewhere = plantLink(folder)
    fs.writeFileSync(path.join(elsewhere, 'cancel.requested'), JSON.stringify({ nonce }))
    const before = tree(elsewhere)

    // Before the fix the request was claimed (renamed) in `elsewhere` and honoured.
    const report = await rt.checkRequests({ sweep: true })
    await rt.checkRequests({ sweep: true })
    expect(report.honoured).toEqual([])
    expect(rt.list().find((r) => r.id === id)?.status).toBe('suspended')
    expect(tree(elsewhere)).toEqual(before)
    const refusals = problems.filter((p) => p.code === 'DATA_DIR_INVALID' && p.threadId === id)
    expect(refusals).toEqual([expect.objectContaining({ message: expect.stringContaining(`${folder} is a symbolic link (to ${elsewhere}), not a directory`) })])

    putBack(folder, elsewhere)
    const honoured = await rt.checkRequests()
    expect(honoured.honoured).toEqual([expect.objectContaining({ threadId: id, kind: 'cancel' })])
    expect(rt.list().find((r) => r.id === id)?.status).toBe('cancelled')
  })

  it('should neither claim nor read an approval response through a linked approvals folder', async () => {
    const dir = tempDir('spindle-rt-poll-approvals')
    const problems: Problem[] = []
    const { rt, id, approvals, requestId } = await suspendedAtLimit(dir, problems)
    const elsewhere = plantLink(approvals)
    fs.writeFileSync(path.join(elsewhere, `${requestId}.response.json`), JSON.stringify({ approved: false, message: 'forged' }))
    fs.writeFileSync(path.join(elsewhere, 'stray.response.json'), JSON.stringify({ approved: false }))
    const before = tree(elsewhere)

    // Before the fix the response was claimed in `elsewhere` and the thread denied.
    const report = await rt.checkRequests({ sweep: true })
    expect(report.honoured).toEqual([])
    expect(report.refused).toEqual([])
    expect(rt.list().find((r) => r.id === id)?.status).toBe('suspended')
    expect(tree(elsewhere)).toEqual(before)
    expect(problems.filter((p) => p.code === 'DATA_DIR_INVALID' && p.threadId === id)).toEqual([
      expect.objectContaining({ message: expect.stringContaining(`${approvals} is a symbolic link (to ${elsewhere}), not a directory`) }),
    ])
  })
})

describe('FIFOs where the runtime writes or reads a file', () => {
  it('should not block checkpoints on a FIFO planted at state.json.tmp', async () => {
    const dir = tempDir('spindle-rt-fifo-temp')
    const [id, other] = (await leaveMidCall(dir, 2)) as [string, string]
    const temp = fileOf(dir, id, 'state.json.tmp')
    mkfifo(temp)
    // Before the fix the temp file was opened for writing and waited for a reader for good, and
    // every checkpoint round with it: the host process hung.
    const statuses = hostRun(dir)
    expect(statuses.get(id)).toBe('completed')
    expect(statuses.get(other)).toBe('completed')
    expect(fs.lstatSync(temp, { throwIfNoEntry: false })?.isFIFO() ?? false).toBe(false)
  })

  it('should refuse a FIFO at a cancel request or an approval response without blocking, and take the honest one after', async () => {
    const dir = tempDir('spindle-rt-fifo-request')
    const problems: Problem[] = []
    const { rt, id, approvals, requestId } = await suspendedAtLimit(dir, problems)
    mkfifo(fileOf(dir, id, 'cancel.requested'))
    const first = await rt.checkRequests({ sweep: true })
    expect(first.refused).toEqual([expect.objectContaining({ threadId: id, kind: 'cancel', reason: expect.stringContaining('not a regular file') })])
    mkfifo(path.join(approvals, `${requestId}.response.json`))
    const second = await rt.checkRequests({ sweep: true })
    expect(second.refused).toEqual([expect.objectContaining({ threadId: id, kind: 'approval', reason: expect.stringContaining('not a regular file') })])
    expect(rt.list().find((r) => r.id === id)?.status).toBe('suspended')

    fs.writeFileSync(path.join(approvals, `${requestId}.response.json`), JSON.stringify({ approved: false }))
    expect((await rt.checkRequests()).honoured).toEqual([expect.objectContaining({ threadId: id, kind: 'approval' })])
    expect(rt.list().find((r) => r.id === id)?.status).toBe('cancelled')
  })
})
