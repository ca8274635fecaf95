/**
 * The crash-loop guard's probation, driven step by step on a real registry file: which suspects
 * run alone, in what order, what each has counted before it runs, and when everyone else may run.
 * (test/crash/crashLoop.test.ts drives the same guard through real processes killed for real.)
 */
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import type { ThreadContext } from '../../machines/threadContext.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { Registry } from '../../persistence/types.js'
import { CrashLoopGuard, MODEL_SUSPECTS_ALONE } from '../../src/runtime/crashLoop.js'
import { tempDir } from '../helpers/dirs.js'

const SEQ = 5
const CALLING_MODEL = { value: { running: 'callingModel' }, context: { toolCalls: [], toolsDone: [] } as unknown as ThreadContext }
const RUNNING_TOOL = {
  value: { running: 'runningTools' },
  context: { toolCalls: [{ id: 'c1', name: 'explode', input: {} }], toolsDone: [] } as unknown as ThreadContext,
}

const opened: Registry[] = []
afterEach(() => {
  while (opened.length) opened.pop()!.close()
})

/** A registry whose threads `ids` each stand at SEQ with the given count already recorded. */
function registryWith(counts: Record<string, number>): Registry {
  const registry = openSqliteRegistry({ path: path.join(tempDir('spindle-guard'), 'registry.db'), durability: 'process' })
  opened.push(registry)
  for (const id of Object.keys(counts)) registry.register({ id, directiveName: id.split('-')[0]!, directive: {}, nonce: 'n', createdAt: 1 })
  registry.setRecoveryCounts(Object.entries(counts).map(([id, count]) => ({ id, count, seq: SEQ })))
  return registry
}

/** Whether `promise` has settled once the microtasks queued so far have run. */
async function settled(promise: Promise<void> | undefined): Promise<boolean> {
  if (promise === undefined) return true
  let done = false
  void promise.then(() => (done = true))
  for (let i = 0; i < 10; i++) await null
  return done
}

const id = (name: string) => `${name}-aaaaaaaaaaaa`

