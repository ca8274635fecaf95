/**
 * classifyError: every category, every Retry-After form, the AI SDK's own error classes, provider
 * error bodies and Node network errors.
 */
import { APICallError, RetryError } from 'ai'
import { describe, expect, it } from 'vitest'
import { ModelHttpError } from '../../actors/model.js'
import type { ErrorCategory } from '../../machines/threadEvents.js'
import { SpindleError } from '../../src/base/errors.js'
import type { Classified, MessagePattern, RetryPolicy } from '../../src/policies/classifyError.js'
import { classifyError, parseRetryAfter, retryDelayMs } from '../../src/policies/classifyError.js'

const NOW = Date.UTC(2026, 0, 1)
const URL = 'https://api.example.test/v1/chat/completions'

function openaiBody(message: string, type: string, code: string | null) {
  return { error: { message, type, param: null, code } }
}

/** An APICallError the way @ai-sdk/openai builds one from an HTTP error response. */
function apiCallError(statusCode: number, body?: ReturnType<typeof openaiBody>, headers: Record<string, string> = {}, withData = true) {
  return new APICallError({
    message: body?.error.message ?? `HTTP ${statusCode}`,
    url: URL,
    requestBodyValues: { model: 'gpt-4o-mini' },
    statusCode,
    responseHeaders: { 'content-type': 'application/json', ...headers },
    ...(body ? { responseBody: JSON.stringify(body) } : {}),
    ...(body && withData ? { data: body } : {}),
  })
}

function systemError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code })
}

const quota429 = () =>
  apiCallError(429, openaiBody('You exceeded your current quota, please check your plan and billing details.', 'insufficient_quota', 'insufficient_quota'))
const rateLimit429 = (headers: Record<string, string> = {}) =>
  apiCallError(429, openaiBody('Rate limit reached for gpt-4o-mini on requests per min (RPM).', 'requests', 'rate_limit_exceeded'), headers)
const unavailable503 = () => apiCallError(503, openaiBody('The server is overloaded or not ready yet.', 'server_error', null))

interface Case {
  name: string
  error: () => unknown
  category: ErrorCategory
  status?: number
  code?: string
  retryAfterMs?: number
}

