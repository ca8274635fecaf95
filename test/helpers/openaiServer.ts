/**
 * A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol
 * (`POST /v1/chat/completions`) from a queue of scripted replies, and records every request body it
 * receives. A request with `stream: true` gets a text or tool-call reply as server-sent events
 * (`chat.completion.chunk` objects, a usage chunk, `data: [DONE]`), in pieces of `chunkChars`
 * characters `chunkDelayMs` apart; `cutAfterChunks` destroys the socket after that many events, as
 * a connection lost half way would. Error replies are plain JSON either way, as OpenAI sends them.
 * Tests point a real provider at it:
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
  /** Streamed: characters of text (and of tool arguments) per event (default 4). */
  chunkChars?: number
  /** Streamed: ms between events (default 0). */
  chunkDelayMs?: number
  /** Streamed: the connection is destroyed after this many events, before the reply is whole. */
  cutAfterChunks?: number
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
  /** Streamed: events sent, and whether the client closed the connection before the last. */
  stream?: { chunks: number; closedByClient: boolean; cut: boolean }
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

type StreamedReply = Extract<OpenAIReply, { kind: 'text' | 'toolCalls' }>

/** The chunk objects of a streamed reply, in order: OpenAI's `chat.completion.chunk` format. */
function chunksOf(reply: StreamedReply, sequence: number): unknown[] {
  const size = Math.max(1, reply.chunkChars ?? 4)
  const base = { id: `chatcmpl-test-${sequence}`, object: 'chat.completion.chunk', created: 1_767_225_600, model: 'gpt-4o-mini-test', system_fingerprint: null }
  const chunk = (delta: Record<string, unknown>, finishReason: string | null = null): unknown => ({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }] })
  const pieces = (text: string): string[] => {
    const out: string[] = []
    for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
    return out
  }
  const chunks: unknown[] = [chunk({ role: 'assistant', content: '' })]
  for (const piece of pieces(reply.text ?? '')) chunks.push(chunk({ content: piece }))
  if (reply.kind === 'toolCalls') {
    reply.calls.forEach((call, index) => {
      const args = typeof call.arguments === 'string' ? call.arguments : JSON.stringify(call.arguments)
      chunks.push(chunk({ tool_calls: [{ index, id: call.id ?? `call_${sequence}_${index + 1}`, type: 'function', function: { name: call.name, arguments: '' } }] }))
      for (const piece of pieces(args)) chunks.push(chunk({ tool_calls: [{ index, function: { arguments: piece } }] }))
    })
  }
  chunks.push(chunk({}, reply.kind === 'toolCalls' ? 'tool_calls' : 'stop'))
  const counts = reply.usage === undefined ? DEFAULT_USAGE : reply.usage
  if (counts) {
    chunks.push({
      ...base,
      choices: [],
      usage: { prompt_tokens: counts.promptTokens, completion_tokens: counts.completionTokens, total_tokens: counts.promptTokens + counts.completionTokens },
    })
  }
  return chunks
}

/** Sends a streamed reply event by event, noting in `recorded` how far it got and how it ended. */
function sendStream(res: http.ServerResponse, reply: StreamedReply, sequence: number, recorded: NonNullable<RecordedRequest['stream']>, timers: Set<NodeJS.Timeout>): void {
  const events = [...chunksOf(reply, sequence).map((c) => JSON.stringify(c)), '[DONE]']
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' })
  res.flushHeaders()
  let next = 0
  let timer: NodeJS.Timeout | null = null
  res.on('close', () => {
    if (timer) clearTimeout(timer)
    if (next < events.length && !recorded.cut) recorded.closedByClient = true
  })
  const step = (): void => {
    if (res.destroyed) return
    const cut = (): void => {
      recorded.cut = true
      res.socket?.destroy()
    }
    if (reply.cutAfterChunks !== undefined && next >= reply.cutAfterChunks) return cut()
    if (next === events.length) {
      res.end()
      return
    }
    next++
    recorded.chunks = next
    // The cut comes once the last event is on the wire: destroyed at once, it would never leave.
    if (reply.cutAfterChunks !== undefined && next >= reply.cutAfterChunks) {
      res.write(`data: ${events[next - 1]}\n\n`, () => setTimeout(cut, 20))
      return
    }
    res.write(`data: ${events[next - 1]}\n\n`)
    if (!reply.chunkDelayMs) return step()
    const pending = setTimeout(() => {
      timers.delete(pending)
      timer = null
      step()
    }, reply.chunkDelayMs)
    timer = pending
    timers.add(pending)
  }
  step()
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
      const sequence = requests.length
      const streamed = (body as { stream?: unknown } | null)?.stream === true && (reply.kind === 'text' || reply.kind === 'toolCalls')
      const recorded = requests[requests.length - 1]!
      const respond = (): void => {
        if (!streamed) return send(res, answer(reply, sequence))
        recorded.stream = { chunks: 0, closedByClient: false, cut: false }
        sendStream(res, reply as StreamedReply, sequence, recorded.stream, timers)
      }
      if (!reply.delayMs) {
        respond()
        return
      }
      const timer = setTimeout(() => {
        timers.delete(timer)
        if (!res.destroyed) respond()
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
