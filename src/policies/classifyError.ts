/**
 * The one place that reads HTTP statuses, headers, error codes and messages of failures.
 * Everything else branches on the category it returns.
 */
import type { ErrorCategory, FailureInfo } from '../../machines/threadEvents.js'
import type { RetryPolicy } from '../../machines/threadPolicy.js'
import { isSpindleError } from '../base/errors.js'
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

// Provider error codes (the body's `error.code`, else `error.type`) that decide before the status
// does: a 429 with insufficient_quota is quota exhaustion, which waiting a few seconds never fixes.
const CODES: Record<string, ErrorCategory> = {
  insufficient_quota: 'quota',
  billing_hard_limit_reached: 'quota',
  context_length_exceeded: 'context_length',
  rate_limit_exceeded: 'rate_limited',
  rate_limit_error: 'rate_limited',
  overloaded_error: 'transient',
}

// Node and undici codes of a connection that failed or dropped: the request may not even have
// reached the provider, so trying again is the fix. (Programming errors such as UND_ERR_INVALID_ARG
// are left out on purpose.)
const NODE_NETWORK = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'ETIMEDOUT',
  'ESOCKETTIMEDOUT',
  'EPIPE',
  'EAI_AGAIN',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_DESTROYED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
])

/** How much of an error message the patterns are tried on. */
const MAX_MATCHED_MESSAGE = 16 * 1024

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
  // Only a date with a time of day: Date.parse also takes "-5" or "5, 5" (a repeated header) as a
  // date in 2001, which would make an invalid header mean "retry at once".
  if (!/\d{1,2}:\d{2}/.test(value)) return undefined
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

function field(error: unknown, name: string): unknown {
  return typeof error === 'object' && error !== null ? (error as Record<string, unknown>)[name] : undefined
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : typeof value === 'number' ? String(value) : undefined
}

function parseBody(body: unknown): unknown {
  if (typeof body !== 'string' || !body.trimStart().startsWith('{')) return undefined
  try {
    return JSON.parse(body)
  } catch {
    return undefined
  }
}

/** An AI SDK RetryError (or look-alike): the failure that counts is its last one. */
function isRetryWrapper(error: unknown): boolean {
  return field(error, 'lastError') !== undefined && (field(error, 'name') === 'AI_RetryError' || Array.isArray(field(error, 'errors')))
}

/**
 * The error and its causes, outermost first: a RetryError stands for its `lastError`, and each
 * error is followed by its `cause` (at most 8 levels, cycles cut).
 */
function causeChain(error: unknown): unknown[] {
  const chain: unknown[] = []
  const seen = new Set<unknown>()
  let current = error
  while (current !== undefined && current !== null && !seen.has(current) && chain.length < 8) {
    seen.add(current)
    if (isRetryWrapper(current)) {
      current = field(current, 'lastError')
      continue
    }
    chain.push(current)
    current = field(current, 'cause')
  }
  return chain.length > 0 ? chain : [error]
}

/**
 * Error codes a failure carries, most specific first: its own `code`, then the provider's error
 * body — `error` (provider SDKs), `data` (AI SDK APICallError, parsed) or `responseBody` (raw) —
 * each as `{ error: { code, type } }` or `{ code, type }`.
 */
function codesOf(error: unknown): string[] {
  const codes: string[] = []
  const add = (value: unknown): void => {
    const code = text(value)
    if (code !== undefined && !codes.includes(code)) codes.push(code)
  }
  add(field(error, 'code'))
  for (const body of [field(error, 'error'), field(error, 'data'), parseBody(field(error, 'responseBody'))]) {
    const inner = field(body, 'error')
    add(field(inner, 'code'))
    add(field(inner, 'type'))
    add(field(body, 'code'))
    if (inner === undefined) add(field(body, 'type'))
  }
  return codes
}

function statusOf(error: unknown): number | undefined {
  for (const value of [field(error, 'status'), field(error, 'statusCode'), field(field(error, 'response'), 'status')]) {
    if (typeof value === 'number' && Number.isInteger(value) && value >= 100 && value < 600) return value
  }
  return undefined
}

function headersOf(error: unknown): unknown[] {
  return [field(error, 'headers'), field(error, 'responseHeaders'), field(field(error, 'response'), 'headers')]
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message
  const message = field(error, 'message')
  return typeof message === 'string' ? message : String(error)
}

