/**
 * The tools and model shared by eventStream.test.ts and the worker process it starts: `ship`
 * threads call `deploy`, which needs a person's approval; `ask` threads ask a question; `hold`
 * threads wait on a model that answers only in a process given `answers: true` (the host), so a
 * worker killed mid-call leaves a thread for the host to take over; `stuck` threads wait on a
 * model that never answers, until they are cancelled; `flaky` threads fail twice, then answer; `count` threads call
 * `echo`, then answer (two turns, for a limit of one).
 */
import { z } from 'zod'
import type { ModelAdapter, Tool } from '../../src/index.js'
import { askHuman, defineTool, scriptedModel } from '../../src/index.js'

export function tools(): Tool<any>[] {
  const deploy = defineTool({
    name: 'deploy',
    description: 'Deploy to an environment',
    input: z.object({ env: z.enum(['staging', 'production']) }),
    needsApproval: true,
    execute: (input) => `deployed to ${input.env}`,
  })
  const echo = defineTool({ name: 'echo', description: 'Says it back', input: z.object({ text: z.string() }), execute: (input) => input.text })
  return [deploy, echo, askHuman()]
}

export function model(options: { answers: boolean }): ModelAdapter {
  const scripted = scriptedModel((r) => {
    const result = r.messages.find((m) => m.role === 'tool')
    if (result) return { text: `told: ${result.content}` }
    if (r.directiveName === 'ship') return { toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'production' } }] }
    if (r.directiveName === 'ask') return { toolCalls: [{ id: 'q1', name: 'ask_human', input: { question: 'Which day?', choices: ['Monday', 'Friday'] } }] }
    if (r.directiveName === 'count') return { toolCalls: [{ id: 'e1', name: 'echo', input: { text: 'one' } }] }
    if (r.directiveName === 'stuck') return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
    if (r.directiveName === 'flaky') return { faults: [{ fault: 'http', status: 503 }, { fault: 'http', status: 503 }], reply: { text: 'third time lucky' } }
    return options.answers ? { text: 'held and done' } : { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
  })
  return scripted
}
