/**
 * The request bell: a runtime with more threads than `requests.scanPerPoll` finds a request that
 * spindle's writers rang for at its next poll, looks in only `scanPerPoll` other thread directories
 * per poll, and still finds every request file written by hand within ceil(threads / scanPerPoll)
 * polls. Files and SQLite are real; time is simulated.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { z } from 'zod'
import type { ThreadHandle } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { TestRuntime } from '../../src/testing.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { BELL_FILE, BellReader, ringBell } from '../../persistence/requestBell.js'
import { requestCancel, respondToApproval } from '../../src/thread/requests.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

afterEach(() => {
  vi.restoreAllMocks()
})

const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
const looping = scriptedModel((r) => ({ text: `turn ${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] }))

async function suspendedThreads(rt: TestRuntime, n: number): Promise<ThreadHandle[]> {
  const threads = await Promise.all(Array.from({ length: n }, (_, i) => rt.spawn({ directive: { name: `t${i}`, prompt: 'p' }, limits: { turns: 1 } })))
  for (const thread of threads) expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'limit' })
  await rt.settle()
  return threads
}

/** Writes a cancel file the way a person or a foreign script would: no bell. */
function handWrittenCancel(rt: TestRuntime, id: string): void {
  const registry = openSqliteRegistry({ path: path.join(rt.dir, 'registry.db'), durability: 'process' })
  const nonce = registry.get(id)!.nonce
  registry.close()
  fs.writeFileSync(path.join(rt.dir, 'threads', id, 'cancel.requested'), JSON.stringify({ nonce, reason: 'by hand' }))
}

/** Thread directories a poll looked in: `existsSync` calls under threads/. */
function countLooks(rt: TestRuntime): () => number {
  const spy = vi.spyOn(fs, 'existsSync')
  const threads = path.join(rt.dir, 'threads') + path.sep
  return () => new Set(spy.mock.calls.map(([p]) => String(p)).filter((p) => p.startsWith(threads)).map((p) => p.slice(threads.length).split(path.sep)[0])).size
}

describe('a runtime with more threads than requests.scanPerPoll', () => {
  it('should look in only scanPerPoll thread directories when nothing was rung', async () => {
    const rt = await runtime({ model: looping, tools: [noop], config: { requests: { scanPerPoll: 2 } } })
    await suspendedThreads(rt, 6)
    await rt.checkRequests()
    const looks = countLooks(rt)
    await rt.checkRequests()
    expect(looks()).toBe(2)
  })

  it('should honour a rung cancel at the next poll and every hand-written one within ceil(6 / 2) polls', async () => {
    const rt = await runtime({ model: looping, tools: [noop], config: { requests: { scanPerPoll: 2 } } })
    const threads = await suspendedThreads(rt, 6)
    await rt.checkRequests()
    const [rung, ...byHand] = threads.map((t) => t.id) as [string, ...string[]]
    for (const id of byHand) handWrittenCancel(rt, id)
    requestCancel(rt.dir, rung, { reason: 'rung' })

    const first = await rt.checkRequests()
    const honoured = first.honoured.map((h) => h.threadId)
    expect(honoured).toContain(rung)
    // The bell's thread plus at most the two the poll looked in by turn.
    expect(honoured.length).toBeLessThanOrEqual(3)
    for (let poll = 2; poll <= 3; poll++) honoured.push(...(await rt.checkRequests()).honoured.map((h) => h.threadId))
    expect(honoured.sort()).toEqual([rung, ...byHand].sort())
    for (const thread of threads) expect(await rt.get(thread.id).done).toMatchObject({ status: 'cancelled' })
  })

  it('should act on an approval written by respondToApproval at the next poll', async () => {
    const rt = await runtime({ model: looping, tools: [noop], config: { requests: { scanPerPoll: 1 } } })
    const threads = await suspendedThreads(rt, 5)
    await rt.checkRequests()
    const target = threads[2]!.id
    respondToApproval(rt.dir, target, { approved: true, limits: { turns: 2 }, by: 'carol' })
    const report = await rt.checkRequests()
    expect(report.honoured).toEqual([expect.objectContaining({ threadId: target, kind: 'approval' })])
    expect(await rt.get(target).done).toMatchObject({ status: 'suspended', cost: { turns: 2 } })
  })

  it('should look everywhere once when another runtime set the bell aside before this one read its rings', async () => {
    const rt = await runtime({ model: looping, tools: [noop], config: { requests: { scanPerPoll: 1 } } })
    const threads = await suspendedThreads(rt, 4)
    ringBell(rt.dir, threads[3]!.id)
    await rt.checkRequests()
    for (const thread of threads) handWrittenCancel(rt, thread.id)
    ringBell(rt.dir, threads[0]!.id)
    // Another runtime on the directory read the bell and set it aside, then someone rang again.
    fs.rmSync(path.join(rt.dir, BELL_FILE))
    ringBell(rt.dir, threads[1]!.id)
    const report = await rt.checkRequests()
    expect(report.honoured.map((h) => h.threadId).sort()).toEqual(threads.map((t) => t.id).sort())
  })

  it('should skip forged and torn lines of the bell and serve the threads it names', async () => {
    const rt = await runtime({ model: looping, tools: [noop], config: { requests: { scanPerPoll: 1 } } })
    const threads = await suspendedThreads(rt, 3)
    await rt.checkRequests()
    const bell = path.join(rt.dir, BELL_FILE)
    fs.appendFileSync(bell, '../../etc\n\u0000\u0001garbage\nghost-aaaaaaaaaaaa\n')
    requestCancel(rt.dir, threads[2]!.id, { reason: 'rung' })
    fs.appendFileSync(bell, threads[0]!.id.slice(0, 5))
    const report = await rt.checkRequests()
    expect(report.honoured.map((h) => h.threadId)).toContain(threads[2]!.id)
    expect(report.refused).toEqual([])
    expect(rt.get(threads[2]!.id).status).toBe('cancelled')
  })
})

