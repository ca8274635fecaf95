/**
 * Hook conditions written by a careless or hostile config author: what must be refused when the
 * hooks load (naming the source and the hook), and what an evaluation failure does at run time.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import type { HookInput } from '../../src/policies/hookInput.js'
import type { HookProblem, HookSpec } from '../../src/policies/hooks.js'
import { compileHooks } from '../../src/policies/hooks.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import type { Problem } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'

function thread(): HookInput['thread'] {
  return {
    id: 't_1',
    directive: 'research',
    turn: 1,
    attempt: 1,
    depth: 0,
    state: '',
    cost: { turns: 1, inputTokens: 0, outputTokens: 0, tokens: 0, spend: 0 },
    limits: { turns: 20, tokens: null, spend: null, durationMs: null, spawns: null, depth: 5 },
  }
}

/** The error compileHooks throws for one hook `h` with this condition, from source hostile.yaml. */
function refusal(when: string, event: HookSpec['event'] = 'error'): Error & { code?: string; details?: Record<string, unknown> } {
  try {
    compileHooks([{ layer: 'user', source: 'hostile.yaml', hooks: [{ id: 'h', event, when, action: 'fail' }] }])
  } catch (error) {
    return error as Error
  }
  throw new Error(`expected the condition to be refused: ${when.slice(0, 80)}`)
}

describe('hook conditions: refused when the hooks load', () => {
  it('should refuse matches() with a pattern that backtracks exponentially, naming the source and the hook', () => {
    // Against an error message of 30 "a"s and a "!", this pattern takes minutes and blocks the process.
    const error = refusal("error.message.matches('^(a+)+$')")
    expect(error).toMatchObject({ code: 'CONFIG_INVALID', details: { source: 'hostile.yaml', hookId: 'h', layer: 'user' } })
    expect(error.message).toMatch(/^hostile\.yaml: hook "h": when `.*` calls matches\(\) \(at column \d+\) with the pattern "\^\(a\+\)\+\$", which repeats `a\+` inside another repetition/)
  })

  it('should refuse matches() with two repetitions that trade the same characters', () => {
    // Against 1000 ":" this pattern took 0.85 s; against a 16 KiB message, hours.
    const error = refusal("error.message.matches('.+:.+x')")
    expect(error).toMatchObject({ code: 'CONFIG_INVALID', details: { hookId: 'h' } })
    expect(error.message).toContain('has two repetitions, `.+` and `.+`, that can both match a long run of ":", which can take polynomial time')
  })

  it('should refuse matches() with a backreference', () => {
    expect(refusal("error.message.matches('(a*)b\\\\1')").message).toContain('backreference')
  })

  it('should refuse matches() whose pattern is not a string literal, since it cannot be checked', () => {
    // The pattern would come from the thread's data at every event, unchecked.
    expect(refusal('error.message.matches(thread.directive)').message).toContain('not a string literal')
  })

  it('should refuse an invalid regular expression in matches() at load, not at every evaluation', () => {
    expect(refusal("error.message.matches('(unclosed')").message).toContain('is not a valid regular expression')
  })

  it('should still accept a plain matches() pattern and use it', async () => {
    const compiled = compileHooks([{ layer: 'user', source: 'ok.yaml', hooks: [{ id: 'h', event: 'error', when: "error.message.matches('^over(loaded)?[0-9]+$')", action: 'fail' }] }])
    const input: HookInput = { thread: thread(), error: { category: 'transient', message: 'overloaded42', attempt: 1, retryInMs: 0 } }
    expect(await compiled.decide('error', input)).toMatchObject({ action: 'fail', hookId: 'h' })
  })

  it('should refuse a loop macro inside another, which would take minutes at every event', () => {
    // Lists of up to 1000 elements fit in a condition, or come from split(): 1000³ steps.
    const error = refusal("error.message.split('').all(a, error.message.split('').all(b, error.message.split('').all(c, c != '')))")
    expect(error).toMatchObject({ code: 'CONFIG_INVALID', details: { hookId: 'h' } })
    expect(error.message).toContain('inside another loop macro')
  })

  it('should refuse deep nesting with a clear message, not a stack overflow', () => {
    const unary = refusal(`${'!'.repeat(3000)}true`)
    expect(unary.message).toMatch(/nested/)
    expect(unary.message).not.toMatch(/call stack/i)
    const chain = refusal(Array.from({ length: 150 }, () => 'thread.turn > 0').join(' && '))
    expect(chain.message).toMatch(/nested more than \d+ levels/)
    expect(chain.message).not.toMatch(/call stack/i)
  })

  it('should refuse a condition longer than the maximum, naming its length', () => {
    const error = refusal(`thread.directive != '${'x'.repeat(10_000)}'`)
    expect(error).toMatchObject({ code: 'CONFIG_INVALID', details: { hookId: 'h', source: 'hostile.yaml' } })
    expect(error.message).toMatch(/is 10\d\d\d characters long; a condition may have at most \d+/)
    // The whole expression is not repeated in the message.
    expect(error.message.length).toBeLessThan(500)
  })

  it('should refuse prototype and constructor access, which CEL has no notion of', () => {
    for (const when of ['thread.__proto__ == null', 'thread.constructor == null', "thread.id.toString == ''", 'process == null', 'globalThis == null']) {
      expect(refusal(when)).toMatchObject({ code: 'CONFIG_INVALID', details: { hookId: 'h' } })
    }
  })
})

