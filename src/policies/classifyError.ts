/**
 * The one place that reads HTTP statuses, headers, error codes and messages of failures.
 * Everything else branches on the category it returns.
 */
import type { ErrorCategory, FailureInfo } from '../../machines/thread.machine.js'
import { isSpindleError } from '../errors.js'
import type { Config } from '../../config/schema.js'
import { systemDefaults } from '../../config/load.js'

export interface Classified {
  failure: FailureInfo
  /** Wait the failure itself asked for (Retry-After), in ms. */
  retryAfterMs?: number
}

const STATUS: Record<number, ErrorCategory> = {
  408: 'transient',
  409: 'transient',
  425: 'transient',
  429: 'rate_limited',
  500: 'transient',
  502: 'transient',
  503: 'transient',
  504: 'transient',
  529: 'transient',
  402: 'quota',
  413: 'context_length',
  400: 'permanent',
  401: 'permanent',
  403: 'permanent',
  404: 'permanent',
  422: 'permanent',
}

// Provider error codes that decide before the status does: a 429 with insufficient_quota is
// quota exhaustion, which waiting a few seconds never fixes.
const CODES: Record<string, ErrorCategory> = {
  insufficient_quota: 'quota',
  context_length_exceeded: 'context_length',
  rate_limit_exceeded: 'rate_limited',
  overloaded_error: 'transient',
}

const NODE_NETWORK = new Set(['ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT'])

/** Message patterns (config `errors.patterns`), compiled once per list. */
export interface MessagePattern {
  match: string
  category: ErrorCategory
}

const compiledPatterns = new WeakMap<readonly MessagePattern[], Array<[RegExp, ErrorCategory]>>()

function compilePatterns(patterns: readonly MessagePattern[]): Array<[RegExp, ErrorCategory]> {
  let compiled = compiledPatterns.get(patterns)
  if (!compiled) {
    compiled = patterns.map((p) => [new RegExp(p.match, 'i'), p.category])
    compiledPatterns.set(patterns, compiled)
  }
  return compiled
}

function headerOf(headers: unknown, name: string): string | undefined {
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
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

function field(error: unknown, name: string): unknown {
  return typeof error === 'object' && error !== null ? (error as Record<string, unknown>)[name] : undefined
}

/** Maps any failure to a category. Unknown failures are permanent: never retry what is not understood. */
export function classifyError(error: unknown, now = Date.now(), patterns: readonly MessagePattern[] = systemDefaults().errors.patterns): Classified {
  const message = error instanceof Error ? error.message : String(error)
  const rawStatus = field(error, 'status') ?? field(error, 'statusCode')
  const status = typeof rawStatus === 'number' ? rawStatus : undefined
  const rawCode = field(error, 'code') ?? field(field(error, 'error'), 'code')
  const code = typeof rawCode === 'string' ? rawCode : undefined
  const info = (category: ErrorCategory): FailureInfo => ({
    category,
    message,
    ...(status !== undefined ? { status } : {}),
    ...(code !== undefined ? { code } : {}),
  })
  if (isSpindleError(error) && error.code === 'MODEL_SCRIPT_EXHAUSTED') return { failure: info('permanent') }
  if (error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError')) {
    return { failure: info('transient') }
  }
  const byCode = code !== undefined ? (CODES[code] ?? (NODE_NETWORK.has(code) ? 'transient' : undefined)) : undefined
  const category =
    byCode ??
    (status !== undefined ? STATUS[status] ?? (status >= 500 ? 'transient' : undefined) : undefined) ??
    compilePatterns(patterns).find(([re]) => re.test(message))?.[1] ??
    'permanent'
  const retryAfterMs = parseRetryAfter(field(error, 'headers') ?? field(field(error, 'response'), 'headers'), now)
  return retryAfterMs === undefined ? { failure: info(category) } : { failure: info(category), retryAfterMs }
}

/** The `retry` section of the configuration (config/defaults.yaml). `jitter` 0.2 means ±20 %. */
export type RetryPolicy = Config['retry']


/** How long to wait before attempt `attempt + 1`. The result is recorded, so replay needs no randomness. */
export function retryDelayMs(classified: Classified, attempt: number, policy: RetryPolicy, random = Math.random): number {
  switch (classified.failure.category) {
    case 'rate_limited':
      return classified.retryAfterMs ?? policy.rateLimitDefaultMs
    case 'quota':
      return Math.max(classified.retryAfterMs ?? 0, policy.quotaWaitMs)
    default: {
      const exp = Math.min(policy.capMs, policy.baseMs * 2 ** Math.max(0, attempt - 1))
      const jittered = exp * (1 + policy.jitter * (2 * random() - 1))
      return Math.round(Math.min(policy.capMs, jittered))
    }
  }
}
