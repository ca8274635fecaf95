/**
 * Issue 23, end to end: an agent as people write one, on the AI SDK adapter against a real loopback
 * server speaking the OpenAI protocol. Setup: a directive with instructions and an output schema, a
 * `deploy` tool that needs approval. The model asks to deploy to production; a person, in another
 * process, approves with edited input (`spindle approve --input`); the model's first final answer
 * is not valid JSON, its second is. What must hold: the instructions reach the provider as the
 * system message on every call; the tool does not run before the approval and then runs once, with
 * the edited input; the failed answer goes back with its errors; `done` gives the typed value; the
 * transcript replays to the same snapshot.
 */
import { spawnSync } from 'node:child_process'
import { createOpenAI } from '@ai-sdk/openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { aiSdkModel } from '../../src/aiSdk.js'
import { defineTool } from '../../src/index.js'
import { createTestRuntime } from '../../src/testing.js'
import { compiled } from '../helpers/dirs.js'
import type { OpenAIServer } from '../helpers/openaiServer.js'
import { startOpenAIServer } from '../helpers/openaiServer.js'
import { eventually, until } from '../helpers/threads.js'

let server: OpenAIServer
beforeAll(async () => {
  server = await startOpenAIServer()
})
afterAll(async () => {
  await server.close()
})

const INSTRUCTIONS = 'You are a release engineer. Deploy only what you are asked to, and report as JSON.'
const Report = z.object({ env: z.enum(['staging', 'production']), status: z.literal('deployed') })

describe('an agent on the AI SDK adapter', () => {
  it('should run instructions, an approval with edited input from another process, and a validated structured answer', async () => {
    const runs: string[] = []
    const deploy = defineTool({
      name: 'deploy',
      description: 'Deploy the current build',
      input: z.object({ env: z.enum(['staging', 'production']) }),
      needsApproval: true,
      execute: ({ env }) => (runs.push(env), { deployed: env }),
    })
    const provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'test-key' })
    const rt = await createTestRuntime({ model: aiSdkModel({ model: provider.chat('gpt-4o-mini') }), tools: [deploy] })
    try {
      server.push(
        { kind: 'toolCalls', calls: [{ id: 'call_1', name: 'deploy', arguments: { env: 'production' } }] },
        { kind: 'text', text: 'Deployed to staging.' },
        { kind: 'text', text: '{"env":"staging","status":"deployed"}' },
      )
      const thread = await rt.spawn({ directive: { name: 'release', prompt: 'Deploy the build', instructions: INSTRUCTIONS, output: Report } })
      const view = await until(thread, (v) => v.suspendReason === 'tool_approval')
      expect(view.pendingCall).toMatchObject({ tool: 'deploy', input: { env: 'production' } })
      expect(runs).toEqual([])

      // A person, in another process, approves with edited input.
      await eventually(rt, () => rt.active().every((t) => t.id !== thread.id))
      let cli = { status: -1 as number | null, stdout: '', stderr: '' }
      await eventually(rt, () => {
        cli = spawnSync(process.execPath, [compiled('src/cli.js'), 'approve', thread.id, '--input', '{"env":"staging"}', '--dir', rt.dir], { encoding: 'utf8' })
        return cli.status === 0
      })
      expect(cli.status, cli.stderr).toBe(0)
      await rt.checkRequests()
      expect(await eventually(rt, () => rt.get(thread.id)?.getSnapshot().status === 'completed')).toBe(true)
      const outcome = await rt.get(thread.id)!.done
      expect(outcome).toMatchObject({ status: 'completed', output: { env: 'staging', status: 'deployed' } })
      expect(runs).toEqual(['staging'])

      const bodies = server.requests.map((r) => r.body)
      expect(bodies).toHaveLength(3)
      for (const body of bodies) {
        expect(body.messages[0]).toEqual({ role: 'system', content: INSTRUCTIONS })
        expect(body.response_format.type).toBe('json_schema')
      }
      const toolResult = bodies[1].messages.find((m: { role: string }) => m.role === 'tool')
      expect(JSON.parse(toolResult.content)).toEqual({ deployed: 'staging' })
      expect(bodies[2].messages.at(-1).role).toBe('user')
      expect(bodies[2].messages.at(-1).content).toContain('not JSON')
      expect(rt.checkReplay(thread.id).matches).toBe(true)
    } finally {
      await rt.cleanup()
    }
  })
})
