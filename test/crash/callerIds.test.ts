/**
 * Recovery matrix rows for spawns under caller-chosen ids (issue 23, item 3), with real host
 * processes on one data directory: two spawning the same ids at the same moment, one killed with
 * SIGKILL inside the spawn — alone, or while another process spawns the same id — and one killed
 * just after its spawn returned. What must hold: each id is exactly one thread, made once; every
 * spawn gets its handle or a clear refusal (THREAD_ID_TAKEN for another directive).
 */
import { spawn } from 'node:child_process'
import type { ChildProcessWithoutNullStreams } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { createRuntime, scriptedModel, verifyReplay } from '../../src/index.js'
import type { Runtime, ScriptedTurn } from '../../src/index.js'
import { SPAWN_ENTRY } from '../../src/thread/replay.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { alive } from '../helpers/processes.js'

const WORKER = compiled('test/crash/callerIdsWorker.js')

interface Worker {
  child: ChildProcessWithoutNullStreams
  output(): string
  /** The JSON lines it printed, in order. */
  results(): Array<{ id?: string; status?: string; error?: string; message?: string }>
  exited: Promise<void>
}

function worker(dir: string, ...args: string[]): Worker {
  const child = spawn(process.execPath, [WORKER, dir, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
  onTestFinished(() => {
    child.kill('SIGKILL')
  })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (out += d))
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  return {
    child,
    output: () => out,
    results: () =>
      out
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line)),
    exited,
  }
}

