/** What traceKillWorker.ts runs and traceKill.test.ts recovers: the same script and tools on both sides. */
import { z } from 'zod'
import { defineTool } from '../../src/index.js'
import type { ModelRequest, ScriptedTurn } from '../../src/index.js'

/**
 * Turn 1 looks a word up, turn 2 calls `crash`, turn 3 answers. A thread named `lead` instead
 * spawns `research` as its child and waits for it.
 */
export function traceKillScript(request: ModelRequest): ScriptedTurn {
  if (request.directiveName === 'lead') {
    if (request.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'research', prompt: 'What is a spindle?' } }] }
    if (request.turn === 2) {
      const spawned = request.messages.find((m) => m.role === 'tool' && m.toolName === 'spawn_thread')
      const threadId = spawned && spawned.role === 'tool' ? (JSON.parse(spawned.content) as { threadId: string }).threadId : ''
      return { toolCalls: [{ name: 'wait_threads', input: { threadIds: [threadId] } }] }
    }
    return { text: 'The research is done.' }
  }
  if (request.turn === 1) return { toolCalls: [{ name: 'lookup', input: { word: 'spindle' } }] }
  if (request.turn === 2) return { toolCalls: [{ name: 'crash', input: {} }] }
  return { text: 'A spindle spins.' }
}

/** `crash` runs `kill` (not idempotent: after the crash it is not run again, and the model is told). */
export function traceKillTools(kill: () => void) {
  return [
    defineTool({ name: 'lookup', description: 'Looks a word up.', input: z.object({ word: z.string() }), execute: ({ word }) => ({ word }) }),
    defineTool({
      name: 'crash',
      description: 'Ends the process.',
      input: z.object({}),
      execute: () => {
        kill()
        return new Promise<never>(() => {})
      },
    }),
  ]
}
