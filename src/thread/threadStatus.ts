import type { ThreadStatus } from '../../persistence/types.js'

/** The registry status of a thread machine state value: its top-level state key. */
export function statusOfValue(value: unknown): ThreadStatus {
  const key = typeof value === 'string' ? value : Object.keys(value as object)[0]
  switch (key) {
    case 'created':
    case 'running':
    case 'suspended':
    case 'completed':
    case 'error':
    case 'cancelled':
    case 'continued':
      return key
    // Waiting for its children to settle before it is reported cancelled.
    case 'cancelling':
      return 'running'
    default:
      throw new Error(`unknown thread state ${JSON.stringify(value)}`)
  }
}


/** Created or running: a thread some runtime should be carrying on (the others wait on disk or are done). */
export function isActive(status: ThreadStatus): boolean {
  return status === 'created' || status === 'running'
}

/** Whether a machine state value is `running` in the sub-state `sub` (e.g. 'runningTools'). */
export function isStateValue(value: unknown, sub: string): boolean {
  return typeof value === 'object' && value !== null && (value as { running?: unknown }).running === sub
}
