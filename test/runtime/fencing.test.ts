/**
 * Self-fencing inside one process: a runtime whose lease validity passed while it was not looking
 * must not act for its threads until it has renewed — another process may have taken them over
 * by then (test/crash/leases.test.ts shows that across real processes, with SIGSTOP, where it
 * depends on which callback the woken event loop runs first).
 * Here the wall clock jumps a second ahead (what a stopped VM sees when it resumes) just as a
 * thread is about to call the model, before the heartbeat's next tick: that call writes nothing
 * before it is made, so only a check right before it can stop it. Nobody took the lease
 * meanwhile, so the check renews it there and the thread goes on.
 */
import path from 'node:path'
import Database from 'better-sqlite3'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { z } from 'zod'
import type { Runtime } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'

const open: Runtime[] = []
afterEach(async () => {
  vi.restoreAllMocks()
  while (open.length) await open.pop()!.close()
})

describe('a runtime that stalled past its lease', () => {
  for (const durability of ['process', 'fsync'] as const) {
    it(`should make no model call for its thread until it has renewed the lease (${durability})`, async () => {
      const log: string[] = []
      const dir = tempDir('spindle-fencing')
      /** Whether the thread's lease, as another process would read it, is live now. */
      const leaseLive = (threadId: string): boolean => {
        const leases = new Database(path.join(dir, 'leases.db'), { readonly: true })
        try {
          const row = leases.prepare('SELECT expires_at FROM leases WHERE thread_id = ?').get(threadId) as { expires_at: number } | undefined
          return row !== undefined && row.expires_at > Date.now()
        } finally {
          leases.close()
        }
      }
      const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
      const model = scriptedModel((r) => {
        log.push(`model call, turn ${r.turn}${leaseLive(r.threadId) ? '' : ' without a live lease'}`)
        return r.turn === 1 ? { toolCalls: [{ name: 'noop', input: {} }] } : { text: 'done' }
      })
      const rt = await createRuntime({
        dir,
        model,
        tools: [noop],
        durability,
        // Leases valid for 300 ms - 100 ms after each renewal.
        config: { orphans: { thresholdMs: 300, heartbeatMs: 100 } },
        onProblem: (p) => log.push(p.code),
      })
      open.push(rt)
      const thread = await rt.spawn({ directive: { name: 'fenced', prompt: 'p' } })
      let stalled = false
      thread.subscribe((view) => {
        const state = JSON.stringify(view.state)
        if (!stalled && view.usage.turns === 1 && state.includes('callingModel')) {
          stalled = true
          log.push('clock jumps')
          const real = Date.now.bind(Date)
          vi.spyOn(Date, 'now').mockImplementation(() => real() + 1000)
        }
      })
      await new Promise((resolve) => {
        const check = setInterval(() => {
          if (rt.list({ status: ['created', 'running'] }).length === 0) resolve(clearInterval(check))
        }, 20)
      })
      // After the jump the lease had lapsed: the second model call was made only once it was
      // renewed, and the thread, which no other process had taken, was not let go.
      expect(log).toEqual(['model call, turn 1', 'clock jumps', 'model call, turn 2'])
      expect(rt.list()[0]).toMatchObject({ id: thread.id, status: 'completed' })
    })
  }
})
