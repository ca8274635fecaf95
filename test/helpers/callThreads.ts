/**
 * Threads paused at a tool call, for the tests of what another process (the CLI, the inspector)
 * decides there: a real runtime on a data directory leaves a `ship` thread at the approval of its
 * `deploy` call, or an `ask` thread waiting for the answer to its `ask_human` question, and is
 * closed; a second runtime opened on the directory later acts on the response file written
 * meanwhile and runs the thread to its end.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { askHuman, createRuntime, defineTool, scriptedModel } from '../../src/index.js'

export const QUESTION = 'Which day should we ship?'
export const CHOICES = ['Monday', 'Friday']

/** The tools both runtimes have, and the inputs `deploy` ran with (in this process). */
function tools(runs: Array<{ env: string }>) {
  const deploy = defineTool({
    name: 'deploy',
    description: 'Deploy to an environment',
    input: z.object({ env: z.enum(['staging', 'production']) }),
    needsApproval: true,
    execute: (input) => (runs.push(input), `deployed to ${input.env}`),
  })
  return [deploy, askHuman()]
}

/** Calls `deploy` (production) or asks its question; then answers with the call's result, as the model was given it. */
const model = () =>
  scriptedModel((r) => {
    const result = r.messages.find((m) => m.role === 'tool')
    if (result) return { text: `told: ${result.content}` }
    return r.directiveName === 'ship'
      ? { toolCalls: [{ id: 'c1', name: 'deploy', input: { env: 'production' } }] }
      : { toolCalls: [{ id: 'q1', name: 'ask_human', input: { question: QUESTION, choices: CHOICES } }] }
  })

/**
 * Spawns a `ship` or an `ask` thread on `dir`, waits until its request file is written, closes the
 * runtime. `timeoutSeconds`: the approval's deadline (approvals.timeoutSeconds). Returns the thread's id and its request id.
 */
export async function pausedAtCall(dir: string, directive: 'ship' | 'ask', options: { timeoutSeconds?: number } = {}): Promise<{ id: string; requestId: string }> {
  const config = options.timeoutSeconds !== undefined ? { config: { approvals: { timeoutSeconds: options.timeoutSeconds } } } : {}
  const rt = await createRuntime({ dir, model: model(), tools: tools([]), ...config })
  try {
    const thread = await rt.spawn({ directive: { name: directive, prompt: directive === 'ship' ? 'Ship it' : 'Ask when to ship' } })
    await thread.done
    const folder = path.join(dir, 'threads', thread.id, 'approvals')
    // The request file follows the durable suspension.
    for (;;) {
      const request = fs.existsSync(folder) ? fs.readdirSync(folder).find((n) => n.endsWith('.request.json')) : undefined
      if (request) return { id: thread.id, requestId: request.replace('.request.json', '') }
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  } finally {
    await rt.close()
  }
}

/**
 * Opens a runtime on `dir` again, which acts on the response files there, and runs every thread it
 * carries on to its end. Returns each thread as it ended and the inputs `deploy` ran with.
 */
export async function carryOn(dir: string): Promise<{ threads: Array<{ id: string; status: string; result: unknown }>; runs: Array<{ env: string }> }> {
  const runs: Array<{ env: string }> = []
  const rt = await createRuntime({ dir, model: model(), tools: tools(runs) })
  try {
    while (rt.active().length > 0) await Promise.all(rt.active().map((a) => a.done.catch(() => null)))
    return { threads: rt.list().map((r) => ({ id: r.id, status: r.status, result: r.result })), runs }
  } finally {
    await rt.close()
  }
}