describe('hook conditions: data from the thread', () => {
  it('should keep a "__proto__" key of an outcome result as a key, not as a prototype', async () => {
    const problems: HookProblem[] = []
    const compiled = compileHooks(
      [{ layer: 'project', source: 'p.yaml', hooks: [{ id: 'proto-key', event: 'after_complete', when: "'__proto__' in outcome.result", action: 'fail' }] }],
      { onError: (p) => problems.push(p) },
    )
    const result = JSON.parse('{"__proto__": {"status": "forged"}}') as unknown
    const input = { thread: thread(), outcome: { status: 'completed', result: result as string } }
    expect(await compiled.decide('after_complete', input)).toMatchObject({ action: 'fail', hookId: 'proto-key' })
    expect(problems).toEqual([])
  })
})

describe('hook conditions: end to end', () => {
  it('should refuse at createRuntime a project config.yaml hook with a catastrophic pattern, naming the file and the hook', async () => {
    const dir = tempDir()
    const file = path.join(dir, 'config.yaml')
    fs.writeFileSync(file, 'hooks:\n  - id: slow-regex\n    event: error\n    when: "error.message.matches(\'(x+x+)+y\')"\n    action: fail\n')
    await expect(createRuntime({ dir, userConfig: null, model: scriptedModel([]) })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining(`${file}: hook "slow-regex": when`),
      details: expect.objectContaining({ source: file, hookId: 'slow-regex', layer: 'project' }),
    })
    // Nothing was left holding the directory: once fixed, it opens.
    fs.writeFileSync(file, 'hooks:\n  - id: slow-regex\n    event: error\n    when: "error.message.matches(\'x+y\')"\n    action: fail\n')
    const rt = await createRuntime({ dir, userConfig: null, model: scriptedModel([]) })
    await rt.close()
  })

  it('should refuse at spawn a directive hook with nested loops, before anything of the thread is written', async () => {
    const rt = await createRuntime({ dir: tempDir(), userConfig: null, model: scriptedModel([{ text: 'ok' }]) })
    const when = '[1,2].all(a, [1,2].exists(b, b == a))'
    await expect(rt.spawn({ directive: { name: 'nested', prompt: 'p', hooks: [{ id: 'loops', event: 'after_step', when, action: 'abort' }] } })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringContaining('directive "nested": hook "loops": when'),
    })
    expect(rt.list()).toEqual([])
    await rt.close()
  })

  it('should report a condition that fails to evaluate (a null limit compared) with the hook and its file, and carry on', async () => {
    const dir = tempDir()
    const file = path.join(dir, 'config.yaml')
    fs.writeFileSync(file, "hooks:\n  - id: costly\n    event: thread_started\n    when: 'thread.limits.spend > 1.0'\n    action: abort\n")
    const problems: Problem[] = []
    const rt = await createRuntime({ dir, userConfig: null, model: scriptedModel([{ text: 'done' }]), onProblem: (p) => problems.push(p) })
    const thread = await rt.spawn({ directive: { name: 'plain', prompt: 'p' } })
    expect(await thread.done).toMatchObject({ status: 'completed' })
    expect(problems).toContainEqual(
      expect.objectContaining({ code: 'HOOK_FAILED', message: expect.stringMatching(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: hook costly: when .* could not be evaluated.*does not match`)) }),
    )
    await rt.close()
  })
})
