/**
 * What a host sees when a thread stops (`ThreadOutcome`, `outcomeOf`): its status, result or
 * error, and its cost. The machine's output, and what the runtime reports for a thread it finds
 * stopped in its files without running it. Pure.
 */
import type { SuspendReason, ThreadContext, Usage } from './threadContext.js'
import type { ErrorCategory } from './threadEvents.js'

export type TerminalStatus = 'completed' | 'error' | 'cancelled' | 'continued'

export interface ThreadOutcome<Output = unknown> {
  status: TerminalStatus | 'suspended'
  result?: string
  /**
   * A thread whose directive has an output schema, completed: its answer, parsed and valid. From
   * the process that spawned it with a zod schema, zod's parse (its output type); otherwise the
   * JSON the model wrote.
   */
  output?: Output
  error?: { code: string; message: string }
  cost: Usage
  suspendReason?: SuspendReason
  nextThreadId?: string
  /** Model calls retried after a failure, over the thread's life. */
  retries: number
  /** The latest model error, though a retry got past it; null when no model call failed. */
  lastError: { category: ErrorCategory; message: string } | null
}

/** The outcome a host sees for a thread that stopped in `status`. */
export function outcomeOf(status: TerminalStatus | 'suspended', context: ThreadContext): ThreadOutcome {
  const outcome: ThreadOutcome = { status, cost: { ...context.usage }, retries: context.retries ?? 0, lastError: context.lastError ? { ...context.lastError } : null }
  if (context.result !== null) outcome.result = context.result
  if (status === 'completed' && context.output !== undefined) outcome.output = context.output
  if (context.error !== null) outcome.error = context.error
  if (status === 'cancelled' && context.cancelReason !== null) {
    outcome.error = { code: 'cancelled', message: context.cancelReason }
  }
  if (context.suspendReason !== null && status === 'suspended') outcome.suspendReason = context.suspendReason
  // Suspended because a model error outlasted its retries, or for a crash loop: the host is told which error.
  if (status === 'suspended' && (context.suspendReason === 'error' || context.suspendReason === 'context_length' || context.suspendReason === 'crash_loop') && context.lastFailure) {
    outcome.error = { code: context.lastFailure.code ?? `model_${context.lastFailure.category}`, message: context.lastFailure.message }
  }
  if (context.nextThreadId !== null) outcome.nextThreadId = context.nextThreadId
  return outcome
}
