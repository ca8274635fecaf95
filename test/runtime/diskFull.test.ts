/**
 * Recovery matrix row "the disk fills up": a real file system (a 2 MB tmpfs) runs out of space
 * while 20 threads run. Every write that fails (transcript lines, the journal, state.json, the
 * registry, the leases) must leave the host process running and lose nothing acknowledged; the
 * threads wait, parked at their last recorded input, and go on by themselves once space is freed.
 *
 * Mounting needs root (or CAP_SYS_ADMIN): where it is refused, the test says so and is skipped.
 * test/crash/fileSizeLimit.test.ts covers the same faults without privileges (RLIMIT_FSIZE).
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, readThreadFiles, scriptedModel, verifyReplay } from '../../src/index.js'
import type { LifecycleEvent, Message, ModelAdapter, Problem, SpindleError, ThreadHandle, Tool } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const mountPoints: string[] = []
/** A fresh 2 MB tmpfs, or null where mounting is refused. */
function smallDisk(): string | null {
  const at = tempDir('spindle-tmpfs')
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', at], { stdio: 'pipe' })
  } catch (error) {
    console.warn(`diskFull.test.ts skipped: cannot mount a tmpfs here (${String((error as Error).message).split('\n')[0]}); it needs root`)
    return null
  }
  mountPoints.push(at)
  return at
}
const mountPoint = smallDisk()
const mounted = mountPoint !== null

afterAll(() => {
  for (const at of mountPoints) execFileSync('umount', ['-l', at], { stdio: 'pipe' })
})

const freeSpace = (at: string): void => void execFileSync('mount', ['-o', 'remount,size=64m', at], { stdio: 'pipe' })

const THREADS = 20
const TURNS = 40