function statusCategory(status: number): ErrorCategory {
  return STATUS[status] ?? (status >= 500 ? 'transient' : 'permanent')
}

/**
 * Maps any failure to a category. Unknown failures are permanent: never retry what is not understood.
 *
 * Reads, along the error's cause chain (an AI SDK RetryError counts as its `lastError`):
 * 1. a provider error code or type (`insufficient_quota`, `context_length_exceeded`, …) from the
 *    error or its body — it decides before the status, so a 429 for exhausted quota is quota;
 * 2. a Node network error code (ECONNRESET, UND_ERR_SOCKET, …, also as the `cause` of
 *    `TypeError: fetch failed`) — transient;
 * 3. the HTTP status (`status`, `statusCode` or `response.status`); a message pattern may still
 *    narrow a 429 or a permanent 4xx to quota or context_length, which waiting does not fix;
 * 4. the message patterns (config `errors.patterns`);
 * 5. an AI SDK `isRetryable: true` — transient; anything else is permanent.
 *
 * Retry-After comes from `headers`, `responseHeaders` or `response.headers`.
 */
export function classifyError(error: unknown, now = Date.now(), patterns: readonly MessagePattern[] = systemDefaults().errors.patterns): Classified {
  const chain = causeChain(error)
  const top = chain[0]
  const cause = chain[1]
  let message = messageOf(top)
  if (top instanceof TypeError && /^(fetch failed|failed to fetch)$/i.test(message) && cause !== undefined) {
    message = `${message}: ${messageOf(cause)}`
  }

  let status: number | undefined
  const codes: string[] = []
  let retryAfterMs: number | undefined
  for (const link of chain) {
    status ??= statusOf(link)
    for (const code of codesOf(link)) if (!codes.includes(code)) codes.push(code)
    for (const headers of headersOf(link)) retryAfterMs ??= parseRetryAfter(headers, now)
  }
  const providerCode = codes.find((c) => CODES[c] !== undefined)
  const networkCode = codes.find((c) => NODE_NETWORK.has(c))
  const code = providerCode ?? networkCode ?? codes[0]

  const info = (category: ErrorCategory): FailureInfo => ({
    category,
    message,
    ...(status !== undefined ? { status } : {}),
    ...(code !== undefined ? { code } : {}),
  })
  const result = (category: ErrorCategory): Classified =>
    retryAfterMs === undefined ? { failure: info(category) } : { failure: info(category), retryAfterMs }

  if (isSpindleError(top) && top.code === 'MODEL_SCRIPT_EXHAUSTED') return result('permanent')
  // timeouts.modelMs ran out: the provider may answer the next attempt in time.
  if (isSpindleError(top) && top.code === 'MODEL_TIMEOUT') return result('transient')
  if (top instanceof Error && (top.name === 'AbortError' || top.name === 'TimeoutError')) return result('transient')
  if (providerCode !== undefined) return result(CODES[providerCode]!)
  if (networkCode !== undefined) return result('transient')

  const compiled = compilePatterns(patterns)
  // A provider may echo the whole prompt in its message: a pattern with a gap (`.*`) would then
  // take time quadratic in megabytes, blocking every thread. What decides a category comes first.
  const messages = chain.map((e) => messageOf(e).slice(0, MAX_MATCHED_MESSAGE))
  const byPattern = compiled.find(([re]) => messages.some((m) => re.test(m)))?.[1]
  if (status !== undefined) {
    const byStatus = statusCategory(status)
    const narrows = (byPattern === 'quota' || byPattern === 'context_length') && (byStatus === 'rate_limited' || byStatus === 'permanent')
    return result(narrows ? byPattern : byStatus)
  }
  if (byPattern !== undefined) return result(byPattern)
  return result(field(top, 'isRetryable') === true ? 'transient' : 'permanent')
}

/** The `retry` section of the configuration (config/defaults.yaml). `jitter` 0.2 means ±20 %. */
export type { RetryPolicy }

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
      // A 503 (or any transient failure) that says when to come back is not retried before then.
      return Math.max(Math.round(Math.min(policy.capMs, jittered)), classified.retryAfterMs ?? 0)
    }
  }
}
