/**
 * A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol
 * (`POST /v1/chat/completions`, non-streaming JSON) from a queue of scripted replies, and records
 * every request body it receives. Tests point a real provider at it:
 *
 *   const server = await startOpenAIServer()
 *   server.push({ kind: 'text', text: 'hello' })
 *   const model = createOpenAI({ baseURL: server.url + '/v1', apiKey: 'test-key' }).chat('gpt-4o-mini')
 *   …
 *   await server.close()
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface ScriptedUsage {
  promptTokens: number
  completionTokens: number
}

interface Timing {
  /** Answer only after this many ms (a client that aborts meanwhile gets nothing). */
  delayMs?: number
}

/** What the server answers to the next request. */
export type OpenAIReply = Timing &
  (
    | {
        /** An assistant message with tool calls (finish_reason `tool_calls`). */
        kind: 'toolCalls'
        calls: Array<{ id?: string; name: string; arguments: unknown }>
        text?: string
        /** Token counts (default 10 prompt, 5 completion); null sends no `usage` at all. */
        usage?: ScriptedUsage | null
      }
    | { kind: 'text'; text: string; usage?: ScriptedUsage | null }
    /** 429 `rate_limit_exceeded`, with `retry-after` in seconds (or as given) and/or `retry-after-ms`. */
    | { kind: 'rateLimited'; retryAfter?: number | string; retryAfterMs?: number }
    /** 503 with an OpenAI-style server error body. */
    | { kind: 'unavailable' }
    /** 429 whose body says `insufficient_quota`: quota, not a rate limit. */
    | { kind: 'insufficientQuota' }
    /** Any status, body and headers. */
    | { kind: 'error'; status: number; body?: unknown; headers?: Record<string, string> }
    /** Any status and headers, and a body sent byte for byte as given (a provider's own error response). */
    | { kind: 'raw'; status: number; headers: Record<string, string>; body: string }
  )

export interface RecordedRequest {
  method: string
  path: string
  headers: http.IncomingHttpHeaders
  /** The parsed JSON body (the raw text when it is not JSON). */
  body: any
}

export interface OpenAIServer {
  /** `http://127.0.0.1:<port>`; the provider's baseURL is `url + '/v1'`. */
  readonly url: string
  /** Every request received, in order. */
  readonly requests: RecordedRequest[]
  /** Queues replies, answered one per request in order. */
  push(...replies: OpenAIReply[]): void
  /** Replies queued and not yet used. */
  pending(): number
  close(): Promise<void>
}

const DEFAULT_USAGE: ScriptedUsage = { promptTokens: 10, completionTokens: 5 }

function errorBody(message: string, type: string, code: string | null): unknown {
  return { error: { message, type, param: null, code } }
}

function completion(sequence: number, message: Record<string, unknown>, finishReason: string, usage: ScriptedUsage | null | undefined): unknown {
  const counts = usage === undefined ? DEFAULT_USAGE : usage
  return {
    id: `chatcmpl-test-${sequence}`,
    object: 'chat.completion',
    created: 1_767_225_600,
    model: 'gpt-4o-mini-test',
    choices: [{ index: 0, message: { role: 'assistant', ...message }, logprobs: null, finish_reason: finishReason }],
    ...(counts
      ? {
          usage: {
            prompt_tokens: counts.promptTokens,
            completion_tokens: counts.completionTokens,
            total_tokens: counts.promptTokens + counts.completionTokens,
          },
        }
      : {}),
  }
}

interface Answer {
  status: number
  headers: Record<string, string>
  body: unknown
  /** Sent as it is instead of `body` as JSON. */
  text?: string
}

function answer(reply: OpenAIReply, sequence: number): Answer {
  switch (reply.kind) {
    case 'toolCalls': {
      const toolCalls = reply.calls.map((call, i) => ({
        id: call.id ?? `call_${sequence}_${i + 1}`,
        type: 'function',
        function: { name: call.name, arguments: typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments) },
      }))
      const body = completion(sequence, { content: reply.text ?? null, tool_calls: toolCalls }, 'tool_calls', reply.usage)
      return { status: 200, headers: {}, body }
    }
    case 'text':
      return { status: 200, headers: {}, body: completion(sequence, { content: reply.text }, 'stop', reply.usage) }
    case 'rateLimited': {
      const headers: Record<string, string> = {}
      if (reply.retryAfter !== undefined) headers['retry-after'] = String(reply.retryAfter)
      if (reply.retryAfterMs !== undefined) headers['retry-after-ms'] = String(reply.retryAfterMs)
      const body = errorBody(
        'Rate limit reached for gpt-4o-mini in organization org-test on requests per min (RPM): Limit 3, Used 3, Requested 1.',
        'requests',
        'rate_limit_exceeded',
      )
      return { status: 429, headers, body }
    }
    case 'unavailable':
      return { status: 503, headers: {}, body: errorBody('The server is overloaded or not ready yet.', 'server_error', null) }
    case 'insufficientQuota':
      return {
        status: 429,
        headers: {},
        body: errorBody(
          'You exceeded your current quota, please check your plan and billing details.',
          'insufficient_quota',
          'insufficient_quota',
        ),
      }
    case 'error':
      return { status: reply.status, headers: reply.headers ?? {}, body: reply.body ?? errorBody(`scripted HTTP ${reply.status}`, 'server_error', null) }
    case 'raw':
      return { status: reply.status, headers: reply.headers, body: undefined, text: reply.body }
  }
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    req.on('error', reject)
  })
}

function send(res: http.ServerResponse, { status, headers, body, text: raw }: Answer): void {
  const text = raw ?? JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}

/** Starts the server on 127.0.0.1 and an ephemeral port. */
export async function startOpenAIServer(): Promise<OpenAIServer> {
  const queue: OpenAIReply[] = []
  const requests: RecordedRequest[] = []
  const timers = new Set<NodeJS.Timeout>()

  const server = http.createServer((req, res) => {
    void (async () => {
      const raw = await readBody(req)
      let body: unknown = raw
      try {
        body = JSON.parse(raw)
      } catch {
        // keep the raw text
      }
      const path = (req.url ?? '/').split('?')[0]!
      requests.push({ method: req.method ?? '', path, headers: req.headers, body })
      if (req.method !== 'POST' || path !== '/v1/chat/completions') {
        send(res, { status: 404, headers: {}, body: errorBody(`Unknown request URL: ${req.method} ${path}`, 'invalid_request_error', 'unknown_url') })
        return
      }
      const reply = queue.shift()
      if (!reply) {
        send(res, {
          status: 400,
          headers: {},
          body: errorBody('openaiServer: no scripted reply left for this request', 'invalid_request_error', 'no_scripted_reply'),
        })
        return
      }
      const result = answer(reply, requests.length)
      if (!reply.delayMs) {
        send(res, result)
        return
      }
      const timer = setTimeout(() => {
        timers.delete(timer)
        if (!res.destroyed) send(res, result)
      }, reply.delayMs)
      timers.add(timer)
      res.on('close', () => {
        clearTimeout(timer)
        timers.delete(timer)
      })
    })().catch((error: unknown) => {
      if (!res.headersSent) send(res, { status: 500, headers: {}, body: errorBody(String(error), 'server_error', null) })
    })
  })

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    push: (...replies) => void queue.push(...replies),
    pending: () => queue.length,
    close: () =>
      new Promise<void>((resolve, reject) => {
        for (const timer of timers) clearTimeout(timer)
        timers.clear()
        server.close((error) => (error ? reject(error) : resolve()))
        server.closeAllConnections()
      }),
  }
}
