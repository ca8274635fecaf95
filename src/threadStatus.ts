import type { ThreadStatus } from '../persistence/types.js'

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
    default:
      throw new Error(`unknown thread state ${JSON.stringify(value)}`)
  }
}


/** Created or running: a thread some runtime should be carrying on (the others wait on disk or are done). */
export function isActive(status: ThreadStatus): boolean {
  return status === 'created' || status === 'running'
}
