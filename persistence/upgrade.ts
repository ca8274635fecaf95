/**
 * Upgrades of stored thread data written by older spindle versions, one named step per version.
 * Applied when a state.json or a transcript's `thread_spawned` input is read, never written back
 * until the thread's next checkpoint.
 */
import { systemDefaults } from '../config/load.js'

type Json = Record<string, unknown>

/**
 * Version 1 kept `maxRetries` in the context and knew four limits. Version 2 keeps the thread's
 * whole policy, its tree depth and the last prompt size, and six limits.
 */
export function upgradeContextV1toV2(context: Json): Json {
  const defaults = systemDefaults()
  const { maxRetries, ...rest } = context
  const limits = (rest.limits ?? {}) as Json
  const limitHit = rest.limitHit as Json | null | undefined
  return {
    ...rest,
    limits: { spawns: null, depth: null, ...limits },
    policy: rest.policy ?? {
      retry: { ...defaults.retry, ...(typeof maxRetries === 'number' ? { maxRetries } : {}) },
      escalation: defaults.escalation,
      hooks: [],
    },
    depth: rest.depth ?? 0,
    promptTokens: rest.promptTokens ?? 0,
    limitHit: limitHit ? { proposed: null, requestId: null, ...limitHit } : (limitHit ?? null),
  }
}

/** The same step for the machine input recorded in a transcript's first line. */
export function upgradeInputV1toV2(input: Json): Json {
  if ('policy' in input) return input
  const upgraded = upgradeContextV1toV2(input)
  const { promptTokens: _p, limitHit: _l, ...rest } = upgraded
  return rest
}

/**
 * Version 2 snapshots hold the actor invoked for the step the thread was in (`children`). Version
 * 3's machine invokes none: the runtime runs the step's effect from the state itself. Spindle
 * versions that read version 2 would restore a version 3 snapshot with nothing running its step,
 * hence the new version.
 */
export function upgradeSnapshotV2toV3(snapshot: Json): void {
  snapshot.children = {}
}