const cases: Case[] = [
  // HTTP status alone
  { name: 'a 429 with Retry-After in seconds', error: () => new ModelHttpError(429, 'slow down', { headers: { 'Retry-After': '2' } }), category: 'rate_limited', status: 429, retryAfterMs: 2000 },
  { name: 'a 429 with Retry-After as an HTTP date', error: () => ({ status: 429, message: 'busy', headers: { 'retry-after': new Date(NOW + 7000).toUTCString() } }), category: 'rate_limited', status: 429, retryAfterMs: 7000 },
  { name: 'a 429 with retry-after-ms (wins over retry-after)', error: () => ({ status: 429, headers: { 'retry-after-ms': '1500', 'retry-after': '9' } }), category: 'rate_limited', retryAfterMs: 1500 },
  { name: 'a 429 with Retry-After in response.headers (a Headers object)', error: () => Object.assign(new Error('Too Many Requests'), { response: { status: 429, headers: new Headers({ 'Retry-After': '3' }) } }), category: 'rate_limited', status: 429, retryAfterMs: 3000 },
  { name: 'a 429 without Retry-After', error: () => ({ status: 429 }), category: 'rate_limited', status: 429 },
  { name: 'a 402', error: () => new ModelHttpError(402, 'payment required'), category: 'quota', status: 402 },
  { name: 'a 413', error: () => new ModelHttpError(413, 'request entity too large'), category: 'context_length', status: 413 },
  { name: 'a 500', error: () => new ModelHttpError(500, 'internal error'), category: 'transient', status: 500 },
  { name: 'a 502', error: () => new ModelHttpError(502, 'bad gateway'), category: 'transient', status: 502 },
  { name: 'a 504', error: () => ({ statusCode: 504 }), category: 'transient', status: 504 },
  { name: 'a 529', error: () => new ModelHttpError(529, 'overloaded'), category: 'transient', status: 529 },
  { name: 'a 408', error: () => new ModelHttpError(408, 'request timeout'), category: 'transient', status: 408 },
  { name: 'a 401', error: () => new ModelHttpError(401, 'Incorrect API key provided'), category: 'permanent', status: 401 },
  { name: 'a 404', error: () => new ModelHttpError(404, 'The model does not exist'), category: 'permanent', status: 404 },
  { name: 'an unlisted 4xx', error: () => new ModelHttpError(418, "I'm a teapot"), category: 'permanent', status: 418 },

  // AI SDK APICallError, as the OpenAI provider builds it
  { name: 'APICallError 429 rate_limit_exceeded with retry-after', error: () => rateLimit429({ 'retry-after': '2' }), category: 'rate_limited', status: 429, code: 'rate_limit_exceeded', retryAfterMs: 2000 },
  { name: 'APICallError 429 insufficient_quota (quota, never rate limit)', error: quota429, category: 'quota', status: 429, code: 'insufficient_quota' },
  {
    name: 'APICallError 429 insufficient_quota with only the raw responseBody',
    error: () => apiCallError(429, openaiBody('You exceeded your current quota.', 'insufficient_quota', 'insufficient_quota'), {}, false),
    category: 'quota',
    status: 429,
    code: 'insufficient_quota',
  },
  {
    name: 'APICallError 429 whose body has only error.type insufficient_quota',
    error: () => apiCallError(429, openaiBody('You exceeded your current quota.', 'insufficient_quota', null)),
    category: 'quota',
    status: 429,
    code: 'insufficient_quota',
  },
  {
    name: 'APICallError 400 context_length_exceeded',
    error: () => apiCallError(400, openaiBody("This model's maximum context length is 128000 tokens.", 'invalid_request_error', 'context_length_exceeded')),
    category: 'context_length',
    status: 400,
    code: 'context_length_exceeded',
  },
  { name: 'APICallError 503', error: unavailable503, category: 'transient', status: 503 },
  {
    name: 'APICallError 400 invalid request',
    error: () => apiCallError(400, openaiBody("Invalid value for 'temperature'.", 'invalid_request_error', 'invalid_value')),
    category: 'permanent',
    status: 400,
    code: 'invalid_value',
  },
  {
    name: 'an Anthropic-style overloaded_error body on a 529',
    error: () => Object.assign(new Error('Overloaded'), { statusCode: 529, data: { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } } }),
    category: 'transient',
    status: 529,
    code: 'overloaded_error',
  },
  {
    name: 'APICallError without status that the SDK marks retryable',
    error: () => new APICallError({ message: 'Stream ended unexpectedly', url: URL, requestBodyValues: {}, isRetryable: true }),
    category: 'transient',
  },

  // AI SDK RetryError: its last error counts
  { name: 'RetryError whose last error is insufficient_quota', error: () => new RetryError({ message: 'Failed after 3 attempts.', reason: 'maxRetriesExceeded', errors: [unavailable503(), quota429()] }), category: 'quota', status: 429, code: 'insufficient_quota' },
  { name: 'RetryError whose last error is a 503', error: () => new RetryError({ message: 'Failed after 3 attempts.', reason: 'maxRetriesExceeded', errors: [unavailable503(), unavailable503()] }), category: 'transient', status: 503 },
  {
    name: 'RetryError whose last error is a 429 with retry-after',
    error: () => new RetryError({ message: 'Failed after 2 attempts.', reason: 'maxRetriesExceeded', errors: [rateLimit429({ 'retry-after': '4' })] }),
    category: 'rate_limited',
    status: 429,
    retryAfterMs: 4000,
  },

  // cause chains
  { name: 'an error caused by a 429 APICallError', error: () => new Error('model step failed', { cause: rateLimit429({ 'retry-after-ms': '250' }) }), category: 'rate_limited', status: 429, retryAfterMs: 250 },
  { name: 'an error caused by an insufficient_quota APICallError', error: () => new Error('wrapped', { cause: quota429() }), category: 'quota', code: 'insufficient_quota' },

  // provider codes on other error shapes
  { name: 'ModelHttpError 429 with code insufficient_quota', error: () => new ModelHttpError(429, 'quota', { code: 'insufficient_quota' }), category: 'quota', status: 429, code: 'insufficient_quota' },
  { name: 'a provider-SDK error with .error.code context_length_exceeded', error: () => Object.assign(new Error('400 too long'), { status: 400, error: { code: 'context_length_exceeded', type: 'invalid_request_error' } }), category: 'context_length', status: 400, code: 'context_length_exceeded' },
  { name: 'a provider-SDK error with .error.type insufficient_quota', error: () => Object.assign(new Error('429 quota'), { status: 429, error: { type: 'insufficient_quota', code: null } }), category: 'quota', status: 429, code: 'insufficient_quota' },

  // Node network errors
  {
    name: 'TypeError fetch failed caused by ECONNREFUSED',
    error: () => new TypeError('fetch failed', { cause: systemError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:9') }),
    category: 'transient',
    code: 'ECONNREFUSED',
  },
  { name: 'TypeError fetch failed caused by UND_ERR_SOCKET', error: () => new TypeError('fetch failed', { cause: systemError('UND_ERR_SOCKET', 'other side closed') }), category: 'transient', code: 'UND_ERR_SOCKET' },
  { name: 'ECONNRESET', error: () => systemError('ECONNRESET', 'read ECONNRESET'), category: 'transient', code: 'ECONNRESET' },
  { name: 'ETIMEDOUT', error: () => systemError('ETIMEDOUT', 'connect ETIMEDOUT'), category: 'transient', code: 'ETIMEDOUT' },
  { name: 'UND_ERR_HEADERS_TIMEOUT', error: () => systemError('UND_ERR_HEADERS_TIMEOUT', 'Headers Timeout Error'), category: 'transient', code: 'UND_ERR_HEADERS_TIMEOUT' },
  { name: 'UND_ERR_CONNECT_TIMEOUT', error: () => systemError('UND_ERR_CONNECT_TIMEOUT', 'Connect Timeout Error'), category: 'transient', code: 'UND_ERR_CONNECT_TIMEOUT' },
  {
    name: 'APICallError "Cannot connect to API" caused by ECONNREFUSED',
    error: () => new APICallError({ message: 'Cannot connect to API: connect ECONNREFUSED', url: URL, requestBodyValues: {}, isRetryable: true, cause: systemError('ECONNREFUSED', 'connect ECONNREFUSED') }),
    category: 'transient',
    code: 'ECONNREFUSED',
  },
  { name: 'an AbortError', error: () => Object.assign(new Error('This operation was aborted'), { name: 'AbortError' }), category: 'transient' },
  { name: 'a TimeoutError', error: () => Object.assign(new Error('model call timed out'), { name: 'TimeoutError' }), category: 'transient' },

  // message patterns (config errors.patterns)
  { name: 'a message about a rate limit', error: () => new Error('Rate limit exceeded, slow down'), category: 'rate_limited' },
  { name: 'a message about the context length', error: () => new Error("This model's maximum context length is 8192 tokens"), category: 'context_length' },
  { name: 'a message about exhausted quota', error: () => new Error('monthly quota exceeded'), category: 'quota' },
  { name: 'socket hang up', error: () => new Error('socket hang up'), category: 'transient' },
  { name: 'a 429 whose message (no code) says insufficient quota', error: () => new ModelHttpError(429, 'insufficient_quota for this account'), category: 'quota', status: 429 },
  { name: 'a 400 whose message says the prompt is too long', error: () => new ModelHttpError(400, 'prompt is too long: 210000 tokens > 200000 maximum'), category: 'context_length', status: 400 },
  { name: 'a 503 whose message mentions a rate limit stays transient', error: () => new ModelHttpError(503, 'upstream rate limit'), category: 'transient', status: 503 },

  // provider error bodies and the waits they ask for (each provider's documented responses: providerErrors.test.ts)
  {
    name: 'a 500 whose x-ratelimit headers show an exhausted limit waits no reset (only a rate limit or quota does)',
    error: () => new ModelHttpError(500, 'boom', { headers: { 'x-ratelimit-remaining-requests': '0', 'x-ratelimit-reset-requests': '6m0s' } }),
    category: 'transient',
    status: 500,
  },
  {
    name: 'a 429 whose exhausted limit resets in "6m0s"',
    error: () => new ModelHttpError(429, 'slow down', { headers: { 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '6m0s', 'x-ratelimit-reset-requests': '1s' } }),
    category: 'rate_limited',
    retryAfterMs: 360_000,
  },
  {
    name: 'a 429 whose limits reset in "120ms" and "2m59.56s", none at 0 (the later reset)',
    error: () => new ModelHttpError(429, 'slow down', { headers: { 'x-ratelimit-reset-requests': '120ms', 'x-ratelimit-reset-tokens': '2m59.56s' } }),
    category: 'rate_limited',
    retryAfterMs: 179_560,
  },
  {
    name: 'a 429 whose reset is "0" (no wait asked)',
    error: () => new ModelHttpError(429, 'slow down', { headers: { 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '0' } }),
    category: 'rate_limited',
  },
  {
    name: 'a 429 whose x-ratelimit-reset is seconds since the epoch',
    error: () => new ModelHttpError(429, 'slow down', { headers: { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(NOW / 1000 + 90) } }),
    category: 'rate_limited',
    retryAfterMs: 90_000,
  },
  {
    name: 'a 429 with Retry-After and a reset header (Retry-After wins)',
    error: () => new ModelHttpError(429, 'slow down', { headers: { 'retry-after': '2', 'x-ratelimit-remaining-tokens': '0', 'x-ratelimit-reset-tokens': '6m0s' } }),
    category: 'rate_limited',
    retryAfterMs: 2000,
  },
  {
    name: 'a quota whose limits are not at 0 waits no reset',
    error: () => new ModelHttpError(429, 'You exceeded your current quota.', { headers: { 'x-ratelimit-remaining-tokens': '10', 'x-ratelimit-reset-tokens': '6m0s' } }),
    category: 'quota',
  },
  {
    name: 'a Google RetryInfo given as { seconds, nanos }',
    error: () =>
      new ModelHttpError(
        429,
        JSON.stringify({
          error: { code: 429, message: 'Resource exhausted.', status: 'RESOURCE_EXHAUSTED', details: [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: { seconds: 3, nanos: 500_000_000 } }] },
        }),
      ),
    category: 'rate_limited',
    code: 'RESOURCE_EXHAUSTED',
    retryAfterMs: 3500,
  },
  {
    name: "a Google SDK error whose message is a JSON body holding the provider's body as text",
    error: () =>
      Object.assign(
        new Error(
          JSON.stringify({
            error: {
              message: JSON.stringify({ error: { code: 400, message: 'The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).', status: 'INVALID_ARGUMENT' } }),
              code: 400,
              status: 'Bad Request',
            },
          }),
        ),
        { status: 400 },
      ),
    category: 'context_length',
    status: 400,
    code: 'INVALID_ARGUMENT',
  },
  {
    name: 'an AWS SDK-style body whose __type carries a namespace',
    error: () => new ModelHttpError(400, JSON.stringify({ __type: 'com.amazon.coral.service#ServiceQuotaExceededException', message: 'Your request exceeds the service quota for your account.' })),
    category: 'quota',
    code: 'ServiceQuotaExceededException',
  },

  // unknown
  { name: 'an unknown Error', error: () => new Error('something odd happened'), category: 'permanent' },
  { name: 'a thrown string', error: () => 'weird', category: 'permanent' },
  { name: 'null', error: () => null, category: 'permanent' },
  { name: 'an exhausted script', error: () => new SpindleError('MODEL_SCRIPT_EXHAUSTED', 'no more turns'), category: 'permanent', code: 'MODEL_SCRIPT_EXHAUSTED' },
  // Whatever its message says: the deadline is spindle's own (timeouts.modelMs), worth another attempt.
  { name: 'a model call abandoned at timeouts.modelMs', error: () => new SpindleError('MODEL_TIMEOUT', 'no answer within 300 ms'), category: 'transient', code: 'MODEL_TIMEOUT' },
]

