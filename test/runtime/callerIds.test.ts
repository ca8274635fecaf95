/**
 * Spawns under an id the caller chose (issue 23, item 3): `rt.spawn({ id })` is idempotent. The
 * same id and directive return the thread of that id — live, being spawned, finished, run by
 * another runtime on the directory — and another directive under it is refused. Real files and
 * SQLite; the processes that race and are killed are in test/crash/callerIds.test.ts.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { Runtime, ScriptedTurn } from '../../src/index.js'
import { SPAWN_ENTRY } from '../../src/thread/replay.js'
import { tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()
const hang = (): ScriptedTurn => ({ faults: [{ fault: 'hang' }], reply: {} })
const done = scriptedModel((r) => ({ text: `${r.directiveName} done` }))

/** How many times the thread's transcript records a spawn: one thread made once has one. */
function spawnEntries(dir: string, id: string): number {
  return fs
    .readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .filter((line) => JSON.parse(line).type === SPAWN_ENTRY).length
}

async function refusal(promise: Promise<unknown>): Promise<{ code: string; message: string; details: Record<string, unknown> }> {
  try {
    await promise
  } catch (error) {
    return error as { code: string; message: string; details: Record<string, unknown> }
  }
  throw new Error('the spawn was not refused')
}

describe('rt.spawn with an id', () => {
  it('should make the thread under the id given, in the folder of that name', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const thread = await rt.spawn({ id: 'order-1234', directive: { name: 'fulfil', prompt: 'ship it' } })
    expect(thread.id).toBe('order-1234')
    expect(rt.get('order-1234')).toBe(thread)
    expect(rt.list().map((r) => r.id)).toEqual(['order-1234'])
    expect(spawnEntries(rt.dir, 'order-1234')).toBe(1)
  })

  it('should return the live thread for the same id and directive, making no second one', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const first = await rt.spawn({ id: 'chat-42', directive: { name: 'reply', prompt: 'hello', instructions: 'be brief' } })
    const again = await rt.spawn({ id: 'chat-42', directive: { name: 'reply', prompt: 'hello', instructions: 'be brief' }, limits: { turns: 3 } })
    expect(again).toBe(first)
    expect(rt.list()).toHaveLength(1)
    expect(spawnEntries(rt.dir, 'chat-42')).toBe(1)
  })

  it('should give every one of spawns under one id made at once the one thread', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const handles = await Promise.all(Array.from({ length: 5 }, () => rt.spawn({ id: 'order-7', directive: { name: 'fulfil', prompt: 'ship it' } })))
    expect(new Set(handles)).toEqual(new Set([handles[0]]))
    expect(rt.list()).toHaveLength(1)
    expect(spawnEntries(rt.dir, 'order-7')).toBe(1)
  })

  it('should refuse another prompt under an existing id with THREAD_ID_TAKEN naming it, and leave the thread as it was', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const thread = await rt.spawn({ id: 'order-1', directive: { name: 'fulfil', prompt: 'ship it' } })
    const refused = await refusal(rt.spawn({ id: 'order-1', directive: { name: 'fulfil', prompt: 'refund it' } }))
    expect(refused).toMatchObject({
      code: 'THREAD_ID_TAKEN',
      message:
        'Thread order-1 already exists for another spawn (its directive prompt is "ship it", not "refund it"). A spawn with an id returns ' +
        'the thread of that id only for the same directive name, prompt and instructions and the same parent: use a new id for a new task, ' +
        'or rt.get("order-1") for this one.',
      details: { threadId: 'order-1', differ: ['prompt'] },
    })
    expect(rt.get('order-1')).toBe(thread)
    expect(thread.getSnapshot().directive).toEqual({ name: 'fulfil', prompt: 'ship it' })
    expect(spawnEntries(rt.dir, 'order-1')).toBe(1)
  })

  it('should refuse another name or other instructions under an existing id, naming each difference', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    await rt.spawn({ id: 'order-2', directive: { name: 'fulfil', prompt: 'p', instructions: 'careful' } })
    const refused = await refusal(rt.spawn({ id: 'order-2', directive: { name: 'refund', prompt: 'p' } }))
    expect(refused.code).toBe('THREAD_ID_TAKEN')
    expect(refused.details.differ).toEqual(['name', 'instructions'])
    expect(refused.message).toContain('its directive name is "fulfil", not "refund"; its directive instructions is "careful", not none')
  })

  it('should take empty instructions for none, as the thread records them', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const first = await rt.spawn({ id: 'order-3', directive: { name: 'fulfil', prompt: 'p' } })
    expect(await rt.spawn({ id: 'order-3', directive: { name: 'fulfil', prompt: 'p', instructions: '' } })).toBe(first)
  })

  it('should refuse the id under another parent, and return the child under the same one', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' } })
    const child = await rt.spawn({ id: 'step-1', directive: { name: 'step', prompt: 's' }, parentId: parent.id })
    expect(await rt.spawn({ id: 'step-1', directive: { name: 'step', prompt: 's' }, parentId: parent.id })).toBe(child)
    const refused = await refusal(rt.spawn({ id: 'step-1', directive: { name: 'step', prompt: 's' } }))
    expect(refused).toMatchObject({ code: 'THREAD_ID_TAKEN', details: { differ: ['parentId'] } })
    expect(refused.message).toContain(`its parent is "${parent.id}", not none`)
  })

  it("should return a finished thread's handle, whose done resolves with its outcome, from a runtime opened later", async () => {
    const first = await runtime({ model: done })
    const thread = await first.spawn({ id: 'order-5', directive: { name: 'fulfil', prompt: 'ship it' } })
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'fulfil done' })
    await first.close()

    const later = await createRuntime({ dir: first.dir, model: done, userConfig: null, shutdownSignals: [] })
    try {
      const found = await later.spawn({ id: 'order-5', directive: { name: 'fulfil', prompt: 'ship it' } })
      expect(found.id).toBe('order-5')
      expect(found.status).toBe('completed')
      expect(await found.done).toMatchObject({ status: 'completed', result: 'fulfil done' })
      expect(later.list()).toHaveLength(1)
      expect(spawnEntries(later.dir, 'order-5')).toBe(1)
    } finally {
      await later.close()
    }
  })

  it('should find a thread another runtime on the directory runs, as rt.get sees it, and refuse another directive there too', async () => {
    const dir = tempDir('spindle-caller-ids')
    const options = { dir, model: scriptedModel(hang), userConfig: null, shutdownSignals: [] as NodeJS.Signals[] }
    const runs: Runtime = await createRuntime(options)
    const other: Runtime = await createRuntime({ ...options, recover: false })
    try {
      const thread = await runs.spawn({ id: 'chat-9', directive: { name: 'reply', prompt: 'hi' } })
      const seen = await other.spawn({ id: 'chat-9', directive: { name: 'reply', prompt: 'hi' } })
      expect(seen.id).toBe('chat-9')
      // Registered, not run here: created until the other runtime's START, then running.
      expect(['created', 'running']).toContain(seen.status)
      expect(seen.getSnapshot().directive).toEqual({ name: 'reply', prompt: 'hi' })
      expect(other.active()).toEqual([])
      expect(runs.get('chat-9')).toBe(thread)
      await expect(other.spawn({ id: 'chat-9', directive: { name: 'reply', prompt: 'bye' } })).rejects.toMatchObject({ code: 'THREAD_ID_TAKEN' })
      expect(other.list()).toHaveLength(1)
      expect(spawnEntries(dir, 'chat-9')).toBe(1)
    } finally {
      await other.close()
      await runs.close()
    }
  })

  it('should let go of the id when the spawn is refused for a bad option, so a good spawn of it makes the thread', async () => {
    const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), execute: () => null })
    const rt = await runtime({ model: scriptedModel(hang), tools: [noop] })
    const refused = await refusal(rt.spawn({ id: 'order-8', directive: { name: 'fulfil', prompt: 'p', tools: ['nope'] } }))
    expect(refused.code).toBe('INVALID_OPTIONS')
    expect(rt.list()).toEqual([])
    const other = await createRuntime({ dir: rt.dir, model: scriptedModel(hang), userConfig: null, shutdownSignals: [], recover: false })
    try {
      // Another runtime would wait for a lease left behind; it makes the thread at once.
      const thread = await other.spawn({ id: 'order-8', directive: { name: 'fulfil', prompt: 'p' } })
      expect(thread.id).toBe('order-8')
      expect(other.get('order-8')).toBe(thread)
    } finally {
      await other.close()
    }
  })

  it('should act on a thread of a chosen id like on any other: get, cancel, list', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    await rt.spawn({ id: 'order-6', directive: { name: 'fulfil', prompt: 'p' } })
    expect(await rt.cancel('order-6', 'customer cancelled')).toMatchObject({ status: 'cancelled' })
    expect(rt.list({ status: 'cancelled' }).map((r) => r.id)).toEqual(['order-6'])
    const again = await rt.spawn({ id: 'order-6', directive: { name: 'fulfil', prompt: 'p' } })
    expect(await again.done).toMatchObject({ status: 'cancelled' })
  })

  it('should behave the same on the memory store', async () => {
    const rt = await runtime({ model: scriptedModel(hang), store: 'memory' })
    const [a, b] = await Promise.all([
      rt.spawn({ id: 'order-1', directive: { name: 'fulfil', prompt: 'p' } }),
      rt.spawn({ id: 'order-1', directive: { name: 'fulfil', prompt: 'p' } }),
    ])
    expect(b).toBe(a)
    await expect(rt.spawn({ id: 'order-1', directive: { name: 'fulfil', prompt: 'q' } })).rejects.toMatchObject({ code: 'THREAD_ID_TAKEN' })
    expect(rt.list()).toHaveLength(1)
  })
})

