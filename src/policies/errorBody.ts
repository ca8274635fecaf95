/**
 * What a provider's error body says, read for classifyError: the error codes and types, the
 * provider's own messages, Google's RetryInfo and QuotaFailure, and rate-limit headers a gateway
 * copies into its body. Bodies come in many shapes — `{ error: { code, type, message } }`
 * (OpenAI, Groq, OpenRouter, Azure), `{ type: "error", error: { type, message } }` (Anthropic),
 * `{ error: { code, message, status, details } }` (Google; in an array from streaming endpoints),
 * `{ message }` (Bedrock), `{ object: "error", message, type, code }` (Mistral), `{ error: "…" }`
 * (Ollama) — and a body may carry another as JSON text (OpenRouter's `metadata.raw`, the Google
 * SDK's message).
 */
import { parseProtoDuration } from './retryAfter.js'

/** Bodies larger than this are not parsed: an error body is small; one that echoes a prompt is not worth it. */
const MAX_BODY_CHARS = 1024 * 1024
/** How deep bodies nested in bodies are followed. */
const MAX_DEPTH = 4
/** How many provider messages are kept. */
const MAX_MESSAGES = 8

export interface ErrorBody {
  /** Error codes and types, most specific first. */
  codes: string[]
  /** Numeric codes: they mostly repeat the HTTP status, so they come after every other code. */
  numericCodes: string[]
  /** The provider's own messages: an error's message may be only the HTTP status text. */
  messages: string[]
  /** Google's `RetryInfo.retryDelay`, in ms. */
  retryDelayMs?: number
  /** The windows of the quotas Google names as exhausted: `short` passes in a minute, `long` does not. */
  quotaWindows: Set<'short' | 'long'>
  /** Rate-limit headers a gateway copies into its body (OpenRouter's `metadata.headers`). */
  headers: unknown[]
}

export function emptyErrorBody(): ErrorBody {
  return { codes: [], numericCodes: [], messages: [], quotaWindows: new Set(), headers: [] }
}

type Json = Record<string, unknown>

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function field(value: unknown, name: string): unknown {
  return isObject(value) ? value[name] : undefined
}

function list(value: unknown): unknown[] {
  return Array.isArray(value) ? value : []
}

/** JSON text that holds an object or an array, parsed; undefined for anything else. */
export function parseJsonBody(text: unknown): unknown {
  if (typeof text !== 'string' || text.length > MAX_BODY_CHARS) return undefined
  const start = text.trimStart()[0]
  if (start !== '{' && start !== '[') return undefined
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

/** `namespace#ErrorName` → `ErrorName` (an AWS JSON body's `__type` carries its namespace). */
function bareName(code: string): string {
  return code.slice(code.lastIndexOf('#') + 1)
}

function addCode(into: ErrorBody, value: unknown): void {
  const code = typeof value === 'string' ? bareName(value.trim()) : undefined
  if (code && !into.codes.includes(code)) into.codes.push(code)
}

function addMessage(into: ErrorBody, value: unknown, depth: number): void {
  if (typeof value !== 'string' || value.trim() === '') return
  const nested = parseJsonBody(value)
  if (nested !== undefined) return readBody(nested, into, depth + 1)
  if (!into.messages.includes(value) && into.messages.length < MAX_MESSAGES) into.messages.push(value)
}

function windowOf(quota: unknown): 'short' | 'long' | undefined {
  if (typeof quota !== 'string') return undefined
  if (/per_?(day|hour|week|month)/i.test(quota)) return 'long'
  if (/per_?(minute|second)/i.test(quota)) return 'short'
  return undefined
}

/** Google's `details`: RetryInfo, QuotaFailure, ErrorInfo (https://cloud.google.com/apis/design/errors#error_details). */
function readDetails(details: unknown, into: ErrorBody): void {
  for (const detail of list(details)) {
    const type = String(field(detail, '@type') ?? '')
    if (type.endsWith('google.rpc.RetryInfo')) {
      const delay = field(detail, 'retryDelay')
      into.retryDelayMs ??= parseProtoDuration(delay)
    } else if (type.endsWith('google.rpc.QuotaFailure')) {
      for (const violation of list(field(detail, 'violations'))) {
        const window = windowOf(field(violation, 'quotaId')) ?? windowOf(field(violation, 'quotaMetric'))
        if (window) into.quotaWindows.add(window)
      }
    } else if (type.endsWith('google.rpc.ErrorInfo')) {
      addCode(into, field(detail, 'reason'))
      const window = windowOf(field(field(detail, 'metadata'), 'quota_limit'))
      if (window) into.quotaWindows.add(window)
    }
  }
}

/** Reads one body (an object, an array of them, or JSON text of either) into `into`. */
function readBody(body: unknown, into: ErrorBody, depth = 0): void {
  if (depth > MAX_DEPTH) return
  if (typeof body === 'string') {
    const parsed = parseJsonBody(body)
    if (parsed !== undefined) readBody(parsed, into, depth + 1)
    return
  }
  if (Array.isArray(body)) {
    for (const item of body.slice(0, 4)) readBody(item, into, depth + 1)
    return
  }
  if (!isObject(body)) return
  const inner = body.error
  const node = isObject(inner) ? inner : body

  addCode(into, node.code)
  addCode(into, node.type)
  if (node !== body) addCode(into, body.code)
  // Google's status is an enum name (RESOURCE_EXHAUSTED); some gateways put the HTTP reason there.
  if (typeof node.status === 'string' && /^[A-Z][A-Z_]+$/.test(node.status)) addCode(into, node.status)
  addCode(into, node.__type)
  addCode(into, field(node.innererror, 'code'))
  readDetails(node.details, into)
  for (const e of list(node.errors)) addCode(into, field(e, 'reason'))
  for (const code of [node.code, body.code]) {
    if (typeof code === 'number' && !into.numericCodes.includes(String(code))) into.numericCodes.push(String(code))
  }

  if (typeof inner === 'string') addMessage(into, inner, depth)
  addMessage(into, node.message, depth)
  addMessage(into, node.Message, depth)
  addMessage(into, node.detail, depth)
  const metadata = node.metadata
  addMessage(into, field(metadata, 'raw'), depth)
  const headers = field(metadata, 'headers')
  if (isObject(headers)) into.headers.push(headers)
}

/**
 * The bodies a failure carries: `error` (provider SDKs), `data` (the AI SDK's APICallError,
 * parsed), `responseBody` (APICallError, raw text) and its message when that is a JSON body (a
 * hand-written adapter that throws the response text).
 */
export function readErrorBodies(error: unknown, into: ErrorBody): void {
  for (const name of ['error', 'data', 'responseBody', 'message']) readBody(field(error, name), into)
}
