import { describe, expect, it } from 'vitest'
import { HookSpecSchema } from '../../config/hookSchema.js'
import type { CodeHook, HookEvent, HookLayer, HookProblem, HookSet, HookSpec } from '../../src/policies/hooks.js'
import type { HookInput } from '../../src/policies/hookInput.js'
import { compileHooks } from '../../src/policies/hooks.js'

type Hook = HookSpec | CodeHook

/** A thread at `turn` completed turns, with everything else ordinary. */
function thread(over: Partial<HookInput['thread']> = {}): HookInput['thread'] {
  return {
    id: 't_1',
    directive: 'research',
    turn: 0,
    attempt: 1,
    depth: 0,
    state: '',
    cost: { turns: 0, inputTokens: 0, outputTokens: 0, tokens: 0, spend: 0 },
    limits: { turns: 20, tokens: null, spend: null, durationMs: null, spawns: 0, depth: 0 },
    ...over,
  }
}

function errorInput(category: string, turn: number, extra: Partial<NonNullable<HookInput['error']>> = {}): HookInput {
  return { thread: thread({ turn }), error: { category, message: 'boom', attempt: 1, retryInMs: 1000, ...extra } }
}

function limitInput(limit: NonNullable<HookInput['limit']>, over: Partial<HookInput['thread']> = {}): HookInput {
  return { thread: thread(over), limit }
}

/** Compiles one set (project layer unless told) and collects the problems it reports. */
function compile(hooks: Hook[], layer: HookLayer = 'project', source = 'project.yaml') {
  const problems: HookProblem[] = []
  const compiled = compileHooks([{ layer, source, hooks }], { onError: (problem) => problems.push(problem) })
  return { compiled, problems }
}

/** Whether `when` holds for `input` (on the event given), through a hook that fails when it does. */
async function holds(when: string, input: HookInput, event: HookEvent = 'error') {
  const { compiled, problems } = compile([{ id: 'h', event, when, action: 'fail' }])
  const decision = await compiled.decide(event, input)
  return { matched: decision.hookId === 'h', problems }
}

function compileError(sets: HookSet[]): Error & { code?: string; details?: Record<string, unknown> } {
  try {
    compileHooks(sets)
  } catch (error) {
    return error as Error
  }
  throw new Error('expected compileHooks to throw')
}

