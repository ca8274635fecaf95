/**
 * Spawns that overlap. A parent's `spawns` limit holds however many spawns are under way at once —
 * from host code, from its own `spawn_thread` calls, from two processes on one data directory —
 * and a slot a failed spawn took is given back. A `spawn_thread` call run again while the first run
 * is still making its child (its parent restarted by its supervisor mid-spawn) finds that child
 * instead of starting it twice.
 *
 * Real files and SQLite. The moment a spawn is under way (its child's actor exists, its registry
 * row is not written yet) is caught with an XState inspector, which sees the child's actor made
 * inside the spawn; what the test does then runs before any write of the spawn's round.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { InspectionEvent } from 'xstate'
import { createRuntime, defineTool, scriptedModel, verifyReplay } from '../../src/index.js'
import type { ModelRequest, ScriptedTurn, ThreadHandle } from '../../src/index.js'
import { childThreadId } from '../../src/base/ids.js'
import { toolIdempotencyKey } from '../../actors/threadEffects.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import { SPAWN_ENTRY } from '../../src/thread/replay.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { eventually } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { recordedToolResults } from '../helpers/waits.js'

const runtime = testRuntimes()
const hang = (): ScriptedTurn => ({ faults: [{ fault: 'hang' }], reply: {} })

async function until(condition: () => boolean, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** The id of the thread an inspection event announces, when it announces one. */
function actorMade(event: InspectionEvent): string | null {
  return event.type === '@xstate.actor' ? ((event.actorRef as unknown as { id: string }).id ?? null) : null
}

function transcriptTypes(dir: string, id: string): string[] {
  return fs
    .readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line).type as string)
}

/** The children ledger.db holds accounts (and so spawn slots) for under `parentId`. */
function ledgerChildren(dir: string, parentId: string): string[] {
  const ledger = openSqliteLedger({ path: path.join(dir, 'ledger.db'), durability: 'process' })
  try {
    return ledger.children(parentId).map((a) => a.threadId)
  } finally {
    ledger.close()
  }
}