describe.skipIf(!mounted)('a disk that fills up while threads run', () => {
  it('should park the threads that cannot write, keep the host running, and carry every thread on once space is freed', async () => {
    const disk = mountPoint!
    const dir = path.join(disk, 'data')
    // Outside the full disk: what the non-idempotent tool did, to count its runs.
    const chargeLog = path.join(tempDir('spindle-charges'), 'charges.log')
    const pad = 'x'.repeat(2000)
    const echo = defineTool({
      name: 'echo',
      description: 'echo',
      input: z.object({ n: z.number() }),
      idempotent: true,
      execute: ({ n }) => ({ n, pad }),
    })
    const charge = defineTool({
      name: 'charge',
      description: 'not idempotent',
      input: z.object({ n: z.number() }),
      execute: ({ n }, { idempotencyKey }) => {
        fs.appendFileSync(chargeLog, `${idempotencyKey}\n`)
        return { charged: n }
      },
    })
    const model = scriptedModel((r) =>
      r.turn < TURNS ? { toolCalls: [{ name: r.turn % 3 === 2 ? 'charge' : 'echo', input: { n: r.turn } }] } : { text: `done after ${r.turn}` },
    )
    const problems: Problem[] = []
    const events: LifecycleEvent[] = []
    let freed = false
    let parkedId: string | undefined
    const rt = await createRuntime({
      dir,
      model,
      tools: [echo, charge],
      durability: 'fsync',
      userConfig: null,
      // Heartbeats every second, so leases whose renewal failed are renewed soon after.
      config: { orphans: { thresholdMs: 3000 } },
      onProblem: (p) => problems.push(p),
      onLifecycle: (e) => events.push(e),
    })
    try {
      const handles = await Promise.all(Array.from({ length: THREADS }, (_, i) => rt.spawn({ directive: { name: `full${i}`, prompt: 'go' } })))

      // The fault: the disk fills. Threads park; none ends, and the process goes on.
      await until(() => events.some((e) => e.type === 'thread_parked'), 20_000)
      await new Promise((resolve) => setTimeout(resolve, 1500))
      expect(handles.filter((h) => h.status === 'error' || h.status === 'cancelled')).toEqual([])
      const parked = problems.find((p) => p.code === 'STORAGE_FAILED' && p.threadId)
      expect(parked?.message).toMatch(/could not write its files \((ENOSPC|SQLITE_FULL)/)
      expect(parked?.message).toContain('parked at its last durable step and tried again by itself')
      // Told once per thread per episode, not at every retry.
      const perThread = new Map<string, number>()
      for (const p of problems) if (p.code === 'STORAGE_FAILED' && p.threadId) perThread.set(p.threadId, (perThread.get(p.threadId) ?? 0) + 1)
      expect(Math.max(...perThread.values()), JSON.stringify(problems.filter((p) => p.code === 'STORAGE_FAILED').map((p) => [p.threadId, p.message.slice(0, 200)]), null, 1)).toBe(1)

      // A cancel of a parked thread is recorded, and acts, once the disk takes writes again.
      parkedId = (events.find((e) => e.type === 'thread_parked') as Extract<LifecycleEvent, { type: 'thread_parked' }>).threadId
      const cancelling = rt.cancel(parkedId, 'no more facts')

      // A spawn on the full disk is refused, naming why, and leaves nothing running; should the
      // disk have found room for it after all, it runs to the end with the others.
      let extra: ThreadHandle | null = null
      try {
        extra = await rt.spawn({ directive: { name: 'late', prompt: 'go' } })
      } catch (error) {
        expect((error as SpindleError).code).toBe('STORAGE_FAILED')
        expect((error as SpindleError).message).toMatch(/^Thread late-\S+ was not created: .*spawn it again once the disk of the data directory takes writes\.$/s)
        expect(rt.active().map((t) => t.id).filter((id) => id.startsWith('late-'))).toEqual([])
      }
      if (extra) handles.push(extra)

      // Space is freed: the same runtime carries every thread on to the end by itself.
      freeSpace(disk)
      freed = true
      const cancelled = await cancelling
      expect(cancelled.status).toBe('cancelled')
      const done = await Promise.all(handles.map((h) => h.done))
      expect(done.map((o) => o.status)).toEqual(handles.map((h) => (h.id === parkedId ? 'cancelled' : 'completed')))
      expect(done.find((o) => o.status === 'cancelled')?.error?.message ?? '').toContain('no more facts')
      expect(new Set(done.filter((o) => o.status === 'completed').map((o) => o.cost.turns))).toEqual(new Set([TURNS]))
      const unparked = events.filter((e) => e.type === 'thread_unparked').length
      expect(unparked).toBe(events.filter((e) => e.type === 'thread_parked').length)
    } finally {
      if (!freed) freeSpace(disk)
      await rt.close()
    }

    // What must hold: no non-idempotent call ran twice; every thread's files agree with its
    // transcript, which verifies, and says where each parked thread went on.
    const keys = fs.readFileSync(chargeLog, 'utf8').trim().split('\n')
    expect(new Set(keys).size).toBe(keys.length)
    const reopened = await createRuntime({ dir, model, tools: [echo, charge], userConfig: null })
    try {
      const rows = reopened.list()
      expect(rows.filter((r) => r.id.startsWith('full'))).toHaveLength(THREADS)
      let resumedNotes = 0
      for (const row of rows) {
        expect(row.status).toBe(row.id === parkedId ? 'cancelled' : 'completed')
        const files = readThreadFiles(dir, row.id)
        expect(files.torn, row.id).toBeNull()
        expect(verifyReplay(dir, row.id).matches, `replay of ${row.id}`).toBe(true)
        resumedNotes += files.entries.filter((e) => e.type === 'storage_resumed').length
      }
      expect(resumedNotes).toBeGreaterThan(0)
    } finally {
      await reopened.close()
    }
  }, 90_000)
})

describe.skipIf(!mounted)('a disk that fills up while threads spawn children', () => {
  it('should park a parent whose child cannot be made durable, and spawn that child once space is freed', async () => {
    const disk = smallDisk()!
    const dir = path.join(disk, 'data')
    const spawned = (messages: readonly Message[]): string[] =>
      messages.flatMap((m) => (m.role === 'tool' && m.toolName === 'spawn_thread' ? [JSON.parse(m.content).threadId as string] : [])).filter(Boolean)
    // Each lead spawns three children at once, waits for them, then works on; each child works.
    const model = scriptedModel((r) => {
      if (r.directiveName.startsWith('lead')) {
        if (r.turn === 1) return { toolCalls: [0, 1, 2].map((i) => ({ name: 'spawn_thread', input: { name: `kid${i}`, prompt: 'work' } })) }
        if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawned(r.messages) } }] }
        if (r.turn < 8) return { toolCalls: [{ name: 'echo', input: { n: r.turn } }] }
        return { text: `children: ${spawned(r.messages).length}` }
      }
      return r.turn < 15 ? { toolCalls: [{ name: 'echo', input: { n: r.turn } }] } : { text: 'kid done' }
    })
    const { rt, filled, close } = await freeingLater(disk, dir, model, [paddedEcho()])
    try {
      const leads = await Promise.all(Array.from({ length: 10 }, (_, i) => rt.spawn({ directive: { name: `lead${i}`, prompt: 'go' } })))
      const outcomes = await Promise.all(leads.map((h) => h.done))
      expect(filled(), 'the disk never filled').toBe(true)
      // No spawn_thread came back to the model as a failure: every lead got its three children.
      expect(outcomes.map((o) => o.result)).toEqual(leads.map(() => 'children: 3'))
      const rows = rt.list()
      for (const lead of leads) {
        const children = rows.filter((r) => r.parentId === lead.id)
        expect(children.map((c) => c.status), lead.id).toEqual(['completed', 'completed', 'completed'])
      }
    } finally {
      await close()
    }
    const doctor = spawnSync(process.execPath, [compiled('src/cli.js'), 'doctor', '--dir', dir], { encoding: 'utf8' })
    expect(doctor.status, doctor.stdout).toBe(0)
    expect(doctor.stdout).toMatch(/40 threads checked: no damage\.$/m)
  }, 90_000)
})