describe('policy hooks: deciding', () => {
  const lateRateLimit: HookSpec = {
    id: 'late-429',
    event: 'error',
    when: "error.category == 'rate_limited' && thread.turn > 3",
    action: 'retry',
  }

  it("should decide retry when error.category == 'rate_limited' && thread.turn > 3 holds, at turn 4", async () => {
    const { compiled } = compile([lateRateLimit])
    expect(await compiled.decide('error', errorInput('rate_limited', 4))).toEqual({
      action: 'retry',
      hookId: 'late-429',
      layer: 'project',
      source: 'project.yaml',
    })
  })

  it('should leave the default (continue, no hook) at turn 3 and for a transient error', async () => {
    const { compiled, problems } = compile([lateRateLimit])
    expect(await compiled.decide('error', errorInput('rate_limited', 3))).toEqual({ action: 'continue' })
    expect(await compiled.decide('error', errorInput('transient', 4))).toEqual({ action: 'continue' })
    expect(problems).toEqual([])
  })

  it('should only ask the hooks of the event being decided', async () => {
    const { compiled } = compile([{ id: 'always', event: 'after_step', action: 'abort' }])
    expect(await compiled.decide('error', errorInput('transient', 1))).toEqual({ action: 'continue' })
    expect(await compiled.decide('after_step', { thread: thread(), step: { turn: 1, toolCalls: 0 } })).toMatchObject({
      action: 'abort',
      hookId: 'always',
    })
  })

  it('should treat an absent when as always true', async () => {
    const { compiled } = compile([{ id: 'no-503s', event: 'error', action: 'fail', message: 'no retries here' }])
    expect(await compiled.decide('error', errorInput('transient', 0))).toMatchObject({ action: 'fail', hookId: 'no-503s', message: 'no retries here' })
  })

  it('should let a user-layer hook decide before a project-layer one, whatever order the sets come in', async () => {
    const hooks = compileHooks([
      { layer: 'infra', source: 'infra.yaml', hooks: [{ id: 'infra-fail', event: 'error', action: 'fail' }] },
      { layer: 'project', source: 'project.yaml', hooks: [{ id: 'project-fail', event: 'error', action: 'fail' }] },
      { layer: 'user', source: 'user.yaml', hooks: [{ id: 'user-retry', event: 'error', action: 'retry' }] },
      { layer: 'builtin', source: 'config/defaults.yaml', hooks: [{ id: 'builtin-abort', event: 'error', action: 'abort' }] },
    ])
    expect(await hooks.decide('error', errorInput('transient', 1))).toMatchObject({ action: 'retry', hookId: 'user-retry', layer: 'user', source: 'user.yaml' })
  })

  it('should rank the layers user, directive, builtin, project, infra', async () => {
    const ranked: HookLayer[] = ['user', 'directive', 'builtin', 'project', 'infra']
    const winners: string[] = []
    for (let drop = 0; drop < ranked.length; drop++) {
      // Sets given from the lowest precedence up, every hook always matching.
      const layers = ranked.slice(drop).reverse()
      const hooks = compileHooks(layers.map((layer) => ({ layer, source: `${layer}.yaml`, hooks: [{ id: layer, event: 'error' as const, action: 'fail' as const }] })))
      winners.push((await hooks.decide('error', errorInput('transient', 1))).hookId!)
    }
    expect(winners).toEqual(ranked)
  })

  it('should keep declaration order within a layer, across sets of that layer', async () => {
    const hooks = compileHooks([
      { layer: 'project', source: 'a.yaml', hooks: [{ id: 'first', event: 'error', when: 'thread.turn >= 1', action: 'retry' }, { id: 'second', event: 'error', action: 'fail' }] },
      { layer: 'project', source: 'b.yaml', hooks: [{ id: 'third', event: 'error', action: 'abort' }] },
    ])
    expect((await hooks.decide('error', errorInput('transient', 1))).hookId).toBe('first')
    expect((await hooks.decide('error', errorInput('transient', 0))).hookId).toBe('second')
  })

  it("should stop at the first match even when it says 'continue'", async () => {
    const { compiled } = compile([
      { id: 'let-it-be', event: 'error', when: "error.category == 'transient'", action: 'continue' },
      { id: 'fail-all', event: 'error', action: 'fail' },
    ])
    expect(await compiled.decide('error', errorInput('transient', 1))).toEqual({
      action: 'continue',
      hookId: 'let-it-be',
      layer: 'project',
      source: 'project.yaml',
    })
    expect(await compiled.decide('error', errorInput('quota', 1))).toMatchObject({ action: 'fail', hookId: 'fail-all' })
  })

  it('should pass a limits payload through, for a retry on a limit event', async () => {
    const { compiled } = compile([
      { id: 'cheap-turns', event: 'limit', when: "limit.name == 'turns' && thread.cost.spend < 1.0", action: 'retry', limits: { turns: 40, spend: null } },
    ])
    const input = limitInput({ name: 'turns', used: 20, max: 20, proposed: 40 }, { cost: { turns: 20, inputTokens: 0, outputTokens: 0, tokens: 0, spend: 0.25 } })
    expect(await compiled.decide('limit', input)).toEqual({
      action: 'retry',
      hookId: 'cheap-turns',
      layer: 'project',
      source: 'project.yaml',
      limits: { turns: 40, spend: null },
    })
  })

  it('should say whether any hook listens to an event', () => {
    const { compiled } = compile([
      { id: 'a', event: 'error', action: 'fail' },
      { id: 'b', event: 'limit', action: 'continue' },
    ])
    expect(compiled.has('error')).toBe(true)
    expect(compiled.has('limit')).toBe(true)
    expect(compiled.has('after_step')).toBe(false)
    expect(compileHooks([]).has('error')).toBe(false)
    expect(compiled.size).toBe(2)
  })

  it('should add sets with with(), leaving the original untouched, and rank them by layer', async () => {
    const runtimeWide = compileHooks([{ layer: 'project', source: 'project.yaml', hooks: [{ id: 'project-fail', event: 'error', action: 'fail' }] }])
    const perThread = runtimeWide.with([{ layer: 'directive', source: 'directive "research"', hooks: [{ id: 'directive-retry', event: 'error', action: 'retry' }] }])
    expect((await perThread.decide('error', errorInput('transient', 1))).hookId).toBe('directive-retry')
    expect((await runtimeWide.decide('error', errorInput('transient', 1))).hookId).toBe('project-fail')
    expect(perThread.has('after_step')).toBe(false)
    expect(runtimeWide.with([]).size).toBe(1)
    expect(perThread.size).toBe(2)
  })

  it('should keep reporting through the original onError after with()', async () => {
    const problems: HookProblem[] = []
    const base = compileHooks([], { onError: (p) => problems.push(p) })
    const more = base.with([{ layer: 'directive', source: 'directive "x"', hooks: [{ id: 'bad', event: 'error', when: "limit.name == 'turns'", action: 'fail' }] }])
    expect(await more.decide('error', errorInput('transient', 1))).toEqual({ action: 'continue' })
    expect(problems).toHaveLength(1)
    expect(problems[0]).toMatchObject({ hookId: 'bad', source: 'directive "x"', event: 'error' })
  })
})