describe("a parent's spawns limit under spawns that overlap", () => {
  it('should start exactly 2 of 5 children spawned at once by host code under spawns: 2, and refuse the others', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spawns: 2 } })
    const results = await Promise.allSettled(Array.from({ length: 5 }, (_, i) => rt.spawn({ directive: { name: `c${i}`, prompt: 'c' }, parentId: parent.id })))

    const started = results.filter((r): r is PromiseFulfilledResult<ThreadHandle> => r.status === 'fulfilled').map((r) => r.value.id)
    const refused = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason)
    expect(started).toHaveLength(2)
    for (const reason of refused) {
      expect(reason).toMatchObject({
        code: 'SPAWN_REFUSED',
        message: `Thread ${parent.id} has started 2 children, its spawns limit is 2.`,
        details: { threadId: parent.id, limit: 'spawns' },
      })
    }
    expect(refused).toHaveLength(3)
    await rt.settle()
    expect(rt.list().filter((r) => r.parentId === parent.id).map((r) => r.id).sort()).toEqual([...started].sort())
    expect(ledgerChildren(rt.dir, parent.id).sort()).toEqual([...started].sort())
    await rt.cancel(parent.id)
  })

  it("should never start more than the limit between a parent's spawn_thread calls and host code spawning under it at once", async () => {
    // The parent asks for one child a turn. While its first spawn_thread call is under way (its
    // child's actor made, its registry row not yet written), host code spawns two more under it.
    let hostSpawns: Promise<PromiseSettledResult<ThreadHandle>[]> | undefined
    let parentId = ''
    const model = scriptedModel((r: ModelRequest): ScriptedTurn => {
      if (r.directiveName !== 'parent') return hang()
      if (r.turn <= 3) return { toolCalls: [{ name: 'spawn_thread', input: { name: `c${r.turn}`, prompt: 'c' } }] }
      return { text: 'parent done' }
    })
    const rt = await runtime({
      model,
      inspect: (event) => {
        if (hostSpawns || !actorMade(event)?.startsWith('c1-')) return
        const spawns = () => Promise.allSettled([0, 1].map((i) => rt.spawn({ directive: { name: `h${i}`, prompt: 'h' }, parentId })))
        // After the spawn in whose middle this runs has reached its wait for the disk.
        hostSpawns = new Promise((resolve) => queueMicrotask(() => resolve(spawns())))
      },
    })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spawns: 2 } })
    parentId = parent.id
    expect(await parent.done).toMatchObject({ status: 'completed', result: 'parent done' })
    expect(hostSpawns).toBeDefined()

    const fromModel = recordedToolResults(rt.dir, parent.id, 'spawn_thread')
    const fromHost = await hostSpawns!
    expect(fromModel).toHaveLength(3)
    expect(fromModel[0]).toMatchObject({ ok: true, output: { existing: false } })
    const started = [fromModel[0]!.output.threadId as string, ...fromHost.filter((r) => r.status === 'fulfilled').map((r) => (r as PromiseFulfilledResult<ThreadHandle>).value.id)]
    expect(started).toHaveLength(2)
    for (const refused of fromModel.slice(1)) {
      expect(refused).toMatchObject({ ok: false, output: { message: expect.stringContaining(`Thread ${parent.id} has started 2 children, its spawns limit is 2.`) } })
    }
    for (const refused of fromHost.filter((r): r is PromiseRejectedResult => r.status === 'rejected')) {
      expect(refused.reason).toMatchObject({ code: 'SPAWN_REFUSED', details: { limit: 'spawns' } })
    }
    expect(rt.list().filter((r) => r.parentId === parent.id).map((r) => r.id).sort()).toEqual([...started].sort())
    expect(ledgerChildren(rt.dir, parent.id).sort()).toEqual([...started].sort())
  })

  it('should start no more than the limit between two runtime processes spawning under one parent at once', async () => {
    const dir = tempDir('spindle-spawn-races')
    const rt = await createRuntime({ dir, model: scriptedModel(hang), durability: 'process', userConfig: null })
    const kills: Array<() => void> = []
    try {
      const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spawns: 2 } })
      const go = path.join(dir, 'go')
      const workers = ['a', 'b'].map((name) => {
        const child = spawn(process.execPath, [compiled('test/runtime/spawnRaceWorker.js'), dir, parent.id, name, '3', go], { stdio: ['ignore', 'pipe', 'pipe'] })
        let out = ''
        child.stdout.on('data', (d) => (out += d))
        child.stderr.on('data', (d) => (out += d))
        kills.push(() => child.exitCode === null && child.kill('SIGKILL'))
        const exited = new Promise<string>((resolve, reject) => child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`worker ${name} exited ${code}: ${out}`)))))
        return { out: () => out, exited }
      })
      // Both runtimes open and waiting before either spawns.
      await until(() => workers.every((w) => w.out().includes('ready')), 'both workers opened their runtimes')
      fs.writeFileSync(go, '')
      const results = (await Promise.all(workers.map((w) => w.exited))).flatMap((out) =>
        out
          .split('\n')
          .filter((line) => line.startsWith('{'))
          .map((line) => JSON.parse(line) as { spawned?: string; error?: string; message?: string }),
      )

      expect(results).toHaveLength(6)
      const started = results.filter((r) => r.spawned).map((r) => r.spawned!)
      expect(started).toHaveLength(2)
      for (const r of results.filter((r) => !r.spawned)) expect(r).toMatchObject({ error: 'SPAWN_REFUSED', message: expect.stringContaining('its spawns limit is 2') })
      expect(rt.list().filter((r) => r.parentId === parent.id).map((r) => r.id).sort()).toEqual([...started].sort())
      expect(ledgerChildren(dir, parent.id).sort()).toEqual([...started].sort())
    } finally {
      for (const kill of kills) kill()
      await rt.close()
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)
})