describe('BellReader', () => {
  const dirs: string[] = []
  afterEach(() => {
    while (dirs.length) fs.rmSync(dirs.pop()!, { recursive: true, force: true })
  })
  function tempDir(): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-bell-'))
    dirs.push(dir)
    return dir
  }

  it('should say to look everywhere at its first read, then return only what was rung since', () => {
    const dir = tempDir()
    ringBell(dir, 'old-aaaa')
    const reader = new BellReader(dir)
    expect(reader.read()).toEqual({ ids: new Set(), missed: true })
    expect(reader.read()).toEqual({ ids: new Set(), missed: false })
    ringBell(dir, 'a-1')
    ringBell(dir, 'b-2')
    ringBell(dir, 'a-1')
    expect(reader.read()).toEqual({ ids: new Set(['a-1', 'b-2']), missed: false })
  })

  it('should read a line still being written once its newline is there', () => {
    const dir = tempDir()
    const reader = new BellReader(dir)
    reader.read()
    fs.appendFileSync(path.join(dir, BELL_FILE), 'half-wr')
    expect(reader.read().ids).toEqual(new Set())
    fs.appendFileSync(path.join(dir, BELL_FILE), 'itten\n')
    expect(reader.read().ids).toEqual(new Set(['half-written']))
  })

  it('should set a bell past its size aside, say so once, and read the next bell from its start', () => {
    const dir = tempDir()
    const reader = new BellReader(dir, { rotateBytes: 64 })
    reader.read()
    for (let i = 0; i < 10; i++) ringBell(dir, `thread-${i}`)
    const rotated = reader.read()
    expect(rotated.ids.size).toBe(10)
    expect(rotated.missed).toBe(true)
    expect(fs.readdirSync(dir)).toEqual([])
    expect(reader.read()).toEqual({ ids: new Set(), missed: false })
    ringBell(dir, 'after-1')
    expect(reader.read()).toEqual({ ids: new Set(['after-1']), missed: false })
  })

  it('should not read a flood appended to the bell into memory: it looks everywhere, and the next bell is read as usual', () => {
    const dir = tempDir()
    const reader = new BellReader(dir)
    reader.read()
    ringBell(dir, 'before-1')
    fs.appendFileSync(path.join(dir, BELL_FILE), `${'flood-aaaaaaaa\n'.repeat(400_000)}`)
    const flooded = reader.read()
    expect(flooded.missed).toBe(true)
    expect(flooded.ids).toEqual(new Set())
    // Set aside past its size, as any bell.
    expect(fs.readdirSync(dir)).toEqual([])
    ringBell(dir, 'after-1')
    expect(reader.read()).toEqual({ ids: new Set(['after-1']), missed: false })
  })

  it('should notice a bell replaced by another of the same size or longer', () => {
    const dir = tempDir()
    const reader = new BellReader(dir)
    reader.read()
    ringBell(dir, 'first-1')
    expect(reader.read().ids).toEqual(new Set(['first-1']))
    fs.rmSync(path.join(dir, BELL_FILE))
    fs.writeFileSync(path.join(dir, BELL_FILE), 'second-22\nthird-333\n')
    expect(reader.read()).toEqual({ ids: new Set(['second-22', 'third-333']), missed: true })
  })
})

describe('the first poll after a recovery of many threads', () => {
  it('should act on cancel files the read-ahead worker saw, without looking in every directory again, and on later ones as usual', async () => {
    const dir = tempDir('spindle-first-poll')
    // 300 threads (enough for the read-ahead worker) left in callingModel by a SIGKILL.
    try {
      execFileSync(process.execPath, [compiled('test/bench/workload.js'), 'leave', dir, '300'], { stdio: 'pipe' })
    } catch {}
    const ids = fs.readdirSync(path.join(dir, 'threads')).sort()
    expect(ids).toHaveLength(300)
    const nonceOf = (id: string): string => {
      const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
      try {
        return registry.get(id)!.nonce
      } finally {
        registry.close()
      }
    }
    const byHand = (id: string): void => fs.writeFileSync(path.join(dir, 'threads', id, 'cancel.requested'), JSON.stringify({ nonce: nonceOf(id), reason: 'by hand' }))
    byHand(ids[0]!)
    requestCancel(dir, ids[1]!, { reason: 'through spindle' })

    const looked = vi.spyOn(fs, 'existsSync')
    const cancelLooks = (): number => looked.mock.calls.filter(([p]) => String(p).endsWith('cancel.requested')).length
    const rt = await createRuntime({ dir, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), userConfig: null })
    try {
      expect(rt.lastRecovery.resumed).toHaveLength(300)
      // The worker looked on the other core: the first poll looked again only where it saw a file.
      expect(cancelLooks()).toBeLessThan(10)
      for (const id of ids.slice(0, 2)) expect(await rt.get(id).done).toMatchObject({ status: 'cancelled' })
      // A file written by hand after the recovery is found at the next poll, as always.
      byHand(ids[2]!)
      await rt.checkRequests()
      expect(await rt.get(ids[2]!).done).toMatchObject({ status: 'cancelled', error: { message: 'by hand' } })
      expect(rt.list({ status: 'cancelled' }).map((r) => r.id).sort()).toEqual(ids.slice(0, 3))
    } finally {
      await rt.close()
    }
  }, 30_000)
})