describe('policy hooks: numbers and nulls in conditions', () => {
  const at = (turn: number, spend: number, limits: Partial<HookInput['thread']['limits']> = {}): HookInput => ({
    thread: thread({
      turn,
      cost: { turns: turn, inputTokens: 1200, outputTokens: 300, tokens: 1500, spend },
      limits: { ...thread().limits, ...limits },
    }),
    error: { category: 'rate_limited', message: '429 Too Many Requests', status: 429, attempt: 2, retryInMs: 2000 },
  })

  // at(turn, spend, limits): a rate-limited error (status 429) at that turn and spend.
  it.each([
    { when: 'thread.turn > 3', input: at(4, 0), expected: true },
    { when: 'thread.turn > 3', input: at(3, 0), expected: false },
    { when: 'thread.turn > 3.0', input: at(4, 0), expected: true },
    { when: 'thread.turn >= 3.5', input: at(3, 0), expected: false },
    { when: 'thread.turn == 4', input: at(4, 0), expected: true },
    { when: 'thread.turn == 4.0', input: at(4, 0), expected: true },
    { when: 'thread.turn != 4.0', input: at(4, 0), expected: false },
    { when: 'thread.turn + 1 == 5', input: at(4, 0), expected: true },
    { when: 'thread.cost.spend > 2.0', input: at(0, 2), expected: false },
    { when: 'thread.cost.spend > 2.0', input: at(0, 2.5), expected: true },
    { when: 'thread.cost.spend >= 2', input: at(0, 2), expected: true },
    { when: 'thread.cost.spend >= 2', input: at(0, 1.99), expected: false },
    { when: 'thread.cost.spend == 2', input: at(0, 2), expected: true },
    { when: 'thread.cost.spend == 2', input: at(0, 2.5), expected: false },
    { when: 'thread.cost.spend * 2.0 > 4.5', input: at(0, 2.5), expected: true },
    { when: 'thread.cost.tokens >= 1500 && thread.cost.inputTokens > thread.cost.outputTokens', input: at(0, 0), expected: true },
    { when: 'error.status == 429', input: at(0, 0), expected: true },
    { when: 'error.status == 429.0', input: at(0, 0), expected: true },
    { when: 'error.status in [429, 503]', input: at(0, 0), expected: true },
    { when: 'error.attempt >= 2 && error.retryInMs <= 2000', input: at(0, 0), expected: true },
    { when: 'thread.limits.spend == null', input: at(0, 0), expected: true },
    { when: 'thread.limits.spend == null', input: at(0, 0, { spend: 5 }), expected: false },
    { when: 'thread.limits.turns == 20', input: at(0, 0), expected: true },
    { when: 'thread.limits.turns > 19.5', input: at(0, 0), expected: true },
    { when: 'thread.limits.spend != null && thread.cost.spend > thread.limits.spend * 0.8', input: at(0, 4.5, { spend: 5 }), expected: true },
    { when: 'thread.limits.spend != null && thread.cost.spend > thread.limits.spend * 0.8', input: at(0, 4.5), expected: false },
    { when: 'thread.limits.tokens == null || thread.cost.tokens < thread.limits.tokens', input: at(0, 0), expected: true },
  ])('$when is $expected', async ({ when, input, expected }) => {
    const { matched, problems } = await holds(when, input)
    expect(problems).toEqual([])
    expect(matched).toBe(expected)
  })

  it('should see a missing error status as null', async () => {
    const input = errorInput('transient', 1)
    expect((await holds('error.status == null', input)).matched).toBe(true)
    expect((await holds('error.code == null', input)).matched).toBe(true)
    expect(await holds('error.status == 429', input)).toEqual({ matched: false, problems: [] })
  })

  it('should compare limit values, which are doubles, with int and double literals', async () => {
    const input = limitInput({ name: 'turns', used: 20, max: 20, proposed: null })
    expect((await holds('limit.used >= limit.max && limit.max == 20 && limit.max < 20.5', input, 'limit')).matched).toBe(true)
    expect((await holds('limit.proposed == null', input, 'limit')).matched).toBe(true)
    expect((await holds("limit.name == 'spend' && limit.max > 1.5", limitInput({ name: 'spend', used: 2.1, max: 2, proposed: 4 }), 'limit')).matched).toBe(true)
  })

  it('should give pressure, step and outcome their values', async () => {
    expect((await holds('pressure.ratio >= 0.8 && pressure.promptTokens > 100000', { thread: thread(), pressure: { ratio: 0.85, promptTokens: 108800, contextWindow: 128000 } }, 'context_window_pressure')).matched).toBe(true)
    expect((await holds('step.turn >= 2 && step.toolCalls == 0', { thread: thread(), step: { turn: 2, toolCalls: 0 } }, 'after_step')).matched).toBe(true)
    expect((await holds("outcome.status == 'completed' && outcome.result.contains('42')", { thread: thread(), outcome: { status: 'completed', result: 'X is 42' } }, 'after_complete')).matched).toBe(true)
    expect((await holds('outcome.result == null', { thread: thread(), outcome: { status: 'error', result: null } }, 'after_complete')).matched).toBe(true)
  })
})