describe("a continuation chain's spawns", () => {
  it("should count a continuation's children with its predecessors' against the spawns limit they share", async () => {
    // Turn 1 fills the window (950 of 1000 tokens) and spawns c1; the next call hands off. The
    // successor carries the limits and usage on, and spawns c2 and c3 in turns 2 and 3.
    const model = scriptedModel((r): ScriptedTurn => {
      if (r.directiveName !== 'long') return hang()
      if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'c1', prompt: 'c' } }], usage: { inputTokens: 950, outputTokens: 10, cost: 0 } }
      if (r.turn <= 3) return { toolCalls: [{ name: 'spawn_thread', input: { name: `c${r.turn}`, prompt: 'c' } }], usage: { inputTokens: 100, outputTokens: 10, cost: 0 } }
      return { text: 'done', usage: { inputTokens: 100, outputTokens: 10, cost: 0 } }
    })
    const rt = await runtime({ model: Object.assign(model, { contextWindow: 1000 }) })
    const first = await rt.spawn({ directive: { name: 'long', prompt: 'p' }, limits: { spawns: 2 } })
    expect(await first.done).toMatchObject({ status: 'continued' })
    const report = await rt.waitThreads([first.id], { timeoutMs: 60_000 })
    expect(report.settled[0]).toMatchObject({ status: 'completed', result: 'done' })
    const [, successor, ...more] = rt.chain(first.id)
    expect(more).toEqual([])

    const [c1] = recordedToolResults(rt.dir, first.id, 'spawn_thread')
    const [c2, c3] = recordedToolResults(rt.dir, successor!.id, 'spawn_thread')
    expect(c1).toMatchObject({ ok: true })
    expect(c2).toMatchObject({ ok: true })
    expect(c3).toMatchObject({ ok: false, output: { message: expect.stringContaining(`Thread ${successor!.id} has started 2 children, its spawns limit is 2.`) } })
    const children = rt.list().filter((r) => r.parentId === first.id || r.parentId === successor!.id)
    expect(children.map((r) => r.id).sort()).toEqual([c1!.output.threadId, c2!.output.threadId].sort())
  })
})

describe('a spawn slot given back', () => {
  it('should give back the slot of a spawn its budget refused: a later spawn starts', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spawns: 2, spend: 1 } })
    const first = await rt.spawn({ directive: { name: 'first', prompt: 'f' }, limits: { spend: 0.5 }, parentId: parent.id })
    await expect(rt.spawn({ directive: { name: 'big', prompt: 'b' }, limits: { spend: 0.8 }, parentId: parent.id })).rejects.toMatchObject({ code: 'BUDGET_EXCEEDED' })
    const second = await rt.spawn({ directive: { name: 'second', prompt: 's' }, limits: { spend: 0.1 }, parentId: parent.id })
    await expect(rt.spawn({ directive: { name: 'third', prompt: 't' }, limits: { spend: 0.1 }, parentId: parent.id })).rejects.toMatchObject({ code: 'SPAWN_REFUSED' })
    expect(ledgerChildren(rt.dir, parent.id).sort()).toEqual([first.id, second.id].sort())
    await rt.cancel(parent.id)
  })

  it('should give back the slot of a spawn_thread whose child could not be written: the next call starts one', async () => {
    // The first call's child has a file where its folder goes, so its first entry cannot be
    // written (not for want of space: the parent is not parked, the model gets the failure).
    let parentId = ''
    const rt = await runtime({
      model: scriptedModel((r): ScriptedTurn => {
        if (r.directiveName !== 'parent') return hang()
        if (r.turn === 1) {
          const blocked = childThreadId('blocked', toolIdempotencyKey(parentId, 1, 'call_1_1'))
          fs.writeFileSync(path.join(rt.dir, 'threads', blocked), 'in the way')
          return { toolCalls: [{ name: 'spawn_thread', input: { name: 'blocked', prompt: 'b' } }] }
        }
        if (r.turn === 2) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'next', prompt: 'n' } }] }
        return { text: 'parent done' }
      }),
    })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spawns: 1 } })
    parentId = parent.id
    expect(await parent.done).toMatchObject({ status: 'completed' })
    const [blocked, next] = recordedToolResults(rt.dir, parent.id, 'spawn_thread')
    expect(blocked).toMatchObject({ ok: false })
    expect(next).toMatchObject({ ok: true, output: { existing: false } })
    expect(rt.list().filter((r) => r.parentId === parent.id).map((r) => r.id)).toEqual([next!.output.threadId])
    expect(ledgerChildren(rt.dir, parent.id)).toEqual([next!.output.threadId])
  })

  it('should free the slot a spawn killed half way left (its account, no registry row, no lease) when it is in the way', async () => {
    const rt = await runtime({ model: scriptedModel(hang) })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spawns: 1, spend: 1 } })
    // What a process killed between the reservation and the registry row leaves in ledger.db.
    const ledger = openSqliteLedger({ path: path.join(rt.dir, 'ledger.db'), durability: 'process' })
    ledger.reserve('ghost-aaaaaaaaaaaa', parent.id, { spend: 0.5, tokens: null }, Date.now(), { max: 1, known: [] })
    ledger.close()
    const child = await rt.spawn({ directive: { name: 'child', prompt: 'c' }, limits: { spend: 0.5 }, parentId: parent.id })
    expect(ledgerChildren(rt.dir, parent.id)).toEqual([child.id])
    await rt.cancel(parent.id)
  })
})

