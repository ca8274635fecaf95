/**
 * A cycle of waits through threads of two runtime processes sharing a data directory. The waits in
 * progress are in the lease store (leases.db), so a wait that would close a cycle with a thread of
 * another process is refused at once (WAIT_CYCLE) instead of ending at its timeout.
 *
 * Real processes, files and SQLite: the test's runtime runs `near`; a child process runs `far`,
 * which waits for `near`. Then `near` asks to wait for `far`. The refused wait has a short timeout
 * (without the refusal the thread would see a time-out instead); `far`'s wait has a long one.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import Database from 'better-sqlite3'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel, verifyReplay } from '../../src/index.js'
import type { Runtime } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { recordedToolResults, sawOfWait } from '../helpers/waits.js'

const opened: Runtime[] = []
afterEach(async () => {
  while (opened.length) await opened.pop()!.close()
})

async function until(condition: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** The waits leases.db holds, read as another process would. */
function recordedWaits(dir: string): Array<{ waiter: string; ids: string[] }> {
  const db = new Database(path.join(dir, 'leases.db'), { readonly: true, fileMustExist: true })
  try {
    return db
      .prepare<[], { waiter: string; ids: string }>('SELECT waiter, ids FROM waits ORDER BY id')
      .all()
      .map((row) => ({ waiter: row.waiter, ids: JSON.parse(row.ids) as string[] }))
  } finally {
    db.close()
  }
}

/**
 * Starts the other process (waitCycleWorker.ts): its thread `far` waits for `target`. Resolves once
 * far's wait is recorded in leases.db, with far's id, what the process printed so far, its exit
 * code (once it exits) and a way to kill it.
 */
async function startFar(dir: string, target: string): Promise<{ far: string; out: () => string; exited: Promise<number | null>; kill: () => void }> {
  const child = spawn(process.execPath, [compiled('test/runtime/waitCycleWorker.js'), dir, target, '120'], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (out += d))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const kill = (): void => void child.kill('SIGKILL')
  try {
    await until(() => /spawned (\S+)/.test(out) || child.exitCode !== null, 'the other process spawned far')
    const far = /spawned (\S+)/.exec(out)?.[1] ?? ''
    expect(far, out).not.toBe('')
    // far's wait is in progress, where every process sharing the directory sees it.
    await until(() => recordedWaits(dir).some((w) => w.waiter === far), "far's wait is recorded")
    return { far, out: () => out, exited, kill }
  } catch (error) {
    kill()
    throw error
  }
}

const waitResults = (dir: string, id: string): unknown[] => recordedToolResults(dir, id, 'wait_threads').map((r) => r.output)

