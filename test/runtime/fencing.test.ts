/**
 * Self-fencing inside one process: a runtime whose lease validity passed while it was not looking
 * must not act for its threads until it has renewed — another process may have taken them over
 * by then (test/crash/leases.test.ts shows that across real processes, with SIGSTOP, where it
 * depends on which callback the woken event loop runs first).
 * Here the wall clock jumps a second ahead (what a stopped VM sees when it resumes) just as a
 * thread is about to call the model, before the heartbeat's next tick: that call writes nothing
 * before it is made, so only a check right before it can stop it.
 */
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
      const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
      const model = scriptedModel((r) => {
        log.push(`model call, turn ${r.turn}`)
        return r.turn === 1 ? { toolCalls: [{ name: 'noop', input: {} }] } : { text: 'done' }
      })
      const rt = await createRuntime({
        dir: tempDir('spindle-fencing'),
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
      // After the jump the lease had lapsed: the thread was let go (LEASE_LOST) before any second
      // model call, and taken over again by the same runtime once its heartbeat had renewed.
      expect(log.slice(0, 3)).toEqual(['model call, turn 1', 'clock jumps', 'LEASE_LOST'])
      expect(log.filter((l) => l === 'model call, turn 2')).toHaveLength(1)
      expect(rt.list()[0]).toMatchObject({ id: thread.id, status: 'completed' })
    })
  }
})