describe('policy hooks: compile-time errors', () => {
  it('should refuse an invalid expression, naming the source, the hook, the expression and the position', () => {
    const error = compileError([{ layer: 'project', source: '/srv/app/.spindle/config.yaml', hooks: [{ id: 'broken', event: 'error', when: 'error.category ==', action: 'fail' }] }])
    expect(error).toMatchObject({ code: 'CONFIG_INVALID' })
    expect(error.message).toContain('/srv/app/.spindle/config.yaml')
    expect(error.message).toContain('"broken"')
    expect(error.message).toContain('error.category ==')
    expect(error.message).toMatch(/not valid CEL: .*\(at column 18\)/)
    expect(error.details).toMatchObject({ source: '/srv/app/.spindle/config.yaml', hookId: 'broken', expression: 'error.category ==', start: 17 })
  })

  it('should give the line and column of an error in a multi-line expression', () => {
    const error = compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'ml', event: 'error', when: "error.category == 'quota'\n  && thread.turn >", action: 'fail' }] }])
    expect(error.message).toMatch(/at line 2, column \d+/)
  })

  it('should refuse a variable that is not declared, listing those that are', () => {
    const error = compileError([{ layer: 'user', source: 'user.yaml', hooks: [{ id: 'typo', event: 'error', when: "err.category == 'quota'", action: 'fail' }] }])
    expect(error).toMatchObject({ code: 'CONFIG_INVALID' })
    expect(error.message).toContain('Unknown variable: err')
    expect(error.message).toContain('Known variables: thread, error, limit, pressure, step, outcome')
  })

  it('should refuse a field that does not exist, listing those that do', () => {
    const error = compileError([{ layer: 'user', source: 'user.yaml', hooks: [{ id: 'typo', event: 'limit', when: 'thread.cost.spnd > 1.0', action: 'fail' }] }])
    expect(error.message).toContain('No such key: spnd')
    expect(error.message).toContain('thread.cost has: turns, inputTokens, outputTokens, tokens, spend')
  })

  it('should refuse a condition that is not a bool, and a type error', () => {
    expect(compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'n', event: 'error', when: 'thread.turn + 1', action: 'fail' }] }]).message).toContain(
      'gives int, not a bool',
    )
    expect(compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 't', event: 'error', when: "thread.turn > 'three'", action: 'fail' }] }]).message).toContain(
      'no such overload',
    )
    // Arithmetic mixing int and double is caught here, not at the first rate limit.
    expect(compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'm', event: 'error', when: 'thread.cost.spend * 2 > 3.0', action: 'fail' }] }]).message).toContain(
      'double * int',
    )
  })

  it('should refuse an unknown event or action and a duplicate id within one source', () => {
    const badEvent = compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'x', event: 'on_error', action: 'fail' } as unknown as HookSpec] }])
    expect(badEvent).toMatchObject({ code: 'CONFIG_INVALID' })
    expect(badEvent.message).toMatch(/^p\.yaml: hook "x": event: must be one of error, limit, .* \(got "on_error"\)/)
    const badAction = compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'x', event: 'error', action: 'explode' } as unknown as HookSpec] }])
    expect(badAction.message).toContain('action: must be one of retry, fail, abort, continue, approve, deny (got "explode")')
    const duplicate = compileError([
      {
        layer: 'project',
        source: 'p.yaml',
        hooks: [
          { id: 'same', event: 'error', action: 'fail' },
          { id: 'same', event: 'limit', action: 'fail' },
        ],
      },
    ])
    expect(duplicate).toMatchObject({ code: 'CONFIG_INVALID', message: expect.stringContaining('p.yaml: hook "same"') })
    expect(duplicate.message).toContain('same id')
    // The same id in two sources is fine.
    expect(() =>
      compileHooks([
        { layer: 'project', source: 'a.yaml', hooks: [{ id: 'same', event: 'error', action: 'fail' }] },
        { layer: 'user', source: 'b.yaml', hooks: [{ id: 'same', event: 'error', action: 'fail' }] },
      ]),
    ).not.toThrow()
  })

  it('should refuse unknown keys, a missing id and limits on anything but a retry on a limit', () => {
    expect(compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'x', event: 'error', action: 'fail', wen: 'true' } as unknown as HookSpec] }]).message).toContain('wen')
    expect(compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ event: 'error', action: 'fail' } as unknown as HookSpec] }]).message).toMatch(/^p\.yaml: hook #1: id:/)
    expect(compileError([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'x', event: 'error', action: 'fail', limits: { turns: 3 } }] }]).message).toContain(
      'limits only apply to action retry on event limit',
    )
  })

  it('should check code hooks by hand, with INVALID_OPTIONS', () => {
    const set = (hook: unknown): HookSet[] => [{ layer: 'project', source: 'createRuntime options.hooks', hooks: [hook as CodeHook] }]
    expect(compileError(set({ id: 'c', event: 'error', handler: 'retry' }))).toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('handler must be a function') })
    expect(compileError(set({ id: 'c', event: 'oops', handler: () => 'retry' })).message).toContain('event must be one of')
    expect(compileError(set({ id: '', event: 'error', handler: () => 'retry' })).message).toContain('id must be a non-empty string')
    expect(compileError(set({ id: 'c', event: 'error', action: 'fail', handler: () => 'retry' })).message).toContain('(got action)')
    const badWhen = compileError(set({ id: 'c', event: 'error', when: 'thread.turn >', handler: () => 'retry' }))
    expect(badWhen).toMatchObject({ code: 'INVALID_OPTIONS' })
    expect(badWhen.message).toContain('createRuntime options.hooks: hook "c": when `thread.turn >` is not valid CEL')
  })

  it('should refuse an unknown layer', () => {
    expect(compileError([{ layer: 'team' as HookLayer, source: 'x', hooks: [] }])).toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('unknown hook layer "team"') })
  })

  it('should check the sets added by with() just as compileHooks does', () => {
    const base = compileHooks([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'a', event: 'error', action: 'fail' }] }])
    expect(() => base.with([{ layer: 'directive', source: 'directive "d"', hooks: [{ id: 'b', event: 'error', when: 'nope', action: 'fail' }] }])).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringContaining('directive "d": hook "b"') }),
    )
    expect(() => base.with([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'a', event: 'limit', action: 'fail' }] }])).toThrow(
      expect.objectContaining({ message: expect.stringContaining('same id') }),
    )
  })

  it('should accept in the config schema what compileHooks accepts as data', () => {
    expect(HookSpecSchema.safeParse({ id: 'raise', event: 'limit', when: "limit.name == 'turns'", action: 'retry', limits: { turns: 50 } }).success).toBe(true)
    expect(HookSpecSchema.safeParse({ id: 'raise', event: 'limit', action: 'retry', limits: { turns: -1 } }).success).toBe(false)
  })
})

