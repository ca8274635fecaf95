/**
 * Runtimes on a PostgreSQL database: threads kept in it and nowhere else, a host that only spawns
 * and watches while workers run its threads, a worker that runs no more than its share, and
 * requests and events that reach across runtimes through the database.
 */
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { Runtime, RuntimeOptions } from '../../src/index.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'
import { storedThreads } from '../helpers/pgThreads.js'

const runtimes: Runtime[] = []
const schemas: string[] = []
afterEach(async () => {
  for (const rt of runtimes.splice(0)) await rt.close()
  for (const schema of schemas.splice(0)) await dropSchema(testDatabaseUrl(), schema)
})

function database(): { url: string; schema: string } {
  const schema = freshSchema()
  schemas.push(schema)
  return { url: testDatabaseUrl(), schema }
}

async function open(options: Omit<RuntimeOptions, 'dir'>): Promise<Runtime> {
  const rt = await createRuntime({ userConfig: null, shutdownSignals: [], ...options })
  runtimes.push(rt)
  return rt
}

const tick = defineTool({ name: 'tick', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })
/** Three turns of one tool call each, then an answer. */
const threeTurns = () => scriptedModel((r) => (r.turn < 3 ? { text: `turn ${r.turn}`, toolCalls: [{ name: 'tick', input: {} }] } : { text: `done ${r.threadId}` }))