async function until(condition: () => boolean, what: string, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

function spawnEntries(dir: string, id: string): number {
  return fs
    .readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .filter((line) => JSON.parse(line).type === SPAWN_ENTRY).length
}

const hang = (): ScriptedTurn => ({ faults: [{ fault: 'hang' }], reply: {} })
const done = (): ScriptedTurn => ({ text: 'fulfilled' })

async function open(dir: string, model: () => ScriptedTurn, recover = true): Promise<Runtime> {
  const rt = await createRuntime({ dir, model: scriptedModel(model), durability: 'process', userConfig: null, shutdownSignals: [], recover })
  onTestFinished(() => rt.close())
  return rt
}

/** Two host processes spawn `order-0` … `order-<count-1>` at the same moment; resolves with what each printed. */
async function race(dir: string, model: 'hang' | 'done', prompts: [string, string], count: number): Promise<[Worker, Worker]> {
  const go = path.join(dir, 'go')
  const workers: [Worker, Worker] = [worker(dir, 'race', model, prompts[0], String(count), go), worker(dir, 'race', model, prompts[1], String(count), go)]
  for (const w of workers) await until(() => w.output().includes('ready'), `a worker is ready: ${w.output()}`)
  fs.writeFileSync(go, '')
  for (const w of workers) await until(() => w.output().includes('finished'), `a worker finished: ${w.output()}`)
  return workers
}

describe('spawns under one id from two host processes at once', () => {
  it.each(['hang', 'done'] as const)(
    'should make each id exactly one thread and give both processes its handle (threads that %s)',
    async (model) => {
      const dir = tempDir('spindle-caller-race')
      const count = 20
      const workers = await race(dir, model, ['ship it', 'ship it'], count)
      const ids = Array.from({ length: count }, (_, i) => `order-${i}`)
      for (const w of workers) expect(w.results().map((r) => r.id ?? `${r.error}: ${r.message}`)).toEqual(ids)

      const rt = await open(dir, hang, false)
      expect(
        rt
          .list()
          .map((r) => r.id)
          .sort(),
      ).toEqual([...ids].sort())
      for (const id of ids) expect(spawnEntries(dir, id), id).toBe(1)
      if (model === 'done') for (const id of ids) expect(rt.get(id).status, id).toBe('completed')
    },
    120_000,
  )

  it('should give the process asking for another directive THREAD_ID_TAKEN, and the thread the directive of the other', async () => {
    const dir = tempDir('spindle-caller-race')
    const count = 10
    const [a, b] = await race(dir, 'hang', ['ship it', 'refund it'], count)
    const rt = await open(dir, hang, false)
    for (let i = 0; i < count; i++) {
      const id = `order-${i}`
      const answers = [a.results()[i]!, b.results()[i]!]
      const made = answers.filter((r) => r.id === id)
      const refused = answers.filter((r) => r.error === 'THREAD_ID_TAKEN')
      expect({ made: made.length, refused: refused.length }, JSON.stringify(answers)).toEqual({ made: 1, refused: 1 })
      const winner = answers[0]!.id === id ? 'ship it' : 'refund it'
      expect(rt.get(id).getSnapshot().directive.prompt).toBe(winner)
      expect(spawnEntries(dir, id)).toBe(1)
    }
  }, 120_000)

  it('should find the thread made and finished by another process between its registry read and its lease, not make it twice', async () => {
    const dir = tempDir('spindle-caller-gap')
    const go = path.join(dir, 'go')
    const late = worker(dir, 'gap', 'order-3', 'ship it', go)
    await until(() => late.output().includes('ready'), `the late spawner is ready: ${late.output()}`)
    fs.writeFileSync(go, '')
    await until(() => late.output().includes('at gap'), `the late spawner read no row: ${late.output()}`)

    // Meanwhile this process makes the thread, runs it to the end and lets its lease go.
    const rt = await open(dir, done)
    const thread = await rt.spawn({ id: 'order-3', directive: { name: 'fulfil', prompt: 'ship it' } })
    expect(await thread.done).toMatchObject({ status: 'completed' })
    await rt.close()

    late.child.kill('SIGCONT')
    await until(() => late.output().includes('finished'), `the late spawner finished: ${late.output()}`)
    expect(late.results()).toEqual([{ id: 'order-3', status: 'completed' }])
    expect(spawnEntries(dir, 'order-3')).toBe(1)
    const after = await open(dir, hang, false)
    expect(after.list().map((r) => [r.id, r.status])).toEqual([['order-3', 'completed']])
  }, 60_000)
})

describe('a spawn under an id whose host was killed', () => {
  it('should make the thread once, in a runtime open on the directory all along, when the host was killed inside its spawn', async () => {
    const dir = tempDir('spindle-caller-kill')
    const rt = await open(dir, done)
    const killed = worker(dir, 'mid', 'order-9', 'ship it', 'kill')
    await killed.exited
    expect(killed.output()).toContain('at window')
    expect(killed.output()).not.toContain('spawn returned')
    // What the kill left: the first transcript entry and a lease of a dead process, no registry row.
    expect(rt.list()).toEqual([])
    expect(spawnEntries(dir, 'order-9')).toBe(1)

    const thread = await rt.spawn({ id: 'order-9', directive: { name: 'fulfil', prompt: 'ship it' } })
    expect(thread.id).toBe('order-9')
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'fulfilled' })
    expect(rt.list().map((r) => r.id)).toEqual(['order-9'])
    // The spawn that never returned made nothing: this one started the thread over.
    expect(spawnEntries(dir, 'order-9')).toBe(2)
    expect(verifyReplay(dir, 'order-9').matches).toBe(true)
  }, 60_000)

  it('should make the thread with the directive of the next spawn, in a runtime opened after the kill: the killed spawn never made it', async () => {
    const dir = tempDir('spindle-caller-kill')
    const killed = worker(dir, 'mid', 'order-9', 'ship it', 'kill')
    await killed.exited
    expect(killed.output()).toContain('at window')

    const rt = await open(dir, done)
    expect(rt.list()).toEqual([])
    const thread = await rt.spawn({ id: 'order-9', directive: { name: 'fulfil', prompt: 'refund it' } })
    expect(await thread.done).toMatchObject({ status: 'completed' })
    expect(rt.get('order-9').getSnapshot().directive).toEqual({ name: 'fulfil', prompt: 'refund it' })
    expect(rt.list()).toHaveLength(1)
  }, 60_000)

  it('should let a process spawning the id while the host holds it inside its spawn make it once the host is killed', async () => {
    const dir = tempDir('spindle-caller-kill')
    const holder = worker(dir, 'mid', 'order-0', 'ship it', 'stop')
    await until(() => holder.output().includes('at window'), `the holder is inside its spawn: ${holder.output()}`)
    const go = path.join(dir, 'go')
    const racer = worker(dir, 'race', 'done', 'ship it', '1', go)
    await until(() => racer.output().includes('ready'), `the racer is ready: ${racer.output()}`)
    fs.writeFileSync(go, '')
    // It must not answer while a live process holds the id unregistered: it waits.
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(racer.results()).toEqual([])
    expect(alive(holder.child.pid!)).toBe(true)

    holder.child.kill('SIGKILL')
    await holder.exited
    await until(() => racer.output().includes('finished'), `the racer finished: ${racer.output()}`)
    expect(racer.results()).toEqual([{ id: 'order-0', status: expect.any(String) }])

    const rt = await open(dir, hang, false)
    expect(rt.list().map((r) => r.id)).toEqual(['order-0'])
    expect(rt.get('order-0').status).toBe('completed')
  }, 120_000)

  it('should find the thread, carried on by the next runtime, when the host was killed right after its spawn returned', async () => {
    const dir = tempDir('spindle-caller-kill')
    const killed = worker(dir, 'kill-after', 'order-10', 'ship it')
    await killed.exited
    expect(killed.output()).toContain('spawned')

    const rt = await open(dir, done)
    const thread = await rt.spawn({ id: 'order-10', directive: { name: 'fulfil', prompt: 'ship it' } })
    expect(rt.lastRecovery.resumed).toContain('order-10')
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'fulfilled' })
    await expect(rt.spawn({ id: 'order-10', directive: { name: 'fulfil', prompt: 'refund it' } })).rejects.toMatchObject({ code: 'THREAD_ID_TAKEN' })
    expect(rt.list()).toHaveLength(1)
    expect(spawnEntries(dir, 'order-10')).toBe(1)
  }, 60_000)
})