describe('a wait that would close a cycle through threads of two processes', () => {
  it("should be refused at once, naming both threads, while the other process's wait goes on and ends when the refused thread completes", async () => {
    const dir = path.join(tempDir('spindle-wait-cycles-procs'), 'data')
    let open!: () => void
    const gateOpen = new Promise<void>((resolve) => (open = resolve))
    const gate = defineTool({ name: 'gate', description: 'waits for the test', input: z.object({}), idempotent: true, execute: async () => (await gateOpen, 'open') })
    let far = ''
    const model = scriptedModel((r) => {
      if (r.turn === 1) return { toolCalls: [{ name: 'gate', input: {} }] }
      if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: [far], timeoutSeconds: 2 } }] }
      return { text: sawOfWait(r.messages) }
    })
    const rt = await createRuntime({ dir, model, tools: [gate], durability: 'process', userConfig: null })
    opened.push(rt)
    const near = await rt.spawn({ directive: { name: 'near', prompt: 'wait for the other process' } })

    const other = await startFar(dir, near.id)
    far = other.far
    try {
      expect(recordedWaits(dir)).toEqual([{ waiter: far, ids: [near.id] }])
      open()

      expect(await near.done).toMatchObject({ status: 'completed', result: 'refused WAIT_CYCLE' })
      expect(waitResults(dir, near.id)).toEqual([
        expect.objectContaining({ error: 'WAIT_CYCLE', threadId: near.id, waitedOn: far, cycle: [near.id, far], message: expect.stringContaining(`${near.id} → ${far} → ${near.id}`) }),
      ])
      // The other process's wait went on, and ended when near completed (not at its 120 s timeout).
      expect(await other.exited, other.out()).toBe(0)
      const done = JSON.parse(/done (.+)/.exec(other.out())![1]!)
      expect(done).toMatchObject({ status: 'completed', result: 'settled completed' })
    } finally {
      other.kill()
    }
    expect(waitResults(dir, far)).toEqual([expect.objectContaining({ settled: [expect.objectContaining({ threadId: near.id, status: 'completed' })], timedOut: false })])
    // Every wait ended, and no row of it is left for a later check to trip over.
    expect(recordedWaits(dir)).toEqual([])
    for (const id of [near.id, far]) expect(verifyReplay(dir, id).matches, id).toBe(true)
  }, 60_000)

  it("should end a fail-fast wait once its way out completes, seeing the other process's wait that closes the cycle", async () => {
    const dir = path.join(tempDir('spindle-wait-cycles-procs'), 'data')
    const gates = new Map<string, () => void>()
    const shut = new Map<string, Promise<void>>()
    for (const name of ['near', 'z']) shut.set(name, new Promise<void>((resolve) => gates.set(name, resolve)))
    const gate = defineTool({ name: 'gate', description: 'waits for the test', input: z.object({}), idempotent: true, execute: async (_input, { threadId }) => (await shut.get(threadId.split('-')[0]!), 'open') })
    let far = ''
    let zId = ''
    const model = scriptedModel((r) => {
      if (r.turn === 1) return { toolCalls: [{ name: 'gate', input: {} }] }
      if (r.directiveName === 'z') return { text: 'z done' }
      // near waits fail-fast for far (which waits for near) and z: z may fail, which would end it.
      if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: [far, zId], failFast: true, timeoutSeconds: 20 } }] }
      return { text: sawOfWait(r.messages) }
    })
    const rt = await createRuntime({ dir, model, tools: [gate], durability: 'process', userConfig: null })
    opened.push(rt)
    const near = await rt.spawn({ directive: { name: 'near', prompt: 'wait for the other process' } })
    const zThread = await rt.spawn({ directive: { name: 'z', prompt: 'finish when told' } })
    zId = zThread.id

    const other = await startFar(dir, near.id)
    far = other.far
    try {
      // near's wait is let through: z runs and may fail.
      gates.get('near')!()
      await until(() => recordedWaits(dir).some((w) => w.waiter === near.id), "near's wait is recorded")
      expect(recordedWaits(dir)).toEqual([
        { waiter: far, ids: [near.id] },
        { waiter: near.id, ids: [far, zId] },
      ])

      // The fault: z completes instead of failing. near's wait could now only end at its timeout.
      gates.get('z')!()
      expect(await zThread.done).toMatchObject({ status: 'completed' })
      expect(await near.done).toMatchObject({ status: 'completed', result: 'cycle WAIT_CYCLE' })
      expect(waitResults(dir, near.id)).toEqual([
        expect.objectContaining({
          settled: [expect.objectContaining({ threadId: zId, status: 'completed' })],
          pending: [far],
          timedOut: false,
          cycle: expect.objectContaining({ code: 'WAIT_CYCLE', cycle: [near.id, far] }),
        }),
      ])
      // far's wait, in the other process, ended when near completed.
      expect(await other.exited, other.out()).toBe(0)
      expect(JSON.parse(/done (.+)/.exec(other.out())![1]!)).toMatchObject({ status: 'completed', result: 'settled completed' })
    } finally {
      other.kill()
    }
    expect(recordedWaits(dir)).toEqual([])
    for (const id of [near.id, far, zId]) expect(verifyReplay(dir, id).matches, id).toBe(true)
  }, 60_000)
})
