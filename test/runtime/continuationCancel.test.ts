/**
 * Trees of threads and continuation: a thread that continued into a successor still owns the
 * children it started before the hand-off.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineTool, scriptedModel } from '../../src/index.js'
import { eventually } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

describe('cancelling a thread that continued', () => {
  it('should cancel the children its predecessors started, and end cancelled only once they settled', async () => {
    const note = defineTool({ name: 'note', description: 'notes', input: z.object({}), idempotent: true, execute: () => ({ noted: true }) })
    const model = scriptedModel((r) => {
      if (r.directiveName === 'kid') return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
      if (r.messages[0]!.content.includes('Continued from thread')) return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
      // Turn 1 starts the kid; turn 2 fills the context window: the next call hands off.
      if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'work' } }], usage: { inputTokens: 100, outputTokens: 10, cost: 0.01 } }
      return { toolCalls: [{ name: 'note', input: {} }], usage: { inputTokens: 950, outputTokens: 10, cost: 0.01 } }
    })
    const rt = await runtime({ model: Object.assign(model, { contextWindow: 1000 }), tools: [note] })
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'lead the work' } })
    expect((await lead.done).status).toBe('continued')
    expect(await eventually(rt, () => rt.chain(lead.id).length === 2)).toBe(true)
    const successor = rt.chain(lead.id)[1]!
    const kid = rt.list().find((r) => r.directiveName === 'kid')!
    expect(kid.parentId).toBe(lead.id)

    const result = await rt.cancel(successor.id, 'stop the work')
    expect(result).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled' } })
    // The kid was started by the chain's first thread: it is cancelled with the chain.
    expect(rt.list().find((r) => r.id === kid.id)!.status).toBe('cancelled')
    const transcript = fs
      .readFileSync(path.join(rt.dir, 'threads', successor.id, 'transcript.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { type: string; data: any })
    expect(transcript.find((e) => e.type === 'CHILDREN_SETTLED')?.data.children).toEqual([kid.id])
    for (const record of rt.chain(lead.id)) expect(rt.checkReplay(record.id).matches).toBe(true)
  })
})
