/**
 * Continuation at its edges: a context window hit when nothing can be shed (the prompt alone is
 * too big, or a successor's history is already cut to the ceiling), a crash between registering
 * a successor and handing off to it.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineTool, scriptedModel } from '../../src/index.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { tempDir } from '../helpers/dirs.js'

const runtime = testRuntimes()

const tooLong = { faults: [{ fault: 'http' as const, status: 400, code: 'context_length_exceeded', message: "This model's maximum context length is 8192 tokens" }], reply: {} }
const note = defineTool({ name: 'note', description: 'n', input: z.object({}), idempotent: true, execute: () => 'ok' })

describe('a context window hit that a continuation cannot relieve', () => {
  it('should suspend for context_length when the very first call is refused, not start a successor that would be refused the same way', async () => {
    let calls = 0
    const rt = await runtime({ model: scriptedModel(() => (calls++, tooLong)) })
    const thread = await rt.spawn({ directive: { name: 'huge', prompt: 'a prompt the provider finds too long' } })
    // Before: it handed off to a successor whose opening restated the same prompt, which was
    // refused and handed off again — hundreds of threads a second, with no end.
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'context_length' })
    expect(rt.chain(thread.id)).toHaveLength(1)
    expect(rt.list()).toHaveLength(1)
    expect(calls).toBe(1)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should let a successor whose carried history is refused again suspend, ending the chain there', async () => {
    const rt = await runtime({
      model: scriptedModel((r) => (r.messages[0]!.content.includes('Continued from thread') || r.turn > 1 ? tooLong : { text: 'first', toolCalls: [{ name: 'note', input: {} }] })),
      tools: [note],
    })
    const thread = await rt.spawn({ directive: { name: 'long', prompt: 'p' } })
    expect((await thread.done).status).toBe('continued')
    const [, successor, ...more] = rt.chain(thread.id)
    expect(more).toEqual([])
    expect(await rt.get(successor!.id).done).toMatchObject({ status: 'suspended', suspendReason: 'context_length' })
    expect(rt.chain(thread.id).map((r) => r.status)).toEqual(['continued', 'suspended'])
    for (const record of rt.chain(thread.id)) expect(rt.checkReplay(record.id).matches).toBe(true)
  })
})

describe('a crash between registering a successor and handing off to it', () => {
  it('should hand the recovered predecessor off to the successor it registered, before any model call of its own', async () => {
    const dir = tempDir('handoff-crash')
    const hang = { faults: [{ fault: 'hang' as const }], reply: {} }
    const isSuccessor = (r: { messages: ReadonlyArray<{ content: string }> }) => r.messages[0]!.content.includes('Continued from thread')
    let first = ''
    const backup = path.join(dir, 'backup')
    // The state a kill -9 leaves right after the successor became durable and before the
    // predecessor recorded the hand-off: a copy of the predecessor's files taken as the successor starts.
    const rt = await runtime({
      dir,
      model: scriptedModel((r) => (isSuccessor(r) ? hang : r.turn === 1 ? { text: 'first', toolCalls: [{ name: 'note', input: {} }] } : tooLong)),
      tools: [note],
      inspect: (event) => {
        const id = (event.actorRef as unknown as { id: string }).id
        if (event.type === '@xstate.actor' && first && id !== first && id.startsWith('long-') && !fs.existsSync(backup)) {
          fs.cpSync(path.join(dir, 'threads', first), backup, { recursive: true })
        }
      },
    })
    const thread = await rt.spawn({ directive: { name: 'long', prompt: 'p' } })
    first = thread.id
    expect((await thread.done).status).toBe('continued')
    const successor = rt.chain(first)[1]!.id
    await rt.close()
    fs.rmSync(path.join(dir, 'threads', first), { recursive: true })
    fs.cpSync(backup, path.join(dir, 'threads', first), { recursive: true })
    fs.rmSync(backup, { recursive: true })
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
    registry.updateStatus(first, 'running', Date.now())
    registry.close()

    // This time the provider would take the predecessor's history: it must not run on beside its successor.
    let predecessorCalls = 0
    const again = await runtime({
      dir,
      model: scriptedModel((r) => (isSuccessor(r) ? hang : (predecessorCalls++, { text: 'done alone' }))),
      tools: [note],
    })
    expect(again.lastRecovery.resumed).toEqual(expect.arrayContaining([first, successor]))
    expect(await again.get(first).done).toMatchObject({ status: 'continued', nextThreadId: successor })
    expect(predecessorCalls).toBe(0)
    expect(again.chain(first).map((r) => r.id)).toEqual([first, successor])
    expect(again.list()).toHaveLength(2)
    expect(again.checkReplay(first).matches).toBe(true)
    await again.cancel(successor)
    fs.rmSync(dir, { recursive: true, force: true })
  })
})
