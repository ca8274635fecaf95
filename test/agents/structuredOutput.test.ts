/**
 * Issue 23, item 6: structured results. Setup: threads spawned through the public API with a zod
 * output schema, a JSON Schema, and a directive file's `output:`, on a recording scripted model.
 * What must hold: a valid answer completes the thread and `done` gives the typed value; an invalid
 * one goes back to the model with the errors (rebuilt the same way from the transcript), up to
 * `output.maxTries` answers, then the thread ends OUTPUT_INVALID; a schema that cannot be kept is
 * refused at spawn; every transcript replays to the same snapshot.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, expectTypeOf, it } from 'vitest'
import { z } from 'zod'
import { defineTool, isSpindleError, scriptedModel } from '../../src/index.js'
import { loadDirectiveFile, renderDirective } from '../../src/operator/directiveFile.js'
import { messagesFromTranscript } from '../../src/thread/messages.js'
import { readThreadFiles } from '../../src/testing.js'
import { tempDir } from '../helpers/dirs.js'
import { testRuntimes } from '../helpers/testRuntimes.js'
import { recording } from '../helpers/recordingModel.js'

const runtime = testRuntimes()

const Verdict = z.object({
  title: z.string().min(3),
  score: z.number().int().min(0).max(10),
  tags: z.array(z.string()).max(2),
  due: z.iso.date().transform((d) => new Date(`${d}T00:00:00Z`)),
})

const VALID = { title: 'Tides', score: 7, tags: ['sea'], due: '2026-03-01' }

describe('structured results', () => {
  it('should complete with the parsed, typed value of a valid answer, and give the model the schema', async () => {
    const { model, requests } = recording([{ text: JSON.stringify(VALID) }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict } })
    const outcome = await thread.done
    expectTypeOf(outcome.output).toEqualTypeOf<z.output<typeof Verdict> | undefined>()
    expect(outcome).toMatchObject({ status: 'completed', result: JSON.stringify(VALID) })
    expect(outcome.output).toEqual({ ...VALID, due: new Date('2026-03-01T00:00:00Z') })
    expect(requests).toHaveLength(1)
    expect(requests[0]!.outputSchema).toEqual(z.toJSONSchema(Verdict, { io: 'input' }))
    expect(thread.getSnapshot().directive.output).toEqual(z.toJSONSchema(Verdict, { io: 'input' }))
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should take an answer wrapped in a ```json fence', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: '```json\n' + JSON.stringify(VALID) + '\n```' }]) })
    const outcome = await (await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict } })).done
    expect(outcome).toMatchObject({ status: 'completed', output: { title: 'Tides', score: 7 } })
  })

  it('should send an invalid answer back with its errors, and complete with the next valid one', async () => {
    const { model, requests } = recording([{ text: JSON.stringify({ ...VALID, title: 'T', score: 11 }) }, { text: JSON.stringify(VALID) }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict } })
    const outcome = await thread.done
    expect(outcome).toMatchObject({ status: 'completed', cost: { turns: 2 } })
    expect(outcome.output?.score).toBe(7)
    expect(requests).toHaveLength(2)
    const second = requests[1]!.messages
    expect(second).toHaveLength(3)
    expect(second[1]).toEqual({ role: 'assistant', content: JSON.stringify({ ...VALID, title: 'T', score: 11 }) })
    expect(second[2]!.role).toBe('user')
    expect(second[2]!.content).toContain('title: Too small')
    expect(second[2]!.content).toContain('score: Too big')
    // The conversation rebuilt from the transcript (after a crash) tells the model the same.
    const { entries } = readThreadFiles(rt.dir, thread.id)
    expect(messagesFromTranscript(entries).slice(0, 3)).toEqual(second)
    expect(entries.find((e) => e.type === 'MODEL_REPLIED')!.data).toMatchObject({ outputErrors: expect.arrayContaining([expect.stringContaining('score')]) })
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should send an answer that is not JSON back, saying so', async () => {
    const { model, requests } = recording([{ text: 'Seven out of ten.' }, { text: JSON.stringify(VALID) }])
    const rt = await runtime({ model })
    const outcome = await (await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict } })).done
    expect(outcome.status).toBe('completed')
    expect(requests[1]!.messages.at(-1)!.content).toContain('(the answer): not JSON')
  })

  it('should end in error OUTPUT_INVALID, listing the errors, once output.maxTries answers failed', async () => {
    const { model, requests } = recording(() => ({ text: JSON.stringify({ ...VALID, score: 'high' }) }))
    const rt = await runtime({ model, config: { output: { maxTries: 2 } } })
    const thread = await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict } })
    const outcome = await thread.done
    expect(requests).toHaveLength(2)
    expect(outcome.status).toBe('error')
    expect(outcome.error!.code).toBe('OUTPUT_INVALID')
    expect(outcome.error!.message).toContain('after 2 tries')
    expect(outcome.error!.message).toContain('score: Invalid input: expected number')
    expect(outcome.output).toBeUndefined()
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should check the limits before asking again: an invalid answer that used the last turn suspends the thread', async () => {
    const { model, requests } = recording(() => ({ text: 'not JSON' }))
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict }, limits: { turns: 1 } })
    expect(await thread.done).toMatchObject({ status: 'suspended', suspendReason: 'limit' })
    expect(requests).toHaveLength(1)
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should validate only the final answer: a reply with tool calls runs them as usual', async () => {
    const noop = defineTool({ name: 'noop', description: 'Does nothing', input: z.object({}), idempotent: true, execute: () => 'ok' })
    const { model, requests } = recording([{ text: 'looking', toolCalls: [{ name: 'noop' }] }, { text: JSON.stringify(VALID) }])
    const rt = await runtime({ model, tools: [noop] })
    const outcome = await (await rt.spawn({ directive: { name: 'judge', prompt: 'Judge it', output: Verdict } })).done
    expect(outcome).toMatchObject({ status: 'completed', output: { title: 'Tides' } })
    expect(requests.map((r) => r.messages.filter((m) => m.role === 'user').length)).toEqual([1, 1])
  })

  it('should validate a JSON Schema and give the JSON the model wrote', async () => {
    const schema = { type: 'object', properties: { answer: { type: 'integer' } }, required: ['answer'], additionalProperties: false }
    const { model, requests } = recording([{ text: '{"answer": 4.5}' }, { text: '{"answer": 42}' }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'oracle', prompt: 'Answer', output: schema } })
    const outcome = await thread.done
    expectTypeOf(outcome.output).toEqualTypeOf<unknown>()
    expect(outcome).toMatchObject({ status: 'completed', output: { answer: 42 } })
    expect(requests[1]!.messages.at(-1)!.content).toContain('answer: Invalid input: expected int')
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it("should take a directive file's output: JSON Schema", async () => {
    const dir = tempDir('spindle-structured-directive')
    const file = path.join(dir, 'grade.md')
    fs.writeFileSync(
      file,
      [
        '---',
        'name: grade',
        'output:',
        '  type: object',
        '  properties:',
        '    grade: { type: string, enum: [A, B, C] }',
        '  required: [grade]',
        '---',
        'Grade the essay.',
        '',
      ].join('\n'),
    )
    const { model, requests } = recording([{ text: '{"grade": "E"}' }, { text: '{"grade": "B"}' }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: renderDirective(loadDirectiveFile(file), {}) })
    expect(await thread.done).toMatchObject({ status: 'completed', output: { grade: 'B' } })
    expect(requests[0]!.outputSchema).toEqual({ type: 'object', properties: { grade: { type: 'string', enum: ['A', 'B', 'C'] } }, required: ['grade'] })
    expect(requests[1]!.messages.at(-1)!.content).toContain('grade: Invalid option')
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should refuse at spawn a zod schema with no JSON Schema form, and start nothing', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: '{}' }]) })
    const refused = await rt.spawn({ directive: { name: 'dated', prompt: 'p', output: z.object({ at: z.date() }) } }).catch((error: unknown) => error)
    expect(isSpindleError(refused) && refused.code).toBe('OUTPUT_SCHEMA_INVALID')
    expect((refused as Error).message).toContain('directive "dated": its output schema cannot be written as JSON Schema')
    expect(rt.list()).toEqual([])
  })

  it('should refuse at spawn a JSON Schema that cannot be validated, and start nothing', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: '{}' }]) })
    const refused = await rt.spawn({ directive: { name: 'odd', prompt: 'p', output: { type: 'strin' } } }).catch((error: unknown) => error)
    expect(isSpindleError(refused) && refused.code).toBe('OUTPUT_SCHEMA_INVALID')
    expect((refused as Error).message).toContain('cannot be validated (Unsupported type: strin)')
    expect(rt.list()).toEqual([])
  })

  it('should leave a thread without an output schema as it was: its text is its result, no output', async () => {
    const { model, requests } = recording([{ text: 'not JSON at all' }])
    const rt = await runtime({ model })
    const thread = await rt.spawn({ directive: { name: 'plain', prompt: 'p' } })
    const outcome = await thread.done
    expect(outcome).toMatchObject({ status: 'completed', result: 'not JSON at all' })
    expect('output' in outcome).toBe(false)
    expect('outputSchema' in requests[0]!).toBe(false)
    expect('output' in thread.getSnapshot().directive).toBe(false)
  })
})