describe('a spawn_thread call run again while its child is being made', () => {
  it("should make the child once when a sibling's crash restarts the parent mid-spawn under one_for_all", async () => {
    // lead (one_for_all) has two permanent children: `parent`, which spawns `kid`, and `sibling`,
    // held in a tool whose input check throws once the test lets it. The test lets it while
    // parent's spawn_thread call is making kid: the supervisor restarts sibling and parent, whose
    // restarted run calls spawn_thread again with the same key.
    let letCrash!: () => void
    const crashLet = new Promise<void>((resolve) => (letCrash = resolve))
    let checks = 0
    const crasher = defineTool({
      name: 'crasher',
      description: 'crashes its thread once, when the test says',
      input: z.object({}).superRefine(async () => {
        if (checks++ > 0) return
        await crashLet
        throw new TypeError('sibling bug')
      }),
      idempotent: true,
      execute: () => 'ok',
    })
    let kidFirstTurns = 0
    const model = scriptedModel((r): ScriptedTurn => {
      switch (r.directiveName) {
        case 'parent':
          if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'k' } }] }
          if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: recordedIds(r) } }] }
          return { text: 'parent done' }
        case 'sibling':
          return r.turn === 1 ? { toolCalls: [{ name: 'crasher', input: {} }] } : { text: 'sibling done' }
        case 'kid':
          if (r.turn === 1) kidFirstTurns++
          return { text: 'kid done' }
        default:
          return hang()
      }
    })
    const restarted: string[] = []
    const rt = await runtime({
      model,
      tools: [crasher],
      inspect: (event) => {
        if (actorMade(event)?.startsWith('kid-')) letCrash()
      },
      onLifecycle: (e) => {
        if (e.type === 'thread_restarted') restarted.push(e.threadId)
      },
    })
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'l' }, childStrategy: 'one_for_all' })
    const sibling = await rt.spawn({ directive: { name: 'sibling', prompt: 's' }, parentId: lead.id, restart: 'permanent' })
    expect(await eventually(rt, () => checks === 1)).toBe(true)
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, parentId: lead.id, restart: 'permanent' })

    expect(await parent.done).toMatchObject({ status: 'completed', result: 'parent done' })
    expect(await sibling.done).toMatchObject({ status: 'completed', result: 'sibling done' })
    expect(restarted.sort()).toEqual([parent.id, sibling.id].sort())

    const kids = rt.list().filter((r) => r.parentId === parent.id)
    expect(kids.map((k) => k.directiveName)).toEqual(['kid'])
    const kid = kids[0]!
    expect(await rt.get(kid.id).done).toMatchObject({ status: 'completed', result: 'kid done' })
    expect(kidFirstTurns).toBe(1)
    const kidEntries = transcriptTypes(rt.dir, kid.id)
    expect(kidEntries.filter((t) => t === SPAWN_ENTRY)).toHaveLength(1)
    expect(kidEntries.filter((t) => t === 'START')).toHaveLength(1)
    // Both runs of the call were told of the same child.
    for (const result of recordedToolResults(rt.dir, parent.id, 'spawn_thread')) expect(result).toMatchObject({ ok: true, output: { threadId: kid.id } })
    await rt.cancel(lead.id)
    for (const id of [lead.id, parent.id, sibling.id, kid.id]) expect(verifyReplay(rt.dir, id)).toMatchObject({ matches: true })
  })
})

/** The child ids the parent's spawn_thread calls returned, from its conversation. */
function recordedIds(request: ModelRequest): string[] {
  return request.messages
    .filter((m) => m.role === 'tool' && m.toolName === 'spawn_thread')
    .map((m) => JSON.parse((m as { content: string }).content).threadId as string)
}
