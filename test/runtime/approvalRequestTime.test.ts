/**
 * Deadlines the runtime states survive a restart with the time they had: an approval request
 * written by the runtime that opens the directory after a kill (the request file was not yet
 * written when the process died) says when the thread asked, not when the file was written.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { scriptedModel } from '../../src/index.js'
import { createTestRuntime } from '../../src/testing.js'
import { tempDir } from '../helpers/dirs.js'
import { eventually } from '../helpers/threads.js'

function requestFile(dir: string, id: string): string | undefined {
  const approvals = path.join(dir, 'threads', id, 'approvals')
  if (!fs.existsSync(approvals)) return undefined
  const name = fs.readdirSync(approvals).find((n) => n.endsWith('.request.json'))
  return name && path.join(approvals, name)
}

describe('an approval request written after a restart', () => {
  it('should keep the time the thread suspended as createdAt, so its stated timeout does not move', async () => {
    const dir = tempDir('spindle-request-time')
    const start = Date.UTC(2026, 0, 1)
    const model = scriptedModel((r) => ({ text: `turn ${r.turn}`, toolCalls: [{ name: 'missing', input: {} }] }))
    try {
      const first = await createTestRuntime({ dir, model, startAt: start })
      const thread = await first.spawn({ directive: { name: 'limited', prompt: 'p' }, limits: { turns: 1 } })
      expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'limit' })
      expect(await eventually(first, () => requestFile(dir, thread.id) !== undefined)).toBe(true)
      const written = JSON.parse(fs.readFileSync(requestFile(dir, thread.id)!, 'utf8'))
      expect(written.createdAt).toBe(new Date(start).toISOString())
      await first.close()
      // What a kill between the durable suspension and the request file leaves: no request file.
      fs.rmSync(requestFile(dir, thread.id)!)

      const second = await createTestRuntime({ dir, model, startAt: start + 3_600_000 })
      expect(await eventually(second, () => requestFile(dir, thread.id) !== undefined)).toBe(true)
      const rewritten = JSON.parse(fs.readFileSync(requestFile(dir, thread.id)!, 'utf8'))
      expect(rewritten).toMatchObject({ id: written.id, createdAt: written.createdAt, timeoutSeconds: written.timeoutSeconds })
      await second.close()
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