describe('policy hooks: failures at evaluation time', () => {
  it('should report a condition about a key the event lacks, and not match', async () => {
    const { compiled, problems } = compile([
      { id: 'wrong-event', event: 'error', when: "limit.name == 'turns'", action: 'fail' },
      { id: 'fallback', event: 'error', action: 'retry' },
    ])
    expect(await compiled.decide('error', errorInput('transient', 1))).toMatchObject({ action: 'retry', hookId: 'fallback' })
    expect(problems).toEqual([
      {
        hookId: 'wrong-event',
        source: 'project.yaml',
        event: 'error',
        message: expect.stringMatching(/when `limit.name == 'turns'` could not be evaluated: No such key: name \(at column \d+\)/),
      },
    ])
  })

  it('should report a type error at evaluation (a null limit in arithmetic), and not match', async () => {
    const { matched, problems } = await holds('thread.cost.spend > thread.limits.spend * 0.8', errorInput('transient', 1))
    expect(matched).toBe(false)
    expect(problems).toHaveLength(1)
    expect(problems[0]!.message).toContain('no such overload')
  })

  it('should not match and report a value of the wrong type in the input', async () => {
    const input = { thread: { ...thread(), turn: 'four' } } as unknown as HookInput
    const { matched, problems } = await holds('thread.turn > 3', input, 'after_step')
    expect(matched).toBe(false)
    expect(problems[0]!.message).toContain("Field 'turn' is not of type 'int'")
  })

  it('should report a dyn condition that gives something other than a bool, and not match', async () => {
    const { matched, problems } = await holds('outcome.result', { thread: thread(), outcome: { status: 'completed', result: 'yes' } }, 'after_complete')
    expect(matched).toBe(false)
    expect(problems[0]!.message).toContain('gave string "yes", not true or false')
  })

  it('should never reject, even when onError throws', async () => {
    const hooks = compileHooks([{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'x', event: 'error', when: "limit.name == 'x'", action: 'fail' }] }], {
      onError: () => {
        throw new Error('reporter down')
      },
    })
    await expect(hooks.decide('error', errorInput('transient', 1))).resolves.toEqual({ action: 'continue' })
  })
})

