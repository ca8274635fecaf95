/**
 * Issue 23, item 2: several models. Setup: a runtime with `models: { default, fast }`, threads that
 * name a model in their directive, their spawn or their spawn_thread call, and a data directory
 * opened by a runtime that lacks a thread's model. What must hold: each thread's calls go to its
 * model (a child's to its parent's unless it names its own); an unknown name is refused at spawn
 * with the names there are, starting nothing; every reply records the model's name and the thread's
 * usage is kept per model; a runtime without the model suspends the thread for MODEL_NOT_FOUND
 * instead of ending it, and one with the model carries it on.
 */
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { ModelAdapter, ModelRequest } from '../../src/index.js'
import { createRuntime, defineTool, isSpindleError, scriptedModel } from '../../src/index.js'
import type { Script } from '../../actors/scriptedModel.js'
import { readThreadFiles } from '../../src/testing.js'
import { tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { eventually } from '../helpers/threads.js'

const runtime = testRuntimes()

const noop = defineTool({ name: 'noop', description: 'Does nothing', input: z.object({}), idempotent: true, execute: () => 'ok' })

/** A scripted model that notes, by directive name, each call it was given. */
function model(label: string, calls: Array<[model: string, directive: string]>, script: Script = [{ text: `${label} answered` }]): ModelAdapter {
  const inner = scriptedModel(script)
  return { name: label, generate: (request: ModelRequest) => (calls.push([label, request.directiveName]), inner.generate(request)) }
}

async function refusal(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  const error = await promise.then(() => null, (e: unknown) => e)
  expect(isSpindleError(error), String(error)).toBe(true)
  return error as { code: string; message: string }
}

describe('several models', () => {
  it('should run each thread on the model its spawn or directive names, else on default', async () => {
    const calls: Array<[string, string]> = []
    const rt = await runtime({ models: { default: model('default', calls), fast: model('fast', calls) } })
    await (await rt.spawn({ directive: { name: 'plain', prompt: 'p' } })).done
    await (await rt.spawn({ directive: { name: 'quick', prompt: 'p', model: 'fast' } })).done
    await (await rt.spawn({ directive: { name: 'overridden', prompt: 'p', model: 'fast' }, model: 'default' })).done
    expect(calls).toEqual([
      ['default', 'plain'],
      ['fast', 'quick'],
      ['default', 'overridden'],
    ])
  })

  it("should run a child on its parent's model unless it names its own, from spawn_thread and from host code", async () => {
    const calls: Array<[string, string]> = []
    const lead: Script = (request) =>
      request.directiveName === 'lead' && request.turn === 1
        ? {
            toolCalls: [
              { name: 'spawn_thread', input: { name: 'inherits', prompt: 'a' } },
              { name: 'spawn_thread', input: { name: 'chooses', prompt: 'b', model: 'default' } },
            ],
          }
        : { text: 'done' }
    const rt = await runtime({ models: { default: model('default', calls, lead), fast: model('fast', calls, lead) } })
    const parent = await rt.spawn({ directive: { name: 'lead', prompt: 'Delegate', model: 'fast' } })
    await parent.done
    await (await rt.spawn({ directive: { name: 'hosted', prompt: 'c' }, parentId: parent.id })).done
    await rt.settle()
    expect(calls.filter(([, d]) => d !== 'lead')).toEqual(expect.arrayContaining([['fast', 'inherits'], ['default', 'chooses'], ['fast', 'hosted']]))
    expect(calls.filter(([m, d]) => d === 'lead' && m !== 'fast')).toEqual([])
  })

  it('should refuse an unknown model at spawn with the names there are, and start nothing', async () => {
    const rt = await runtime({ models: { default: scriptedModel([{ text: 'x' }]), fast: scriptedModel([{ text: 'y' }]) } })
    const byDirective = await refusal(rt.spawn({ directive: { name: 'typo', prompt: 'p', model: 'fsat' } }))
    expect(byDirective.code).toBe('MODEL_NOT_FOUND')
    expect(byDirective.message).toContain('Model "fsat" is not one of this runtime\'s models (default, fast)')
    expect((await refusal(rt.spawn({ directive: { name: 'typo', prompt: 'p' }, model: 'smart' }))).code).toBe('MODEL_NOT_FOUND')
    expect((await refusal(rt.spawn({ directive: { name: 'typo', prompt: 'p' }, model: 7 as unknown as string }))).code).toBe('INVALID_OPTIONS')
    expect(rt.list()).toEqual([])
  })

  it('should answer a spawn_thread call naming an unknown model with an error result the model can correct', async () => {
    const seen: ModelRequest[] = []
    const script = scriptedModel((request) =>
      request.turn === 1 ? { toolCalls: [{ name: 'spawn_thread', input: { name: 'child', prompt: 'c', model: 'huge' } }] } : { text: 'gave up' },
    )
    const rt = await runtime({ models: { default: { name: 's', generate: (r) => (seen.push(r), script.generate(r)) } } })
    const parent = await rt.spawn({ directive: { name: 'lead', prompt: 'p' } })
    expect(await parent.done).toMatchObject({ status: 'completed', result: 'gave up' })
    const result = seen.at(-1)!.messages.find((m) => m.role === 'tool')!
    expect(result).toMatchObject({ role: 'tool', isError: true })
    expect(result.content).toContain('Model \\"huge\\" is not one of this runtime\'s models (default)')
    expect(rt.list().map((r) => r.directiveName)).toEqual(['lead'])
  })

  it('should record the model of every reply and keep the usage per model', async () => {
    const rt = await runtime({
      models: {
        default: scriptedModel([{ text: 'x' }]),
        fast: scriptedModel([{ toolCalls: [{ name: 'noop' }], usage: { inputTokens: 10, outputTokens: 2, cost: 0.001 } }, { text: 'done', usage: { inputTokens: 20, outputTokens: 3, cost: 0.002 } }]),
      },
      tools: [noop],
    })
    const thread = await rt.spawn({ directive: { name: 'quick', prompt: 'p', model: 'fast' } })
    await thread.done
    const usage = thread.getSnapshot().usage as { turns: number; byModel?: Record<string, unknown> }
    expect(usage.byModel).toEqual({ fast: { turns: 2, inputTokens: 30, outputTokens: 5, spend: 0.003 } })
    expect(usage.turns).toBe(2)
    const replies = readThreadFiles(rt.dir, thread.id).entries.filter((e) => e.type === 'MODEL_REPLIED')
    expect(replies.map((e) => (e.data as { model?: string }).model)).toEqual(['fast', 'fast'])
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should refuse createRuntime options that name no default, or give both model and models', async () => {
    const dir = tempDir('spindle-models-options')
    const m = scriptedModel([{ text: 'x' }])
    const noDefault = await refusal(createRuntime({ dir, models: { fast: m }, shutdownSignals: [] }))
    expect(noDefault).toMatchObject({ code: 'INVALID_OPTIONS' })
    expect(noDefault.message).toContain('`models` needs a `default`')
    expect((await refusal(createRuntime({ dir, model: m, models: { default: m }, shutdownSignals: [] }))).message).toContain('`model` or `models`, not both')
    expect((await refusal(createRuntime({ dir, models: { default: m, 'bad name': m }, shutdownSignals: [] }))).message).toContain('"bad name" is not a model name')
    expect((await refusal(createRuntime({ dir, shutdownSignals: [] }))).message).toContain('createRuntime needs `model`')
  })

  it('should suspend a thread whose model the opening runtime lacks, and carry it on in one that has it', async () => {
    const dir = tempDir('spindle-models-missing')
    const first = await runtime({ dir, models: { default: scriptedModel([{ text: 'x' }]), smart: scriptedModel([{ toolCalls: [{ name: 'noop' }] }, { faults: [{ fault: 'hang' }], reply: { text: 'never' } }]) }, tools: [noop] })
    const thread = await first.spawn({ directive: { name: 'deep', prompt: 'p', model: 'smart' }, retry: { maxRetries: 0 } })
    await eventually(first, () => thread.getSnapshot().usage.turns === 1)
    await first.close()

    const problems: string[] = []
    const lacking = await runtime({ dir, model: scriptedModel([{ text: 'wrong model' }]), tools: [noop], onProblem: (p) => problems.push(p.code) })
    await eventually(lacking, () => lacking.list().find((r) => r.id === thread.id)?.status === 'suspended')
    const suspended = lacking.list().find((r) => r.id === thread.id)!
    expect(suspended.status).toBe('suspended')
    const failure = readThreadFiles(dir, thread.id).entries.filter((e) => e.type === 'MODEL_FAILED').at(-1)!.data as { error: { code: string; message: string } }
    expect(failure.error.code).toBe('MODEL_NOT_FOUND')
    expect(failure.error.message).toContain(`Thread ${thread.id} runs on model "smart"`)
    await lacking.close()

    const having = await runtime({ dir, models: { default: scriptedModel([{ text: 'wrong model' }]), smart: scriptedModel([{ text: 'x' }, { text: 'deep answer' }]) }, tools: [noop] })
    await having.resume(thread.id)
    expect(await having.get(thread.id)!.done).toMatchObject({ status: 'completed', result: 'deep answer' })
  })
})