describe('rt.spawn id rule', () => {
  it.each([
    ['Order-1', 'Lower-case it ("order-1")'],
    ['../etc', 'Keep to those characters'],
    ['.', 'Keep to those characters'],
    ['..', 'Keep to those characters'],
    ['a/b', 'Keep to those characters'],
    ['a.b', 'Keep to those characters'],
    ['', 'Keep to those characters'],
    ['-100123456', 'keeping its sign ("chat--100123" for chat -100123)'],
    ['x'.repeat(77), 'Keep to those characters'],
  ])('should refuse %j with INVALID_THREAD_ID, writing nothing', async (id, hint) => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const refused = await refusal(rt.spawn({ id, directive: { name: 'fulfil', prompt: 'p' } }))
    expect(refused.code).toBe('INVALID_THREAD_ID')
    expect(refused.message).toContain('1 to 76 lower-case letters, digits, "-" and "_", starting with a letter or digit')
    expect(refused.message).toContain(hint)
    expect(refused.details).toMatchObject({ field: 'id' })
    expect(fs.readdirSync(path.join(rt.dir, 'threads'))).toEqual([])
  })

  it('should refuse an id that is not a string', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const refused = await refusal(rt.spawn({ id: 1234 as unknown as string, directive: { name: 'fulfil', prompt: 'p' } }))
    expect(refused).toMatchObject({ code: 'INVALID_THREAD_ID', details: { field: 'id' } })
    expect(refused.message).toContain('spawn: id 1234 cannot be a thread id')
    expect(refused.message).toContain('Pass a string.')
  })

  it('should take an id of 76 characters, the longest', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const id = `a${'_'.repeat(74)}z`
    expect((await rt.spawn({ id, directive: { name: 'fulfil', prompt: 'p' } })).id).toBe(id)
  })
})