describe('crash-loop probation', () => {
  it(`should run alone only the ${MODEL_SUSPECTS_ALONE} model-call suspects with the highest counts, in recovery's order, and the others with everyone, uncounted`, async () => {
    // m0…m5 were found in the same model call once before; m5 twice. A bystander b is found further on.
    const models = ['m0', 'm1', 'm2', 'm3', 'm4', 'm5'].map(id)
    const registry = registryWith({ ...Object.fromEntries(models.map((m) => [m, 1])), [id('m5')]: 2, [id('b')]: 0 })
    const guard = new CrashLoopGuard(registry, 3, (error) => {
      throw error
    })
    guard.begin()
    for (const m of models) expect(guard.assess(m, CALLING_MODEL, [], SEQ)).toEqual({ action: 'hold' })
    expect(guard.assess(id('b'), CALLING_MODEL, [], SEQ + 1)).toEqual({ action: 'run' })
    const turns = new Map([...models, id('b')].map((m) => [m, guard.waitTurn(m)]))
    guard.flush()

    // Alone: m5 (the highest count) and the first three found; in the order recovery found them.
    const alone = [id('m0'), id('m1'), id('m2'), id('m5')]
    expect(alone).toHaveLength(MODEL_SUSPECTS_ALONE)
    for (const [index, suspect] of alone.entries()) {
      // It may run, and those before it; nobody else, the bystander included.
      for (const [m, turn] of turns) expect(await settled(turn), `${m} while ${suspect} runs alone`).toBe(alone.includes(m) && alone.indexOf(m) <= index)
      // Counted just before it runs: had the process died now, the next recovery would know.
      expect(registry.recoveryCount(suspect)?.count).toBe(suspect === id('m5') ? 2 : 1)
      guard.starting(suspect)
      expect(registry.recoveryCount(suspect)).toEqual({ count: suspect === id('m5') ? 3 : 2, seq: SEQ })
      guard.progressed(suspect)
      await null
    }
    // The probation is over: the others and the bystander run; m3 and m4 were not counted.
    for (const [m, turn] of turns) expect(await settled(turn), m).toBe(true)
    expect(registry.recoveryCount(id('m3'))).toEqual({ count: 1, seq: SEQ })
    expect(registry.recoveryCount(id('m4'))).toEqual({ count: 1, seq: SEQ })
    expect(registry.recoveryCount(id('b'))).toEqual({ count: 1, seq: SEQ + 1 })
    expect(guard.waitTurn(id('m3'))).toBeUndefined()
  })

  it('should run every tool suspect alone, however many, and quarantine one past the limit without running it', async () => {
    const tools = ['t0', 't1', 't2', 't3', 't4', 't5'].map(id)
    const registry = registryWith({ ...Object.fromEntries(tools.map((t) => [t, 1])), [id('t5')]: 3 })
    const guard = new CrashLoopGuard(registry, 3, (error) => {
      throw error
    })
    guard.begin()
    for (const t of tools.slice(0, 5)) expect(guard.assess(t, RUNNING_TOOL, [], SEQ)).toEqual({ action: 'hold' })
    expect(guard.assess(id('t5'), RUNNING_TOOL, [], SEQ)).toMatchObject({ action: 'quarantine', recoveries: 4, seq: SEQ, message: expect.stringContaining('running the tool "explode"') })
    const turns = tools.slice(0, 5).map((t) => guard.waitTurn(t))
    guard.flush()
    expect(registry.recoveryCount(id('t5'))).toEqual({ count: 4, seq: SEQ })
    for (let i = 0; i < 5; i++) {
      expect(await Promise.all(turns.map((turn) => settled(turn)))).toEqual(turns.map((_, j) => j <= i))
      guard.starting(tools[i]!)
      guard.progressed(tools[i]!)
      await null
    }
  })

  it('should end the probation when a suspect runs alone for aloneMs without a step: everyone runs, the suspects still waiting uncounted', async () => {
    // t0 and t1 were found in the same tool call once before; b is a bystander found further on.
    const registry = registryWith({ [id('t0')]: 1, [id('t1')]: 1, [id('b')]: 0 })
    const timers: Array<{ fn: () => void; ms: number; cleared: boolean }> = []
    const clock = {
      now: () => 0,
      setTimeout: (fn: () => void, ms: number) => timers.push({ fn, ms, cleared: false }) - 1,
      clearTimeout: (handle: unknown) => void (timers[handle as number]!.cleared = true),
    }
    const problems: Array<{ code: string; details: unknown }> = []
    const guard = new CrashLoopGuard(registry, 3, (error) => void problems.push(error as { code: string; details: unknown }), { ms: 60_000, clock })
    guard.begin()
    for (const t of [id('t0'), id('t1')]) expect(guard.assess(t, RUNNING_TOOL, [], SEQ)).toEqual({ action: 'hold' })
    expect(guard.assess(id('b'), RUNNING_TOOL, [], SEQ + 1)).toEqual({ action: 'run' })
    const turns = [id('t0'), id('t1'), id('b')].map((t) => guard.waitTurn(t))
    guard.flush()
    expect(await Promise.all(turns.map(settled))).toEqual([true, false, false])
    guard.starting(id('t0'))
    expect(registry.recoveryCount(id('t0'))).toEqual({ count: 2, seq: SEQ })

    // The fault: t0's tool never returns. Its time alone runs out.
    expect(timers).toHaveLength(1)
    expect(timers[0]).toMatchObject({ ms: 60_000, cleared: false })
    timers[0]!.fn()

    // After: everyone runs; t0 keeps its count, t1 is not counted, b's count is written.
    expect(await Promise.all(turns.map(settled))).toEqual([true, true, true])
    expect(guard.waitTurn(id('t1'))).toBeUndefined()
    expect(registry.recoveryCount(id('t0'))).toEqual({ count: 2, seq: SEQ })
    expect(registry.recoveryCount(id('t1'))).toEqual({ count: 1, seq: SEQ })
    expect(registry.recoveryCount(id('b'))).toEqual({ count: 1, seq: SEQ + 1 })
    expect(problems).toEqual([expect.objectContaining({ code: 'CRASH_LOOP_PROBATION_ENDED', details: { threadId: id('t0'), aloneMs: 60_000, uncounted: [id('t1')] } })])
    // A step after the probation ended changes nothing.
    guard.progressed(id('t0'))
    expect(registry.recoveryCount(id('t1'))).toEqual({ count: 1, seq: SEQ })
  })

  it("should stop a suspect's alone timer once it takes a step, and arm the next suspect's", async () => {
    const registry = registryWith({ [id('t0')]: 1, [id('t1')]: 1 })
    const timers: Array<{ fn: () => void; cleared: boolean }> = []
    const clock = {
      now: () => 0,
      setTimeout: (fn: () => void) => timers.push({ fn, cleared: false }) - 1,
      clearTimeout: (handle: unknown) => void (timers[handle as number]!.cleared = true),
    }
    const guard = new CrashLoopGuard(registry, 3, (error) => {
      throw error
    }, { ms: 60_000, clock })
    guard.begin()
    for (const t of [id('t0'), id('t1')]) guard.assess(t, RUNNING_TOOL, [], SEQ)
    const turns = [id('t0'), id('t1')].map((t) => guard.waitTurn(t))
    guard.flush()
    expect(await Promise.all(turns.map(settled))).toEqual([true, false])
    guard.starting(id('t0'))
    guard.progressed(id('t0'))
    await null
    expect(timers.map((t) => t.cleared)).toEqual([true, false])
    expect(await settled(turns[1])).toBe(true)
    guard.close()
    expect(timers.map((t) => t.cleared)).toEqual([true, true])
  })

  it('should let a waiting thread that stopped or was cancelled go at once, a suspect uncounted, while the first suspect still runs alone', async () => {
    // t0 runs alone; t1 and t2 wait their turn. t1 is cancelled with children to settle, t2 stops.
    const registry = registryWith({ [id('t0')]: 1, [id('t1')]: 1, [id('t2')]: 1 })
    const guard = new CrashLoopGuard(registry, 3, (error) => {
      throw error
    })
    guard.begin()
    for (const t of [id('t0'), id('t1'), id('t2')]) guard.assess(t, RUNNING_TOOL, [], SEQ)
    const turns = [id('t0'), id('t1'), id('t2')].map((t) => guard.waitTurn(t))
    guard.flush()
    expect(await Promise.all(turns.map(settled))).toEqual([true, false, false])

    guard.progressed(id('t1'), 'cancelling')
    guard.stopped(id('t2'))

    // Both are let go before t0 takes a step, and what t1 runs next (settling its children) waits for nobody.
    expect(await Promise.all(turns.map(settled))).toEqual([true, true, true])
    expect(guard.waitTurn(id('t1'))).toBeDefined()
    expect(await settled(guard.waitTurn(id('t1')))).toBe(true)
    // t0 alone is still on probation: an ordinary thread's effect waits, until that thread is cancelled.
    const bystander = guard.waitTurn(id('b'))
    expect(await settled(bystander)).toBe(false)
    guard.progressed(id('b'), 'cancelling')
    expect(await settled(bystander)).toBe(true)
    // Neither was counted: a death from now on is no evidence against them.
    expect(registry.recoveryCount(id('t1'))).toEqual({ count: 1, seq: SEQ })
    expect(registry.recoveryCount(id('t2'))).toEqual({ count: 1, seq: SEQ })
    guard.close()
  })
})
