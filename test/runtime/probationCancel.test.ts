/**
 * A cancel of a thread that crash-loop probation holds back (issue 22, item 8): two threads found
 * twice at the same tool call are suspects; the first runs alone, the second waits its turn
 * (src/runtime/crashLoop.ts). Cancelling the one that waits ends it cancelled at once, with no
 * problem reported and nothing recorded for the tool it never ran. Real runtimes on a real
 * directory; the two deaths are planted as the registry counts they leave (test/crash drives real
 * ones).
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { TranscriptEntry } from '../../persistence/types.js'
import type { Problem, Runtime, RuntimeOptions } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import { progressSeq } from '../../src/runtime/crashLoop.js'
import { introspect } from '../../src/runtime/introspect.js'
import { tempDir } from '../helpers/dirs.js'
import { inState, until } from '../helpers/threads.js'

const open: Runtime[] = []
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

/** A tool that runs until it is stopped or let go (`release`); `started` lists the threads whose call began. */
function hangingTool(started: string[], release = new Map<string, () => void>()) {
  return defineTool({
    name: 'hang',
    description: 'Runs until stopped or released',
    input: z.object({}),
    idempotent: true,
    timeoutMs: Infinity,
    execute: (_input, { threadId, signal }) => {
      started.push(threadId)
      return new Promise((resolve, reject) => {
        release.set(threadId, () => resolve('released'))
        signal.addEventListener('abort', () => reject(signal.reason))
      })
    },
  })
}

// A child waits in its model call for good: its parent, cancelled, has a child to settle.
const model = scriptedModel((r) =>
  r.directiveName === 'child' ? { faults: [{ fault: 'hang' }], reply: { text: '' } } : r.turn === 1 ? { toolCalls: [{ name: 'hang', input: {} }] } : { text: 'done' },
)

async function runtime(options: RuntimeOptions): Promise<Runtime> {
  const rt = await createRuntime(options)
  open.push(rt)
  return rt
}

/** Entries of thread `id`'s transcript. */
function entries(dir: string, id: string): TranscriptEntry[] {
  return fs
    .readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as TranscriptEntry)
}

/**
 * Two threads left in their tool call, each counted once by a recovery whose process then died
 * there: the next recovery finds both at the same point again, and holds them.
 */
async function twoSuspects(dir: string, withChildren = false): Promise<[string, string]> {
  const rt = await createRuntime({ dir, model, tools: [hangingTool([])], userConfig: null })
  const threads = await Promise.all(['first', 'second'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))
  await Promise.all(threads.map((t) => until(t, inState('runningTools'))))
  if (withChildren) {
    const children = await Promise.all(threads.map((t) => rt.spawn({ directive: { name: 'child', prompt: 'p' }, parentId: t.id })))
    await Promise.all(children.map((c) => until(c, inState('callingModel'))))
  }
  await rt.close()
  const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
  registry.setRecoveryCounts(
    threads.map((t) => {
      const all = entries(dir, t.id)
      return { id: t.id, count: 1, seq: progressSeq(all, all.at(-1)!.seq) }
    }),
  )
  registry.close()
  return [threads[0]!.id, threads[1]!.id]
}

/** A runtime recovering `dir`: one suspect runs alone, in its tool; the other waits its turn. */
async function onProbation(dir: string, ids: readonly string[]) {
  const started: string[] = []
  const release = new Map<string, () => void>()
  const problems: Problem[] = []
  const rt = await runtime({ dir, model, tools: [hangingTool(started, release)], userConfig: null, config: { supervision: { aloneMs: null } }, onProblem: (p) => problems.push(p) })
  // One suspect runs alone (its tool has started and hangs); the other is held back.
  const alone = await new Promise<string>((resolve) => {
    const look = (): void => void (started.length > 0 ? resolve(started[0]!) : setImmediate(look))
    look()
  })
  const held = ids.find((id) => id !== alone)!
  return { rt, started, release, problems, alone, held }
}

describe('crash-loop probation and cancel', () => {
  it('should cancel a suspect waiting for its turn at once, report no problem and record no tool intent for it', async () => {
    const dir = tempDir('spindle-probation-cancel')
    const { rt, started, release, problems, alone, held } = await onProbation(dir, await twoSuspects(dir))
    const intentsBefore = entries(dir, held).filter((e) => e.type === 'tool_intent').length

    const result = await rt.cancel(held, 'not wanted')
    // The cancel ended no probation: the suspect running alone goes on alone.
    expect(rt.list().find((r) => r.id === alone)?.status).toBe('running')
    // Its tool returns: it took a step, the probation ends, and whatever still waited for it runs.
    release.get(alone)!()
    await expect(rt.get(alone)!.done).resolves.toMatchObject({ status: 'completed' })
    await introspect(rt).whenDurable()
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve))

    expect(result).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled' } })
    expect(problems).toEqual([])
    expect(started).toEqual([alone])
    expect(entries(dir, held).filter((e) => e.type === 'tool_intent')).toHaveLength(intentsBefore)
    expect(rt.list().find((r) => r.id === held)?.status).toBe('cancelled')
  })

  it('should settle the children of a suspect cancelled while it waits, without waiting for the probation to end', async () => {
    const dir = tempDir('spindle-probation-cancel')
    const { rt, problems, alone, held } = await onProbation(dir, await twoSuspects(dir, true))
    const child = rt.list().find((r) => r.parentId === held)!

    // The suspect running alone never returns (no aloneMs): were the cancel to wait for the
    // probation's end, it would never resolve.
    const result = await rt.cancel(held, 'not wanted')

    expect(result).toMatchObject({ status: 'cancelled', outcome: { status: 'cancelled' } })
    expect(rt.list().find((r) => r.id === child.id)?.status).toBe('cancelled')
    expect(rt.list().find((r) => r.id === alone)?.status).toBe('running')
    expect(problems).toEqual([])
  })
})