describe('policy hooks: handlers in code', () => {
  it('should let a sync handler decide, with a message', async () => {
    const seen: HookInput[] = []
    const { compiled } = compile([
      {
        id: 'sync',
        event: 'error',
        handler: (input) => {
          seen.push(input)
          return input.error?.status === 429 ? { action: 'fail', message: 'no waiting' } : 'continue'
        },
      },
    ])
    const input = errorInput('rate_limited', 2, { status: 429 })
    expect(await compiled.decide('error', input)).toEqual({ action: 'fail', hookId: 'sync', layer: 'project', source: 'project.yaml', message: 'no waiting' })
    // The handler sees the input as given (plain numbers, not CEL ints).
    expect(seen[0]).toBe(input)
  })

  it('should let an async handler decide, after its when holds', async () => {
    const { compiled } = compile([
      {
        id: 'async',
        event: 'limit',
        when: "limit.name == 'spend'",
        handler: async (input) => {
          await new Promise((resolve) => setTimeout(resolve, 1))
          return { action: 'retry', limits: { spend: (input.limit?.max ?? 0) + 1 } }
        },
      },
    ])
    expect(await compiled.decide('limit', limitInput({ name: 'spend', used: 2.5, max: 2, proposed: 4 }))).toMatchObject({
      action: 'retry',
      hookId: 'async',
      limits: { spend: 3 },
    })
    expect(await compiled.decide('limit', limitInput({ name: 'turns', used: 20, max: 20, proposed: 40 }))).toEqual({ action: 'continue' })
  })

  it('should report a handler that throws (sync or async) and apply the default', async () => {
    const { compiled, problems } = compile([
      {
        id: 'throws',
        event: 'error',
        when: "error.category == 'quota'",
        handler: () => {
          throw new Error('handler bug')
        },
      },
      { id: 'rejects', event: 'error', when: "error.category == 'transient'", handler: async () => Promise.reject(new Error('async bug')) },
      { id: 'later', event: 'error', action: 'fail' },
    ])
    expect(await compiled.decide('error', errorInput('quota', 1))).toMatchObject({ action: 'continue', hookId: 'throws' })
    expect(await compiled.decide('error', errorInput('transient', 1))).toMatchObject({ action: 'continue', hookId: 'rejects' })
    expect(problems.map((p) => [p.hookId, p.message])).toEqual([
      ['throws', expect.stringContaining('handler threw: handler bug')],
      ['rejects', expect.stringContaining('handler threw: async bug')],
    ])
  })

  it('should report a handler that returns something that is not a decision, and apply the default', async () => {
    const { compiled, problems } = compile([{ id: 'odd', event: 'error', handler: () => ({ action: 'retry-later' }) as never }])
    expect(await compiled.decide('error', errorInput('transient', 1))).toMatchObject({ action: 'continue', hookId: 'odd' })
    expect(problems[0]!.message).toContain('handler returned {"action":"retry-later"}')
  })

  it('should mix code and data hooks in one set, in declaration order', async () => {
    const { compiled } = compile([
      { id: 'data', event: 'error', when: 'thread.turn > 5', action: 'fail' },
      { id: 'code', event: 'error', handler: () => 'abort' },
    ])
    expect((await compiled.decide('error', errorInput('transient', 6))).hookId).toBe('data')
    expect((await compiled.decide('error', errorInput('transient', 1))).hookId).toBe('code')
  })
})