describe.skipIf(!mounted)('a disk that fills up while threads continue into successors', () => {
  it('should keep each chain to one successor per hand-off, every chain ending completed with its whole cost', async () => {
    const disk = smallDisk()!
    const dir = path.join(disk, 'data')
    // Every 6th turn fills the window, so the next model call hands off: 4 hand-offs, 5 threads a chain.
    const model = Object.assign(
      scriptedModel((r) =>
        r.turn < 30
          ? { toolCalls: [{ name: 'echo', input: { n: r.turn } }], usage: { inputTokens: r.turn % 6 === 0 ? 950 : 100, outputTokens: 10, cost: 0.001 } }
          : { text: 'chain done', usage: { inputTokens: 100, outputTokens: 10, cost: 0.001 } },
      ),
      { contextWindow: 1000 },
    )
    const { rt, filled, close } = await freeingLater(disk, dir, model, [paddedEcho()])
    try {
      const firsts = await Promise.all(Array.from({ length: 10 }, (_, i) => rt.spawn({ directive: { name: `long${i}`, prompt: 'go' } })))
      const report = await rt.waitThreads(
        firsts.map((h) => h.id),
        { timeoutMs: 60_000 },
      )
      expect(filled(), 'the disk never filled').toBe(true)
      expect(report.settled.map((t) => [t.status, t.result, t.cost.turns])).toEqual(firsts.map(() => ['completed', 'chain done', 30]))
      for (const first of firsts) {
        const chain = rt.chain(first.id)
        expect(chain.map((r) => r.status), first.id).toEqual(['continued', 'continued', 'continued', 'continued', 'completed'])
        for (const record of chain) expect(verifyReplay(dir, record.id).matches, `replay of ${record.id}`).toBe(true)
      }
      expect(rt.list()).toHaveLength(50)
    } finally {
      await close()
    }
  }, 90_000)
})

/** An idempotent tool whose 2 KB results fill a 2 MB disk within a run. */
function paddedEcho() {
  const pad = 'x'.repeat(2000)
  return defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n, pad }) })
}

/** A runtime on `disk` whose space is freed 1.5 s after writes begin to fail; `close` frees it anyway. */
async function freeingLater(disk: string, dir: string, model: ModelAdapter, tools: Tool[]) {
  let freeing: NodeJS.Timeout | null = null
  const rt = await createRuntime({
    dir,
    model,
    tools,
    durability: 'fsync',
    userConfig: null,
    // Heartbeats every second, so leases whose renewal failed are renewed soon after.
    config: { orphans: { thresholdMs: 3000 } },
    onProblem: (p) => {
      if (p.code === 'STORAGE_FAILED') freeing ??= setTimeout(() => freeSpace(disk), 1500)
    },
  })
  return {
    rt,
    filled: () => freeing !== null,
    close: async () => {
      if (freeing) clearTimeout(freeing)
      freeSpace(disk)
      await rt.close()
    },
  }
}

