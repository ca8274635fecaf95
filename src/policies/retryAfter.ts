/**
 * The waits a failed model call's response asks for: Retry-After (seconds or an HTTP date),
 * retry-after-ms, Google's RetryInfo durations, and the reset times of rate-limit headers. Pure
 * parsing; classifyError decides which applies.
 */

/** A header's value from a plain object (any case) or a `Headers`-like object; arrays give their first value. */
export function headerOf(headers: unknown, name: string): string | undefined {
  if (!headers || typeof headers !== 'object') return undefined
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const v = (headers as { get(n: string): string | null }).get(name)
    return v ?? undefined
  }
  for (const [k, v] of Object.entries(headers as Record<string, unknown>)) {
    if (k.toLowerCase() === name) return typeof v === 'string' ? v : Array.isArray(v) ? String(v[0]) : String(v)
  }
  return undefined
}

/** Retry-After in seconds or as an HTTP date, or retry-after-ms; undefined when absent or invalid. */
export function parseRetryAfter(headers: unknown, now: number): number | undefined {
  const ms = headerOf(headers, 'retry-after-ms')
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.round(Number(ms))
  const value = headerOf(headers, 'retry-after')
  if (value === undefined) return undefined
  if (/^\d+(\.\d+)?$/.test(value.trim())) return Math.round(Number(value) * 1000)
  return parseDate(value, now)
}

/**
 * Only a date with a time of day: Date.parse also takes "-5" or "5, 5" (a repeated header) as a
 * date in 2001, which would make an invalid header mean "retry at once".
 */
function parseDate(value: string, now: number): number | undefined {
  if (!/\d{1,2}:\d{2}/.test(value)) return undefined
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

/**
 * A protobuf Duration as Google sends it in `RetryInfo.retryDelay`: JSON text like "47s" or
 * "34.4s", or `{ seconds, nanos }`. In ms; undefined when it is neither.
 */
export function parseProtoDuration(value: unknown): number | undefined {
  if (typeof value === 'string') {
    const match = /^\s*(\d+(?:\.\d+)?)s\s*$/.exec(value)
    return match ? Math.round(Number(match[1]) * 1000) : undefined
  }
  if (value && typeof value === 'object') {
    const seconds = Number((value as { seconds?: unknown }).seconds ?? 0)
    const nanos = Number((value as { nanos?: unknown }).nanos ?? 0)
    if (Number.isFinite(seconds) && Number.isFinite(nanos) && seconds >= 0 && nanos >= 0) return Math.round(seconds * 1000 + nanos / 1e6)
  }
  return undefined
}

const GO_DURATION = /^(?:\d+(?:\.\d+)?(?:ms|h|m|s))+$/
const GO_PART = /(\d+(?:\.\d+)?)(ms|h|m|s)/g
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

/**
 * A rate-limit reset: a duration like OpenAI's and Groq's ("20s", "6m0s", "2m59.56s", "120ms"), a
 * count of seconds, a time since the epoch in seconds or ms (OpenRouter), or a date with a time.
 * In ms from `now`; undefined when unreadable.
 */
function parseReset(value: string, now: number): number | undefined {
  const v = value.trim()
  if (GO_DURATION.test(v)) {
    let total = 0
    for (const [, amount, unit] of v.matchAll(GO_PART)) total += Number(amount) * UNIT_MS[unit!]!
    return Math.round(total)
  }
  if (/^\d+(\.\d+)?$/.test(v)) {
    const n = Number(v)
    if (n >= 1e12) return Math.max(0, Math.round(n - now))
    if (n >= 1e9) return Math.max(0, Math.round(n * 1000 - now))
    return Math.round(n * 1000)
  }
  return parseDate(v, now)
}

/** The limits the x-ratelimit-* headers describe, by the suffix of their names. */
const LIMITS = ['-requests', '-tokens', '']

/**
 * When a rate limit frees up, from `x-ratelimit-reset*` headers (any of `headerSets`): the latest
 * reset of a limit whose `x-ratelimit-remaining*` is 0. When no limit says it is at 0 (a request
 * can need more tokens than remain), the latest reset of any — unless `exhaustedOnly`. A reset of
 * 0 says nothing and is skipped.
 */
export function rateLimitResetMs(headerSets: readonly unknown[], now: number, exhaustedOnly: boolean): number | undefined {
  let exhausted: number | undefined
  let any: number | undefined
  for (const headers of headerSets) {
    for (const suffix of LIMITS) {
      const reset = headerOf(headers, `x-ratelimit-reset${suffix}`)
      const ms = reset === undefined ? undefined : parseReset(reset, now)
      if (ms === undefined || ms <= 0) continue
      any = Math.max(any ?? 0, ms)
      const remaining = headerOf(headers, `x-ratelimit-remaining${suffix}`)
      if (remaining !== undefined && remaining.trim() === '0') exhausted = Math.max(exhausted ?? 0, ms)
    }
  }
  return exhausted ?? (exhaustedOnly ? undefined : any)
}
