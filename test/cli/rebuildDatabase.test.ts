/**
 * `spindle rebuild --db`: a thread whose checkpoint row and stored approval decision were lost
 * (by hand, or a restore that missed them) is found out, and mended with --apply from its
 * transcript rows; a thread a live worker holds is refused.
 */
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import { spindleAsync as spindle } from '../helpers/cliProcess.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

const schema = freshSchema()
const url = testDatabaseUrl()
const flags = ['--db', url, '--schema', schema]
afterAll(() => dropSchema(url, schema))

async function rows(text: string, params: unknown[]): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(`SET search_path TO "${schema}"`)
    return (await client.query(text, params)).rows
  } finally {
    await client.end()
  }
}

describe('spindle rebuild on a database', () => {
  it('should find a lost checkpoint row and a lost decision, write both back with --apply, and refuse while a worker holds the thread', async () => {
    const publish = defineTool({ name: 'publish', description: 'publishes', input: z.object({ title: z.string() }), needsApproval: true, execute: (input) => ({ published: input.title }) })
    const model = scriptedModel((r) => {
      if (r.directiveName === 'stuck') return { faults: [{ fault: 'hang' }], reply: { text: '' } }
      return r.messages.some((m) => m.role === 'tool') ? { text: 'published' } : { toolCalls: [{ name: 'publish', input: { title: 'draft' } }] }
    })
    const rt = await createRuntime({ database: { url, schema }, model, tools: [publish], userConfig: null, shutdownSignals: [] })
    let closed = false
    try {
      // A thread the worker runs: a rebuilt checkpoint would be written over at its next round.
      const stuck = await rt.spawn({ directive: { name: 'stuck', prompt: 'wait' } })
      for (let i = 0; i < 500 && rt.get(stuck.id).status !== 'running'; i++) await new Promise((r) => setTimeout(r, 20))
      const held = await spindle(['rebuild', stuck.id, '--apply', ...flags])
      expect(held.code).toBe(9)
      expect(held.stderr).toContain('[THREAD_LEASED]')

      const thread = await rt.spawn({ directive: { name: 'post', prompt: 'go' } })
      expect((await thread.done).status).toBe('suspended')
      // The request is stored once the worker has seen the thread suspend; approved after that.
      for (let i = 0; i < 500 && (await rows('SELECT 1 FROM approvals WHERE thread_id = $1', [thread.id])).length === 0; i++) await new Promise((r) => setTimeout(r, 20))

      await rt.approve(thread.id)
      expect((await rt.get(thread.id).done).status).toBe('completed')
      await rt.close()
      closed = true

      // The fault: the checkpoint row and the stored decision of the approval are lost.
      await rows('DELETE FROM checkpoints WHERE thread_id = $1', [thread.id])
      await rows('UPDATE approvals SET decision = NULL, decided_at = NULL WHERE thread_id = $1', [thread.id])

      const dry = await spindle(['rebuild', thread.id, ...flags, '--json'])
      expect(dry.code).toBe(5)
      const found = JSON.parse(dry.stdout)
      expect(found).toMatchObject({ stored: null, matches: false, applied: false, rebuilt: { status: 'completed' } })
      expect(found.decisions).toEqual([{ requestId: expect.any(String), decision: 'approved', written: false }])
      const text = await spindle(['rebuild', thread.id, ...flags])
      expect(text.stdout).toContain('checkpoint  missing')
      expect(text.stdout).toContain('checkpoint does not match its transcript: run again with --apply to rewrite it.')
      expect(text.stdout).toContain('its decision is missing: --apply writes it')

      const applied = await spindle(['rebuild', thread.id, '--apply', ...flags, '--json'])
      expect(applied.code, applied.stderr).toBe(0)
      expect(JSON.parse(applied.stdout)).toMatchObject({ applied: true, decisions: [{ decision: 'approved', written: true }] })

      // What must hold: the thread reads as it ended, and nothing is left to mend.
      const again = await spindle(['rebuild', thread.id, ...flags, '--json'])
      expect(again.code, again.stderr).toBe(0)
      expect(JSON.parse(again.stdout)).toMatchObject({ matches: true, behind: 0, decisions: [] })
      const doctor = await spindle(['doctor', ...flags])
      expect(doctor.code, doctor.stdout + doctor.stderr).toBe(0)
      const shown = JSON.parse((await spindle(['show', thread.id, ...flags, '--json'])).stdout)
      expect(shown.record.status).toBe('completed')

      const compact = await spindle(['rebuild', thread.id, '--compact', ...flags])
      expect(compact.code).toBe(3)
      expect(compact.stderr).toContain('[INVALID_OPTIONS]')
    } finally {
      if (!closed) await rt.close()
    }
  }, 120_000)
})
