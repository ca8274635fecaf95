/**
 * The built-in `ask_human` tool: the model asks a person a question and the thread waits, durably,
 * for the answer, which becomes the call's result. Nothing runs while it waits: the thread is
 * suspended (`waiting`), and whoever answers — `rt.answer`, `spindle answer`, the inspector, a
 * response file — may do so from any process, hours later.
 */
import { z } from 'zod'
import type { Tool } from './tools.js'
import { defineTool, waitForAnswer } from './tools.js'

const AskHumanInput = z.object({
  question: z.string().min(1).max(10_000).describe('The question, complete enough to answer without other context.'),
  choices: z.array(z.string().min(1).max(500)).max(20).optional().describe('Answers to choose from, when the question has a few.'),
})

export interface AskHumanOptions {
  /** How long to wait for an answer, in ms; then the model gets a WAIT_TIMED_OUT result. Default: no limit. */
  deadlineMs?: number
  /** The tool's description for the model, when the default does not fit the agent. */
  description?: string
}

/**
 * `ask_human`: give it to a runtime (`tools: [askHuman()]`) and a thread can ask a person.
 *
 * @example
 * const rt = await createRuntime({ dir, model, tools: [askHuman({ deadlineMs: 86_400_000 })] })
 * // later, from any process:
 * await rt.answer(threadId, 'Ship it on Monday')
 */
export function askHuman(options: AskHumanOptions = {}): Tool<z.infer<typeof AskHumanInput>> {
  return defineTool({
    name: 'ask_human',
    description:
      options.description ??
      'Ask a person a question and wait for the answer, which is the result of this call. Use it when you need a decision, a fact only they have, or their go-ahead; not for things you can find out yourself.',
    input: AskHumanInput,
    // Nothing is done before the wait: asking again after a crash asks the same question.
    idempotent: true,
    execute: ({ question, choices }) => waitForAnswer({ question, ...(choices ? { choices } : {}) }, options.deadlineMs !== undefined ? { deadlineMs: options.deadlineMs } : {}),
  })
}