async function until(check: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe('a runtime on PostgreSQL', () => {
  it('should run threads whose transcripts, checkpoints and rows are in the database alone, and read them back from a new runtime', async () => {
    const db = database()
    const rt = await open({ database: db, model: threeTurns(), tools: [tick] })
    const handles = await Promise.all([0, 1, 2].map((i) => rt.spawn({ directive: { name: `pg${i}`, prompt: 'go' } })))
    const outcomes = await Promise.all(handles.map((h) => h.done))
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed', 'completed'])
    await rt.close()
    runtimes.splice(runtimes.indexOf(rt), 1)

    const again = await open({ database: db, model: threeTurns(), tools: [tick] })
    expect(again.lastRecovery.resumed).toEqual([])
    expect(again.list().map((r) => r.status)).toEqual(['completed', 'completed', 'completed'])
    const outcome = await again.get(handles[0]!.id).done
    expect(outcome.status).toBe('completed')
    expect(outcome.cost.turns).toBe(3)
    for (const thread of storedThreads(db.url, db.schema)) expect(thread.replays, thread.record.id).toBe(true)
  })

  it('should carry on a thread left running by a runtime that closed, in the next runtime on the database', async () => {
    const db = database()
    const hang = scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }])
    const first = await open({ database: db, model: hang })
    const thread = await first.spawn({ directive: { name: 'left', prompt: 'wait' } })
    await until(() => first.get(thread.id).status === 'running')
    await first.close()
    runtimes.splice(runtimes.indexOf(first), 1)
    const second = await open({ database: db, model: scriptedModel([{ text: 'carried on' }]) })
    expect(second.lastRecovery.resumed).toEqual([thread.id])
    expect((await second.get(thread.id).done).status).toBe('completed')
  })

  it('should run threads on a single connection when given connections: 1, and refuse a count outside 1 to 16 naming the field', async () => {
    const db = database()
    await expect(open({ database: { ...db, connections: 0 }, model: threeTurns(), tools: [tick] })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      message: expect.stringContaining('database.connections'),
    })
    await expect(open({ database: { ...db, connections: 2.5 }, model: threeTurns(), tools: [tick] })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' })
    const rt = await open({ database: { ...db, connections: 1 }, model: threeTurns(), tools: [tick] })
    const handles = await Promise.all([0, 1, 2, 3].map((i) => rt.spawn({ directive: { name: `one${i}`, prompt: 'go' } })))
    const outcomes = await Promise.all(handles.map((h) => h.done))
    expect(outcomes.map((o) => [o.status, o.cost.turns])).toEqual(handles.map(() => ['completed', 3]))
    for (const thread of storedThreads(db.url, db.schema)) expect(thread.replays, thread.record.id).toBe(true)
  })

  it('should carry on 300 threads left running, read ahead a batch at a time, and rebuild from its transcript each one whose checkpoint row was lost', async () => {
    const db = database()
    const hang = scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }])
    const first = await open({ database: db, model: hang })
    const threads = await Promise.all(Array.from({ length: 300 }, (_, i) => first.spawn({ directive: { name: `left${i}`, prompt: 'wait' } })))
    await until(() => threads.every((t) => first.get(t.id).status === 'running'), 60_000)
    await first.close()
    runtimes.splice(runtimes.indexOf(first), 1)
    // Rows lost by hand, in the first batch and the second: those threads replay their transcripts.
    const lost = [threads[3]!.id, threads[100]!.id, threads[299]!.id].sort()
    const admin = new pg.Client({ connectionString: db.url })
    await admin.connect()
    try {
      await admin.query(`DELETE FROM "${db.schema}".checkpoints WHERE thread_id = ANY($1)`, [lost])
    } finally {
      await admin.end()
    }

    const second = await open({ database: db, model: scriptedModel((r) => ({ text: `carried on ${r.threadId}` })) })
    expect(second.lastRecovery.resumed.length).toBe(300)
    expect([...second.lastRecovery.rebuilt].sort()).toEqual(lost)
    expect(second.lastRecovery.failed).toEqual([])
    const outcomes = await Promise.all(threads.map((t) => second.get(t.id).done))
    expect(outcomes.filter((o) => o.status === 'completed').length).toBe(300)
    expect(outcomes.map((o) => o.result)).toEqual(threads.map((t) => `carried on ${t.id}`))
    for (const thread of storedThreads(db.url, db.schema)) expect(thread.replays, thread.record.id).toBe(true)
  }, 120_000)

  it('should leave every spawn of a host with maxThreads 0 to a worker, and settle the host\'s handle when the worker ends the thread', async () => {
    const db = database()
    const host = await open({ database: db, maxThreads: 0, model: scriptedModel([{ text: 'never the host' }]) })
    const ran: string[] = []
    const worker = await open({
      database: db,
      tools: [tick],
      model: scriptedModel((r) => {
        ran.push(r.threadId)
        return r.turn < 2 ? { toolCalls: [{ name: 'tick', input: {} }] } : { text: 'worked' }
      }),
    })
    const handle = await host.spawn({ directive: { name: 'handed', prompt: 'go' } })
    const outcome = await handle.done
    expect(outcome.status).toBe('completed')
    expect(outcome.cost.turns).toBe(2)
    expect(host.active()).toEqual([])
    expect(new Set(ran)).toEqual(new Set([handle.id]))
    expect(worker.get(handle.id).status).toBe('completed')
  })

  it('should run no more threads at once in a worker than its maxThreads, and the rest as room frees', async () => {
    const db = database()
    const host = await open({ database: db, maxThreads: 0, model: scriptedModel([{ text: 'never the host' }]) })
    let running = 0
    let most = 0
    const slow = scriptedModel((r) => ({ text: `done ${r.threadId}` }), { latencyMs: 50 })
    const worker = await open({
      database: db,
      maxThreads: 2,
      model: {
        name: 'slow',
        async generate(request) {
          running++
          most = Math.max(most, running)
          try {
            return await slow.generate(request)
          } finally {
            running--
          }
        },
      },
    })
    const handles = await Promise.all([0, 1, 2, 3, 4].map((i) => host.spawn({ directive: { name: `share${i}`, prompt: 'go' } })))
    const outcomes = await Promise.all(handles.map((h) => h.done))
    expect(outcomes.every((o) => o.status === 'completed')).toBe(true)
    expect(most).toBeLessThanOrEqual(2)
    expect(worker.active().length).toBeLessThanOrEqual(2)
  })

  it('should reach a worker\'s thread with a cancel made on the host, and tell the host\'s event stream every change', async () => {
    const db = database()
    const host = await open({ database: db, maxThreads: 0, model: scriptedModel([{ text: 'never the host' }]) })
    await open({ database: db, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]) })
    const handle = await host.spawn({ directive: { name: 'stopped', prompt: 'wait' } })
    await until(() => host.get(handle.id).status === 'running')
    await host.cancel(handle.id, 'no longer needed')
    const outcome = await handle.done
    expect(outcome.status).toBe('cancelled')
    const seen: string[] = []
    for await (const event of host.events({ after: '0', threadId: handle.id, signal: AbortSignal.timeout(5_000) })) {
      seen.push(event.type)
      if (event.type === 'thread.cancelled') break
    }
    expect(seen).toEqual(expect.arrayContaining(['thread.spawned', 'thread.started', 'thread.cancelled']))
  })
})
