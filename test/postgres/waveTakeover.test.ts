/**
 * Recovery matrix row "a worker takes over a wave it has room for the leads of only": a worker
 * with maxThreads runs leads and the children they spawn (children come along with their lead),
 * and stops mid-wave. Another worker with the same maxThreads takes the wave over: the leads fill
 * its room, so unless their children come along with them, no worker has room for the children
 * the leads wait for.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { Message, Runtime } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import { storedThreads } from '../helpers/pgThreads.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

const MAX_THREADS = 2
const CHILDREN = 3

const runtimes: Runtime[] = []
const schemas: string[] = []
afterEach(async () => {
  for (const rt of runtimes.splice(0)) await rt.close()
  for (const schema of schemas.splice(0)) await dropSchema(testDatabaseUrl(), schema)
})

const tick = defineTool({ name: 'tick', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })

function spawned(messages: readonly Message[]): string[] {
  return messages
    .filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === 'spawn_thread')
    .map((m) => JSON.parse(m.content).threadId as string)
}

/** A lead spawns its children and waits for them; a child takes twenty turns. */
const waveModel = () =>
  scriptedModel(
    (r) => {
      if (r.directiveName.startsWith('lead')) {
        if (r.turn === 1) return { toolCalls: Array.from({ length: CHILDREN }, (_, i) => ({ name: 'spawn_thread', input: { name: `part${i}-of-${r.directiveName}`, prompt: 'part' } })) }
        if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawned(r.messages) } }] }
        const waited = [...r.messages].reverse().find((m) => m.role === 'tool' && m.toolName === 'wait_threads')!
        const report = JSON.parse(waited.content) as { settled: Array<{ status: string }> }
        return { text: `wave finished: ${report.settled.filter((s) => s.status === 'completed').length} completed` }
      }
      return r.turn < 20 ? { toolCalls: [{ name: 'tick', input: {} }] } : { text: 'part done' }
    },
    { latencyMs: 20 },
  )

async function worker(database: { url: string; schema: string }): Promise<Runtime> {
  const rt = await createRuntime({
    database,
    maxThreads: MAX_THREADS,
    model: waveModel(),
    tools: [tick],
    userConfig: null,
    shutdownSignals: [],
  })
  runtimes.push(rt)
  return rt
}

describe('taking over a wave on PostgreSQL', () => {
  it('should take the children of the leads it takes over along with them, past its maxThreads, so every lead sees its children complete', async () => {
    const database = { url: testDatabaseUrl(), schema: freshSchema() }
    schemas.push(database.schema)
    const first = await worker(database)
    for (let i = 0; i < MAX_THREADS; i++) await first.spawn({ directive: { name: `lead${i}`, prompt: 'run the wave' } })
    // Every lead and child under way, then the worker stops (its threads are left to the database).
    for (;;) {
      const running = first.list({ status: 'running' })
      if (running.length === MAX_THREADS * (1 + CHILDREN)) break
      await new Promise((r) => setTimeout(r, 20))
    }
    await first.close()
    runtimes.splice(runtimes.indexOf(first), 1)

    const second = await worker(database)
    expect(second.lastRecovery.resumed).toHaveLength(MAX_THREADS * (1 + CHILDREN))
    const leads = second.list().filter((r) => r.parentId === null)
    const outcomes = await Promise.all(leads.map((lead) => second.get(lead.id).done))
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('completed')
      expect(outcome.result).toBe(`wave finished: ${CHILDREN} completed`)
    }
    for (const { record, replays } of storedThreads(database.url, database.schema)) {
      expect(record.status, record.id).toBe('completed')
      expect(replays, record.id).toBe(true)
    }
  }, 90_000)
})
