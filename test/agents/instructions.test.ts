/**
 * Issue 23, item 1: a directive's instructions are its system prompt. Setup: threads spawned with
 * and without instructions, children spawned with `spawn_thread`, a directive file with inputs.
 * What must hold: the model is given the instructions on every call and never as a message; a
 * thread without them is given none; a child has only the instructions its spawn_thread call gives
 * it; the instructions are recorded with the thread, so its transcript replays to the same snapshot
 * and a new runtime on the directory carries the thread on with them.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineTool, isSpindleError, scriptedModel } from '../../src/index.js'
import { loadDirectiveFile, renderDirective } from '../../src/operator/directiveFile.js'
import { createTestRuntime } from '../../src/testing.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { inState, until } from '../helpers/threads.js'
import { recording } from '../helpers/recordingModel.js'

const runtime = testRuntimes()

const noop = defineTool({ name: 'noop', description: 'Does nothing', input: z.object({}), idempotent: true, execute: () => 'ok' })

const ROLE = 'You are a terse research assistant. Answer in one sentence.'

describe('instructions', () => {
  it('should give the model the instructions on every call, and never as a message of the conversation', async () => {
    const { model, requests } = recording([{ toolCalls: [{ name: 'noop' }] }, { toolCalls: [{ name: 'noop' }] }, { text: 'done' }])
    const rt = await runtime({ model, tools: [noop] })
    const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Find X', instructions: ROLE } })
    expect(await thread.done).toMatchObject({ status: 'completed', result: 'done' })
    expect(requests.map((r) => r.instructions)).toEqual([ROLE, ROLE, ROLE])
    expect(requests.at(-1)!.messages.some((m) => m.content.includes(ROLE))).toBe(false)
    expect(requests.at(-1)!.messages[0]).toEqual({ role: 'user', content: 'Find X' })
    expect(thread.getSnapshot().directive).toEqual({ name: 'research', prompt: 'Find X', instructions: ROLE })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should give no instructions for a directive without them, or with empty ones', async () => {
    const { model, requests } = recording([{ text: 'done' }])
    const rt = await runtime({ model })
    await (await rt.spawn({ directive: { name: 'plain', prompt: 'p' } })).done
    await (await rt.spawn({ directive: { name: 'empty', prompt: 'p', instructions: '' } })).done
    expect(requests).toHaveLength(2)
    for (const request of requests) expect('instructions' in request).toBe(false)
  })

  it('should refuse instructions that are not a string, naming the field, and start nothing', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: 'done' }]) })
    const refused = await rt.spawn({ directive: { name: 'bad', prompt: 'p', instructions: 42 as unknown as string } }).catch((error: unknown) => error)
    expect(isSpindleError(refused) && refused.code).toBe('INVALID_OPTIONS')
    expect((refused as Error).message).toContain('directive "bad": instructions must be a string')
    expect(rt.list()).toEqual([])
  })

  it("should give a child spawned with spawn_thread its own instructions, never its parent's", async () => {
    const { model, requests } = recording((request) => {
      if (request.directiveName === 'lead' && request.turn === 1) {
        return {
          toolCalls: [
            { name: 'spawn_thread', input: { name: 'briefed', prompt: 'Summarise A', instructions: 'You summarise in French.' } },
            { name: 'spawn_thread', input: { name: 'unbriefed', prompt: 'Summarise B' } },
          ],
        }
      }
      return { text: `${request.directiveName} done` }
    })
    const rt = await runtime({ model })
    const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'Delegate', instructions: 'You lead a team; never do the work yourself.' } })
    await lead.done
    await rt.settle()
    const seen = (name: string) => requests.filter((r) => r.directiveName === name).map((r) => r.instructions)
    expect(seen('lead')).toEqual(['You lead a team; never do the work yourself.', 'You lead a team; never do the work yourself.'])
    expect(seen('briefed')).toEqual(['You summarise in French.'])
    expect(seen('unbriefed')).toEqual([undefined])
  })

  it('should carry a thread on with its instructions in a new runtime on the directory', async () => {
    const dir = tempDir('spindle-instructions')
    const first = await createTestRuntime({ dir, model: scriptedModel([{ toolCalls: [{ name: 'noop' }] }, { faults: [{ fault: 'hang' }], reply: { text: 'never' } }]), tools: [noop] })
    const thread = await first.spawn({ directive: { name: 'research', prompt: 'Find X', instructions: ROLE } })
    // Stops in its second model call; closing the runtime leaves the thread running on disk.
    await until(thread, (view) => view.usage.turns === 1 && inState('callingModel')(view))
    await first.close()
    const { model, requests } = recording([{ toolCalls: [{ name: 'noop' }] }, { text: 'carried on' }])
    const second = await runtime({ dir, model, tools: [noop] })
    const resumed = second.get(thread.id)!
    expect(await resumed.done).toMatchObject({ status: 'completed', result: 'carried on' })
    expect(requests.map((r) => r.instructions)).toEqual([ROLE])
    fs.rmSync(dir, { recursive: true, force: true })
  })
})

describe('a directive file with instructions', () => {
  function write(text: string): string {
    const dir = tempDir('spindle-directive')
    const file = path.join(dir, 'helper.md')
    fs.writeFileSync(file, text)
    return file
  }

  it('should fill its inputs into the instructions as into the prompt', () => {
    const file = write(['---', 'name: helper', 'instructions: |', '  You help with {{topic}}.', '  Be brief.', 'input:', '  topic: {}', '---', 'Explain {{topic}}.', ''].join('\n'))
    const spec = renderDirective(loadDirectiveFile(file), { topic: 'tides' })
    expect(spec).toMatchObject({ name: 'helper', prompt: 'Explain tides.', instructions: 'You help with tides.\nBe brief.' })
  })

  it('should refuse instructions that use an input it does not declare, naming the input', () => {
    const file = write(['---', 'name: helper', 'instructions: You help with {{subject}}.', '---', 'Explain.', ''].join('\n'))
    let caught: unknown
    try {
      loadDirectiveFile(file)
    } catch (error) {
      caught = error
    }
    expect(isSpindleError(caught) && caught.code).toBe('DIRECTIVE_INVALID')
    expect((caught as Error).message).toContain('the instructions use {{subject}}')
  })
})

describe('spindle run and show with a directive file that has instructions', () => {
  it('should run the thread with its rendered instructions and show them on one line', () => {
    const dir = tempDir('spindle-instructions-cli')
    const cli = (...args: string[]) => spawnSync(process.execPath, [compiled('src/cli.js'), ...args, '--dir', dir], { encoding: 'utf8' })
    const run = cli('run', 'research', '--input', 'topic=otters', '--json')
    expect(run.status, run.stderr).toBe(0)
    const { threadId } = JSON.parse(run.stdout) as { threadId: string }
    const show = cli('show', threadId)
    expect(show.status, show.stderr).toBe(0)
    expect(show.stdout).toMatch(/^instructions You are a careful researcher\. .* for a reader who knows little about otters\.$/m)
    // The other labels line up with the longer one.
    expect(show.stdout).toMatch(/^directive    research$/m)
  })
})
