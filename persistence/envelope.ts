import type { StateValue } from 'xstate'
import { threadMachine } from '../machines/thread.machine.js'
import { SpindleError } from '../src/base/errors.js'
import { upgradeContextV1toV2, upgradeSnapshotV2toV3 } from './upgrade.js'
import type { StateEnvelope, ThreadStatus, TranscriptPosition } from './types.js'

export const STATE_VERSION = 3

/**
 * Validates a parsed state.json and upgrades older versions to the current one. Each future
 * version step gets a named function here (upgradeV1toV2 …), applied in order.
 */
export function upgradeEnvelope(raw: unknown, file: string, threadId: string): StateEnvelope {
  const corrupt = (what: string) =>
    new SpindleError(
      'STATE_CORRUPT',
      `${file} is not a valid thread state: ${what}. The thread's transcript still holds its history; ` +
        `a runtime opening this directory rebuilds state.json from it.`,
      { details: { path: file, threadId } },
    )
  if (typeof raw !== 'object' || raw === null) throw corrupt('it is not a JSON object')
  let v = (raw as { v?: unknown }).v
  if (v === 1) {
    const old = raw as { snapshot?: { context?: Record<string, unknown> } }
    if (old.snapshot?.context) old.snapshot.context = upgradeContextV1toV2(old.snapshot.context)
    ;(raw as { v: number }).v = v = 2
  }
  if (v === 2) {
    const old = raw as { snapshot?: unknown }
    if (typeof old.snapshot === 'object' && old.snapshot !== null) upgradeSnapshotV2toV3(old.snapshot as Record<string, unknown>)
    ;(raw as { v: number }).v = v = 3
  }
  if (typeof v === 'number' && v !== STATE_VERSION) {
    throw new SpindleError(
      'STATE_VERSION_UNSUPPORTED',
      `${file} has schema version ${v}; this spindle reads version ${STATE_VERSION}. Use the spindle version that wrote it, or upgrade.`,
      { details: { path: file, threadId, version: v } },
    )
  }
  if (v !== STATE_VERSION) throw corrupt('it has no schema version "v"')
  const env = raw as Record<string, unknown>
  for (const field of ['threadId', 'status', 'snapshot', 'transcript'] as const) {
    if (env[field] === undefined || env[field] === null) throw corrupt(`field "${field}" is missing`)
  }
  if (env.threadId !== threadId) throw corrupt(`it belongs to thread ${String(env.threadId)}, not ${threadId}`)
  const problem = snapshotProblem(env.snapshot, threadId)
  if (problem) throw corrupt(problem)
  return raw as StateEnvelope
}

/** Every state value of the thread machine, as `running.callingModel` keys (built once). */
let stateKeys: Set<string> | null = null

function knownStateKeys(): Set<string> {
  if (stateKeys) return stateKeys
  const keys = new Set<string>()
  const walk = (node: { states: Record<string, unknown> }, prefix: string): void => {
    for (const [key, child] of Object.entries(node.states)) {
      keys.add(prefix + key)
      walk(child as { states: Record<string, unknown> }, `${prefix}${key}.`)
    }
  }
  walk(threadMachine.root, '')
  return (stateKeys = keys)
}

function stateKey(value: unknown): string | null {
  if (typeof value === 'string') return value
  if (typeof value !== 'object' || value === null) return null
  const entries = Object.entries(value as Record<string, unknown>)
  if (entries.length !== 1) return null
  const inner = stateKey(entries[0]![1])
  return inner === null ? null : `${entries[0]![0]}.${inner}`
}

/**
 * What is wrong with a stored snapshot that parsed as JSON, or null. Checks what every reader
 * relies on before it restores the snapshot: a state of the thread machine, and a context of this
 * thread with its usage. A snapshot that fails here is rebuilt from the transcript.
 */
function snapshotProblem(snapshot: unknown, threadId: string): string | null {
  if (typeof snapshot !== 'object' || snapshot === null || Array.isArray(snapshot)) return 'its snapshot is not an object'
  const { value, context } = snapshot as { value?: StateValue; context?: Record<string, unknown> }
  const key = stateKey(value)
  if (key === null || !knownStateKeys().has(key)) return `its snapshot's state ${JSON.stringify(value) ?? 'undefined'} is not a state of the thread machine`
  if (typeof context !== 'object' || context === null) return 'its snapshot has no context'
  if (context.threadId !== threadId) return `its snapshot's context belongs to ${JSON.stringify(context.threadId) ?? 'no thread'}`
  const usage = context.usage as Record<string, unknown> | undefined
  if (typeof usage !== 'object' || usage === null || typeof usage.turns !== 'number' || typeof usage.spend !== 'number') {
    return 'its snapshot has no usage (turns, spend)'
  }
  // What the step's effect reads (effectOf): the limits it checks, the calls of the turn.
  if (typeof context.limits !== 'object' || context.limits === null) return 'its snapshot has no limits'
  if (!Array.isArray(context.toolCalls) || !Array.isArray(context.toolsDone)) return 'its snapshot has no tool calls of the turn (toolCalls, toolsDone)'
  return null
}

/** The envelope of a snapshot taken at `transcript`, at time `now` (ms). */
export function makeEnvelope(threadId: string, status: ThreadStatus, transcript: TranscriptPosition, snapshot: unknown, now: number): StateEnvelope {
  return { v: STATE_VERSION, threadId, status, savedAt: new Date(now).toISOString(), transcript, snapshot }
}
