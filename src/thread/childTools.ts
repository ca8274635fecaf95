/**
 * The built-in tools through which a thread starts and waits for child threads: `spawn_thread`
 * and `wait_threads`. Both are idempotent: after a crash `spawn_thread` finds the child its
 * idempotency key already made, and waiting again is harmless.
 */
import { z } from 'zod'
import { defineTool } from '../../actors/tools.js'
import type { Tool } from '../../actors/tools.js'
import type { WaitOptions, WaitReport } from './waits.js'

const LimitsInput = z
  .strictObject({
    turns: z.number().int().positive().optional(),
    tokens: z.number().int().positive().optional(),
    spend: z.number().positive().optional(),
    durationMs: z.number().int().positive().optional(),
    spawns: z.number().int().nonnegative().optional(),
    depth: z.number().int().nonnegative().optional(),
  })
  .describe("The child's limits; each is also capped by this thread's own.")

export const SpawnThreadInput = z.strictObject({
  name: z.string().min(1).max(60).describe('A short name for the child\'s task, e.g. "summarise-chapter-3".'),
  prompt: z.string().min(1).describe('What the child thread is to do.'),
  instructions: z
    .string()
    .optional()
    .describe("The child's system prompt: its role and how to work. It does not inherit yours; give it what it needs."),
  limits: LimitsInput.optional(),
})

export const WaitThreadsInput = z.strictObject({
  threadIds: z.array(z.string()).min(1).max(1000).describe('Ids returned by spawn_thread.'),
  timeoutSeconds: z.number().positive().optional().describe('Stop waiting after this long; threads still running are listed as pending.'),
  failFast: z.boolean().optional().describe('Stop waiting as soon as one thread fails.'),
  cancelSiblingsOnFailure: z.boolean().optional().describe('With failFast: cancel the others when one fails.'),
})

/** What the tools need from the runtime. */
export interface ChildToolsHost {
  spawnChild(
    parentId: string,
    idempotencyKey: string,
    spec: z.infer<typeof SpawnThreadInput>,
  ): Promise<{ threadId: string; status: string; limits: unknown; existing: boolean }>
  waitThreads(parentId: string, ids: string[], options: WaitOptions): Promise<WaitReport>
}


export function childTools(host: ChildToolsHost): Tool<any>[] {
  const spawnThread = defineTool({
    name: 'spawn_thread',
    description:
      'Start a child thread that works on a task of its own, in parallel with you. Returns its threadId at once; ' +
      'use wait_threads to get its result. Its budget is reserved from yours.',
    input: SpawnThreadInput,
    idempotent: true,
    // Starting threads spends the tree's budget: a directive may withhold it (`spawn: false`).
    permissions: ['spawn'],
    execute: async (input, context) => host.spawnChild(context.threadId, context.idempotencyKey, input),
  })
  const waitThreadsTool = defineTool({
    name: 'wait_threads',
    description:
      'Wait until the given child threads have finished and return their results. With failFast the wait ends at ' +
      'the first failure; with cancelSiblingsOnFailure the other children are then cancelled. A wait for a thread ' +
      'that is (itself or through others) waiting for you is refused at once with WAIT_CYCLE, naming the cycle.',
    input: WaitThreadsInput,
    idempotent: true,
    // None: the wait keeps its own timeout, on the runtime clock, from when the call began.
    timeoutMs: Infinity,
    execute: async (input, context) => {
      const options: WaitOptions = {
        ...(input.timeoutSeconds !== undefined ? { timeoutMs: Math.round(input.timeoutSeconds * 1000) } : {}),
        ...(input.failFast !== undefined ? { failFast: input.failFast } : {}),
        ...(input.cancelSiblingsOnFailure !== undefined ? { cancelSiblingsOnFailure: input.cancelSiblingsOnFailure } : {}),
        signal: context.signal,
      }
      return host.waitThreads(context.threadId, input.threadIds, options)
    },
  })
  return [spawnThread, waitThreadsTool]
}
