/**
 * limits.durationMs counts active running time: the time no process ran a thread (between a kill
 * or a close and the recovery that takes it over) is not part of it.
 */
import fs from 'node:fs'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineTool, scriptedModel } from '../../src/index.js'
import { createTestRuntime } from '../../src/testing.js'
import { tempDir } from '../helpers/dirs.js'
import { inState, until } from '../helpers/threads.js'

describe('durationMs across a recovery', () => {
  it('should not count the hour the thread was down as active time', async () => {
    const dir = tempDir('spindle-downtime')
    const start = Date.UTC(2026, 0, 1)
    const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
    const model = scriptedModel([
      { faults: [{ fault: 'http', status: 429, headers: { 'retry-after': '5' } }], reply: { toolCalls: [{ name: 'noop' }] } },
      { text: 'done' },
    ])
    try {
      const first = await createTestRuntime({ dir, model, tools: [noop], startAt: start })
      const thread = await first.spawn({ directive: { name: 'timed', prompt: 'p' }, limits: { durationMs: 60_000 } })
      await until(thread, inState('waitingToRetry'))
      await first.advance(1_000)
      await first.close()
      const second = await createTestRuntime({ dir, model, tools: [noop], startAt: start + 3_600_000 })
      expect(second.lastRecovery.resumed).toContain(thread.id)
      const recovered = second.get(thread.id)
      // The wait was due during the downtime: it fires at once (a 0 ms timer on the simulated clock).
      await second.advance(0)
      const outcome = await recovered.done
      expect(outcome).toMatchObject({ status: 'completed', result: 'done' })
      const state = JSON.parse(fs.readFileSync(`${dir}/threads/${thread.id}/state.json`, 'utf8'))
      expect(state.snapshot.context.activeMs).toBeLessThan(60_000)
      expect(second.checkReplay(thread.id).matches).toBe(true)
      await second.close()
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
