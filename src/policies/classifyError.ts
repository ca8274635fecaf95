/**
 * The one place that reads HTTP statuses, headers, error codes and messages of failures.
 * Everything else branches on the category it returns.
 */
import type { ErrorCategory, FailureInfo } from '../../machines/threadEvents.js'
import type { RetryPolicy } from '../../machines/threadPolicy.js'
import { isSpindleError } from '../base/errors.js'
import { systemDefaults } from '../../config/load.js'
import type { ErrorBody } from './errorBody.js'
import { emptyErrorBody, parseJsonBody, readErrorBodies } from './errorBody.js'
import { headerOf, parseRetryAfter, rateLimitResetMs } from './retryAfter.js'

export { parseRetryAfter }

export interface Classified {
  failure: FailureInfo
  /** Wait the failure itself asked for (Retry-After, Google's retryDelay, a rate limit's reset), in ms. */
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

// Provider error codes and types (from the body, or Bedrock's x-amzn-ErrorType header) that decide
// before the status does: a 429 with insufficient_quota is quota exhaustion, which waiting a few
// seconds never fixes, and a 429 ModelNotReadyException is a model still loading.
const CODES: Record<string, ErrorCategory> = {
  // OpenAI's billing codes (https://platform.openai.com/docs/guides/error-codes), Anthropic's 402
  insufficient_quota: 'quota',
  billing_hard_limit_reached: 'quota',
  credit_balance_exhausted: 'quota',
  organization_spend_limit_exceeded: 'quota',
  project_spend_limit_exceeded: 'quota',
  organization_usage_limit_exceeded: 'quota',
  billing_error: 'quota',
  context_length_exceeded: 'context_length',
  rate_limit_exceeded: 'rate_limited',
  rate_limit_error: 'rate_limited',
  overloaded_error: 'transient',
  // Groq's flex tier at capacity (status 498)
  capacity_exceeded: 'transient',
  // Amazon Bedrock (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html)
  ThrottlingException: 'rate_limited',
  ServiceQuotaExceededException: 'quota',
  ModelNotReadyException: 'transient',
  ModelTimeoutException: 'transient',
  ModelStreamErrorException: 'transient',
  ServiceUnavailableException: 'transient',
  InternalServerException: 'transient',
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

function field(error: unknown, name: string): unknown {
  return typeof error === 'object' && error !== null ? (error as Record<string, unknown>)[name] : undefined
}

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value !== '' ? value : typeof value === 'number' ? String(value) : undefined
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

/** The provider's messages added to an error's own, each at most this long. */
const MAX_ADDED_MESSAGE = 1000

/**
 * The message a failure is recorded with: its own, with the provider's messages from the body it
 * does not already say (an AI SDK error whose body its client could not parse says only "Bad
 * Request"; a gateway's "Provider returned error" keeps the upstream's reason in its body). A
 * message that is the body itself (a hand-written adapter that throws the response text) gives
 * way to the provider's messages.
 */
function recordedMessage(message: string, body: ErrorBody): string {
  const clip = (m: string): string => m.slice(0, MAX_ADDED_MESSAGE)
  if (body.messages.length > 0 && parseJsonBody(message) !== undefined) return body.messages.map(clip).join(': ')
  const added = body.messages.filter((m) => !message.includes(m)).map(clip)
  return added.length === 0 ? message : [message, ...added].join(': ')
}

/** The window of the quotas a Google body names as exhausted: a day does not pass while waiting, a minute does. */
function byQuotaWindow(body: ErrorBody): ErrorCategory | undefined {
  if (body.quotaWindows.has('long')) return 'quota'
  if (body.quotaWindows.has('short')) return 'rate_limited'
  return undefined
}

/**
 * Maps any failure to a category. Unknown failures are permanent: never retry what is not understood.
 *
 * Reads, along the error's cause chain (an AI SDK RetryError counts as its `lastError`), the
 * failure and the provider's error body it carries (`error`, `data`, `responseBody`, or a message
 * that is the body's JSON text — see errorBody.ts):
 * 1. a provider error code or type (`insufficient_quota`, `context_length_exceeded`, Bedrock's
 *    `x-amzn-ErrorType` …) — it decides before the status, so a 429 for exhausted quota is quota;
 * 2. a Node network error code (ECONNRESET, UND_ERR_SOCKET, …, also as the `cause` of
 *    `TypeError: fetch failed`) — transient;
 * 3. the quotas a Google `QuotaFailure` names: per day (or hour, month) is quota, per minute a rate
 *    limit, whatever the message says;
 * 4. the HTTP status (`status`, `statusCode` or `response.status`);
 * 5. the message patterns (config `errors.patterns`), tried on the error's messages and the
 *    provider's. A pattern may narrow a rate limit (from a code or a 429) or a permanent 4xx to
 *    quota or context_length, which waiting does not fix; with no status or code, it decides;
 * 6. an AI SDK `isRetryable: true` — transient; anything else is permanent.
 *
 * The wait asked for: `retry-after-ms` or `Retry-After` (`headers`, `responseHeaders` or
 * `response.headers`), else Google's `RetryInfo.retryDelay`; for a rate limit or quota without
 * either, the reset time of an exhausted limit's `x-ratelimit-reset*` header (on a rate limit,
 * the latest reset when no limit says it is at 0).
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
  const body = emptyErrorBody()
  const headerSets: unknown[] = []
  let retryAfterMs: number | undefined
  for (const link of chain) {
    status ??= statusOf(link)
    const own = text(field(link, 'code'))
    if (own !== undefined && !codes.includes(own)) codes.push(own)
    for (const headers of headersOf(link)) {
      if (!headers) continue
      headerSets.push(headers)
      retryAfterMs ??= parseRetryAfter(headers, now)
      // Bedrock names the exception in a header: "ThrottlingException:http://internal.amazon.com/…"
      const awsType = headerOf(headers, 'x-amzn-errortype')?.split(':')[0]
      if (awsType && !codes.includes(awsType)) codes.push(awsType)
    }
    readErrorBodies(link, body)
  }
  for (const code of [...body.codes, ...body.numericCodes]) if (!codes.includes(code)) codes.push(code)
  retryAfterMs ??= body.retryDelayMs
  const providerCode = codes.find((c) => CODES[c] !== undefined)
  const networkCode = codes.find((c) => NODE_NETWORK.has(c))
  const code = providerCode ?? networkCode ?? codes[0]

  const category = decide()
  if (retryAfterMs === undefined && (category === 'rate_limited' || category === 'quota')) {
    retryAfterMs = rateLimitResetMs([...headerSets, ...body.headers], now, category === 'quota')
  }
  const failure: FailureInfo = {
    category,
    message: recordedMessage(message, body),
    ...(status !== undefined ? { status } : {}),
    ...(code !== undefined ? { code } : {}),
  }
  return retryAfterMs === undefined ? { failure } : { failure, retryAfterMs }

  function decide(): ErrorCategory {
    if (isSpindleError(top) && top.code === 'MODEL_SCRIPT_EXHAUSTED') return 'permanent'
    // timeouts.modelMs ran out: the provider may answer the next attempt in time.
    if (isSpindleError(top) && top.code === 'MODEL_TIMEOUT') return 'transient'
    if (top instanceof Error && (top.name === 'AbortError' || top.name === 'TimeoutError')) return 'transient'
    const byCode = providerCode !== undefined ? CODES[providerCode] : undefined
    if (byCode === undefined && networkCode !== undefined) return 'transient'
    const byWindow = byCode === undefined ? byQuotaWindow(body) : undefined
    if (byWindow !== undefined) return byWindow

    const compiled = compilePatterns(patterns)
    // A provider may echo the whole prompt in its message: a pattern with a gap (`.*`) would then
    // take time quadratic in megabytes, blocking every thread. What decides a category comes first.
    const messages = [...chain.map(messageOf), ...body.messages].map((m) => m.slice(0, MAX_MATCHED_MESSAGE))
    const byPattern = compiled.find(([re]) => messages.some((m) => re.test(m)))?.[1]
    const base = byCode ?? (status !== undefined ? statusCategory(status) : undefined)
    if (base !== undefined) {
      const narrowable = base === 'rate_limited' || (base === 'permanent' && byCode === undefined)
      return narrowable && (byPattern === 'quota' || byPattern === 'context_length') ? byPattern : base
    }
    if (byPattern !== undefined) return byPattern
    return field(top, 'isRetryable') === true ? 'transient' : 'permanent'
  }
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
