import { SpindleError } from '../src/errors.js'
import { upgradeContextV1toV2 } from './upgrade.js'
import type { StateEnvelope, ThreadStatus, TranscriptPosition } from './types.js'

export const STATE_VERSION = 2

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
  return raw as StateEnvelope
}

/** The envelope of a snapshot taken at `transcript`, at time `now` (ms). */
export function makeEnvelope(threadId: string, status: ThreadStatus, transcript: TranscriptPosition, snapshot: unknown, now: number): StateEnvelope {
  return { v: STATE_VERSION, threadId, status, savedAt: new Date(now).toISOString(), transcript, snapshot }
}