describe('classifyError', () => {
  it.each(cases)('$name → $category', ({ error, category, status, code, retryAfterMs }) => {
    const classified = classifyError(error(), NOW)
    expect(classified.failure.category).toBe(category)
    if (status !== undefined) expect(classified.failure.status).toBe(status)
    if (code !== undefined) expect(classified.failure.code).toBe(code)
    expect(classified.retryAfterMs).toBe(retryAfterMs)
  })

  it('should return plain JSON data: category, message, status and code only', () => {
    for (const { error } of cases) {
      const { failure } = classifyError(error(), NOW)
      expect(JSON.parse(JSON.stringify(failure))).toEqual(failure)
      expect(Object.keys(failure).every((k) => ['category', 'message', 'status', 'code'].includes(k))).toBe(true)
      expect(typeof failure.message).toBe('string')
    }
  })

  it('should name the provider message and the network cause', () => {
    expect(classifyError(quota429(), NOW).failure.message).toContain('exceeded your current quota')
    const fetchFailed = new TypeError('fetch failed', { cause: systemError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:9') })
    expect(classifyError(fetchFailed, NOW).failure.message).toBe('fetch failed: connect ECONNREFUSED 127.0.0.1:9')
    const retry = new RetryError({ message: 'Failed after 3 attempts.', reason: 'maxRetriesExceeded', errors: [quota429()] })
    expect(classifyError(retry, NOW).failure.message).toContain('exceeded your current quota')
  })

  it("should add the provider's message to an AI SDK error whose client could not parse the body", () => {
    const body = [{ error: { code: 400, message: 'The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).', status: 'INVALID_ARGUMENT' } }]
    const error = new APICallError({ message: 'Bad Request', url: URL, requestBodyValues: {}, statusCode: 400, responseHeaders: {}, responseBody: JSON.stringify(body) })
    expect(classifyError(error, NOW).failure).toMatchObject({
      category: 'context_length',
      message: 'Bad Request: The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).',
    })
  })

  it("should record the provider's message, not the JSON, when an adapter throws the response body", () => {
    const error = new ModelHttpError(429, JSON.stringify({ error: { message: 'You exceeded your current quota.', type: null, code: null } }))
    expect(classifyError(error, NOW).failure).toMatchObject({ category: 'quota', message: 'You exceeded your current quota.' })
  })

  it('should take the patterns it is given, first match first', () => {
    const patterns: MessagePattern[] = [{ match: 'teapot', category: 'transient' }]
    expect(classifyError(new Error('the teapot is busy'), NOW, patterns).failure.category).toBe('transient')
    expect(classifyError(new Error('Rate limit exceeded'), NOW, patterns).failure.category).toBe('permanent')
  })

  it('should try the patterns on the first 16 KiB of a message only: one that echoes a whole prompt cannot stall the process', () => {
    const patterns: MessagePattern[] = [{ match: 'prompt.*overloaded', category: 'transient' }]
    const echoed = 'prompt '.repeat(200_000)
    expect(classifyError(new Error(`overloaded: ${echoed}`), NOW, [{ match: 'overloaded', category: 'transient' }]).failure.category).toBe('transient')
    // The word that would decide comes after 1.4 MB of echoed prompt: not looked for there.
    expect(classifyError(new Error(`${echoed} overloaded`), NOW, patterns).failure.category).toBe('permanent')
  })

  it('should stop on a cause chain that loops', () => {
    const a = new Error('a') as Error & { cause?: unknown }
    const b = new Error('b', { cause: a })
    a.cause = b
    expect(classifyError(a, NOW).failure.category).toBe('permanent')
  })
})

describe('parseRetryAfter', () => {
  it.each([
    [{ 'retry-after': '2' }, 2000],
    [{ 'Retry-After': '0.5' }, 500],
    [{ 'retry-after': new Date(NOW + 10_000).toUTCString() }, 10_000],
    [{ 'retry-after': new Date(NOW - 10_000).toUTCString() }, 0],
    [{ 'retry-after-ms': '1234' }, 1234],
    [{ 'retry-after': 'soon' }, undefined],
    [{}, undefined],
    [undefined, undefined],
  ])('%j → %s', (headers, ms) => {
    expect(parseRetryAfter(headers, NOW)).toBe(ms)
  })
})

describe('retryDelayMs', () => {
  const policy: RetryPolicy = { maxRetries: 3, baseMs: 2000, capMs: 120_000, jitter: 0.2, rateLimitDefaultMs: 30_000, quotaWaitMs: 60_000 }
  const of = (error: unknown): Classified => classifyError(error, NOW)

  it('should wait what a rate limit asks for, else the default', () => {
    expect(retryDelayMs(of(rateLimit429({ 'retry-after': '2' })), 1, policy)).toBe(2000)
    expect(retryDelayMs(of(rateLimit429()), 1, policy)).toBe(30_000)
  })

  it('should wait at least the quota wait on quota, even on a 429 with Retry-After', () => {
    expect(retryDelayMs(of(apiCallError(429, openaiBody('quota', 'insufficient_quota', 'insufficient_quota'), { 'retry-after': '1' })), 1, policy)).toBe(60_000)
  })

  it('should back off exponentially on transient failures', () => {
    expect(retryDelayMs(of(unavailable503()), 1, policy, () => 0.5)).toBe(2000)
    expect(retryDelayMs(of(unavailable503()), 3, policy, () => 0.5)).toBe(8000)
  })
})
