/**
 * Upgrades of stored thread data written by older spindle versions, one named step per version.
 * Applied when a state.json or a transcript's `thread_spawned` input is read, never written back
 * until the thread's next checkpoint.
 */
type Json = Record<string, unknown>

/**
 * The retry and escalation policies a version 1 thread ran under: the shipped defaults of the
 * release that introduced version 2, frozen here. Today's defaults may differ; an upgraded thread
 * keeps the policy it was started with.
 */
const V1_RETRY = Object.freeze({ maxRetries: 3, baseMs: 2000, capMs: 120_000, jitter: 0.2, rateLimitDefaultMs: 30_000, quotaWaitMs: 60_000 })
const V1_ESCALATION = Object.freeze({
  turns: { policy: 'double' },
  tokens: { policy: 'double' },
  spend: { policy: 'double' },
  durationMs: { policy: 'double' },
  requestTimeoutSeconds: 3600,
})

/**
 * Version 1 kept `maxRetries` in the context and knew four limits. Version 2 keeps the thread's
 * whole policy, its tree depth and the last prompt size, and six limits.
 */
export function upgradeContextV1toV2(context: Json): Json {
  const { maxRetries, ...rest } = context
  const limits = (rest.limits ?? {}) as Json
  const limitHit = rest.limitHit as Json | null | undefined
  return {
    ...rest,
    limits: { spawns: null, depth: null, ...limits },
    policy: rest.policy ?? {
      retry: { ...V1_RETRY, ...(typeof maxRetries === 'number' ? { maxRetries } : {}) },
      escalation: structuredClone(V1_ESCALATION),
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