describe.skipIf(!mounted)('a disk that fills up, then takes writes again', () => {
  it("should carry every parked thread on once one thread's retry gets through, none waiting out its own backoff", async () => {
    const disk = smallDisk()!
    const dir = path.join(disk, 'data')
    // A host clock that holds every timer of 250 ms or more (each parked thread's backoff among
    // them) until the test fires it; shorter ones run as usual.
    const held: Array<{ fn: () => void; cleared: boolean }> = []
    const clock = {
      now: () => Date.now(),
      setTimeout: (fn: () => void, ms: number): unknown => {
        if (ms < 250) return setTimeout(fn, ms)
        const timer = { fn, cleared: false }
        held.push(timer)
        return timer
      },
      clearTimeout: (handle: unknown) => {
        if (handle && typeof handle === 'object' && 'cleared' in handle) (handle as { cleared: boolean }).cleared = true
        else clearTimeout(handle as NodeJS.Timeout)
      },
    }
    const pad = 'y'.repeat(3000)
    const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n, pad }) })
    const model = scriptedModel((r) => (r.turn < TURNS ? { toolCalls: [{ name: 'echo', input: { n: r.turn } }] } : { text: `done after ${r.turn}` }))
    const events: LifecycleEvent[] = []
    const rt = await createRuntime({ dir, model, tools: [echo], durability: 'fsync', userConfig: null, clock, onLifecycle: (e) => events.push(e) })
    let freed = false
    try {
      const handles = await Promise.all(Array.from({ length: 12 }, (_, i) => rt.spawn({ directive: { name: `wake${i}`, prompt: 'go' } })))
      const parkedNow = (): Set<string> => {
        const parked = new Set<string>()
        for (const e of events) {
          if (e.type === 'thread_parked') parked.add(e.threadId)
          if (e.type === 'thread_unparked') parked.delete(e.threadId)
        }
        return parked
      }
      // The fault: the disk fills, and every thread that has not ended parks.
      await until(() => handles.every((h) => h.status !== 'running' || parkedNow().has(h.id)) && parkedNow().size >= 2, 30_000)
      const parked = parkedNow()

      // Room again. Held timers are fired one at a time until one thread's retry gets through.
      freeSpace(disk)
      freed = true
      const unparkedBefore = events.filter((e) => e.type === 'thread_unparked').length
      while (events.filter((e) => e.type === 'thread_unparked').length === unparkedBefore) {
        const next = held.shift()
        expect(next, 'a held timer to fire').toBeDefined()
        if (!next!.cleared) next!.fn()
        await new Promise((resolve) => setImmediate(resolve))
      }
      // What must hold: every other parked thread is tried again at once, though its own backoff
      // timer is still held, and all of them run to the end. Timers set from here on run (a
      // thread that fails again backs off anew); those of the backoffs before never do.
      const before = new Set(held)
      await until(() => {
        for (const timer of held.splice(0)) {
          if (before.has(timer)) held.push(timer)
          else if (!timer.cleared) setImmediate(timer.fn)
        }
        return [...parked].every((id) => !parkedNow().has(id))
      }, 20_000)
      const done = await Promise.all(handles.map((h) => h.done))
      expect(done.map((o) => o.status)).toEqual(handles.map(() => 'completed'))
    } finally {
      if (!freed) freeSpace(disk)
      await rt.close()
    }
  }, 90_000)
})

describe.skipIf(!mounted)('a disk that fills up the moment a spawn returns', () => {
  it('should park the new thread at its first line, keep the host running, and run it to its end once space is freed', async () => {
    const disk = smallDisk()!
    const dir = path.join(disk, 'data')
    const events: LifecycleEvent[] = []
    const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'started late' }]), durability: 'fsync', userConfig: null, onLifecycle: (e) => events.push(e) })
    let freed = false
    try {
      const thread = await rt.spawn({ directive: { name: 'late-start', prompt: 'go' } })
      // The fault: right after spawn returns, before its START (the next turn of the event loop)
      // or anything after it is durable, the disk fills up.
      const filler = fs.openSync(path.join(disk, 'filler'), 'w')
      try {
        const chunk = Buffer.alloc(64 * 1024, 1)
        for (;;) fs.writeSync(filler, chunk)
      } catch (error) {
        expect((error as NodeJS.ErrnoException).code).toBe('ENOSPC')
      } finally {
        fs.closeSync(filler)
      }
      await until(() => events.some((e) => e.type === 'thread_parked' && e.threadId === thread.id), 20_000)

      // Room again: the thread starts by itself and runs to its end.
      fs.rmSync(path.join(disk, 'filler'))
      freeSpace(disk)
      freed = true
      const outcome = await thread.done
      expect([outcome.status, outcome.result]).toEqual(['completed', 'started late'])
      expect(verifyReplay(dir, thread.id).matches).toBe(true)
    } finally {
      if (!freed) freeSpace(disk)
      await rt.close()
    }
  }, 60_000)
})

async function until(check: () => boolean, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out waiting')
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
