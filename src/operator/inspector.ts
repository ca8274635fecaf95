/**
 * `spindle inspect`: a local page over a data directory or a PostgreSQL database — what waits for
 * a person (approvals, questions, threads to resume) with the buttons to decide it, the thread
 * tree, each thread's conversation, state, cost against limits and budget, and the answers a
 * runtime rejected — kept up to date by server-sent events. It listens on 127.0.0.1 only, and
 * every request, the events channel included, must carry the session token printed with the URL,
 * so other sites in the same browser cannot read or act through it. Decisions are left as the CLI
 * leaves them (request and response files, or requests in the database's inbox), for the runtime
 * running the thread to carry out: the inspector runs no thread, takes no lease, claims nothing.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { SpindleError, describeError, isSpindleError } from '../base/errors.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { DatabaseOptions } from '../runtime/openPostgresStores.js'
import { describeAnswer } from '../thread/approvalRecords.js'
import { inspectorPage } from './inspectorPage.js'
import { overview } from './inspectorData.js'
import type { InspectorSource } from './inspectorSource.js'
import { directorySource } from './inspectorDirectory.js'
import { databaseSource } from './inspectorDatabase.js'
import { databaseOptions } from '../runtime/openPostgresStores.js'
import { conversationOf } from './threadConversation.js'
import { inspectorStream } from './inspectorStream.js'
import type { ReplySource } from './inspectorStream.js'
import type { RequestWritten } from './operatorActions.js'

export type { ReplyDelta, ReplySource } from './inspectorStream.js'

export interface Inspector {
  /** The page's address on 127.0.0.1, with the session token. */
  url: string
  token: string
  /** Ends the open event streams and stops listening. */
  close(): Promise<void>
}

export interface InspectorOptions {
  /** The data directory (default `.spindle`); not with `database`. */
  dir?: string
  /**
   * A PostgreSQL database holding the threads instead (a URL, or `{ url, schema }` as
   * `createRuntime` takes it): its stores are opened once, when the inspector starts, and closed
   * by `close()`. Refused with DATA_DIR_NOT_FOUND when its schema holds no spindle tables.
   */
  database?: string | DatabaseOptions
  /** Port on 127.0.0.1 (default: any free one). */
  port?: number
  /**
   * A runtime's reply deltas, when the inspector runs in the runtime's process (e.g. `rt.onReply`):
   * the page shows each reply as it streams, until it is recorded.
   */
  replies?: ReplySource
  /**
   * How often the directory or database is read for changes while a page is open, in ms (default
   * 500). On a database, what its processes announce (a thread suspended, ended, a request left)
   * is read at once as well.
   */
  pollMs?: number
  /**
   * The session token (default: a new random one). A host that serves the inspector again after a
   * restart, on the same port with the same token, lets its open pages reconnect by themselves.
   * 32 to 128 hexadecimal digits: it is the only key to the page.
   */
  token?: string
}

function sessionToken(given: string | undefined): string {
  if (given === undefined) return randomBytes(16).toString('hex')
  if (!/^[0-9a-f]{32,128}$/i.test(given)) {
    throw new SpindleError('INVALID_OPTIONS', `token must be 32 to 128 hexadecimal digits (got ${given.length} characters): it is the only key to the inspector. Leave it out for a random one.`, { details: { field: 'token' } })
  }
  return given
}

async function body(request: http.IncomingMessage): Promise<unknown> {
  let text = ''
  // Decoded as a stream: a character split across two chunks stays one character.
  request.setEncoding('utf8')
  for await (const chunk of request) {
    text += chunk
    if (text.length > 65536) throw new Error('request body too large')
  }
  return text === '' ? {} : JSON.parse(text)
}

/** The Host header a browser sends for the inspector's own URL (127.0.0.1 or localhost, any port). */
const LOCAL_HOST = /^(?:127\.0\.0\.1|localhost)(?::\d{1,5})?$/i

/**
 * The source an inspector serves: the database when `database` is given, else the directory.
 * Refuses both at once, as the CLI refuses `--dir` with `--db`, and a place without spindle data.
 */
export function openInspectorSource(options: { dir?: string; database?: string | DatabaseOptions }): InspectorSource {
  if (options.database === undefined) return directorySource(options.dir ?? '.spindle')
  if (options.dir !== undefined) {
    throw new SpindleError('INVALID_OPTIONS', 'dir and database name two places: give one (dir for a data directory, database for a PostgreSQL database).', { details: { field: 'database' } })
  }
  return databaseSource(databaseOptions(options.database, 'database'))
}

/** Serves the inspector on 127.0.0.1 until `close()`. What `spindle inspect` runs (without `replies`). */
export async function serveInspector(options: InspectorOptions): Promise<Inspector> {
  const token = sessionToken(options.token)
  // Once per inspector: on a database, its stores stay open for every request until close().
  const source = openInspectorSource(options)
  const expected = Buffer.from(token)
  const authorised = (request: http.IncomingMessage, url: URL): boolean => {
    const given = Buffer.from(url.searchParams.get('token') ?? String(request.headers['x-spindle-token'] ?? ''))
    return given.length === expected.length && timingSafeEqual(given, expected)
  }
  let port = 0
  // Laid out once per inspector, on first use: the machine does not change while it runs.
  let chart: Promise<string> | undefined
  const stream = inspectorStream({
    read: () => overview(source),
    pollMs: options.pollMs ?? 500,
    ...(options.replies ? { replies: options.replies } : {}),
  })
  const unwatch = source.watch?.(() => stream.nudge())
  const server = http.createServer(async (request, response) => {
    const send = (status: number, value: unknown, type = 'application/json'): void => {
      response.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' })
      response.end(type === 'application/json' ? JSON.stringify(value) : String(value))
    }
    // A request line the URL parser refuses (`GET http://[ HTTP/1.1`) is the client's error: thrown
    // here, outside the try below, it ended the whole process as an unhandled rejection.
    let url: URL
    try {
      url = new URL(request.url ?? '/', 'http://127.0.0.1')
    } catch {
      return send(400, { error: 'BAD_REQUEST', message: 'The request target is not a valid URL.' })
    }
    // DNS rebinding: a page whose name now resolves to 127.0.0.1 still sends its own name as Host.
    if (!LOCAL_HOST.test(request.headers.host ?? '')) return send(403, { error: 'FORBIDDEN', message: 'The inspector answers requests for 127.0.0.1 or localhost only.' })
    if (!authorised(request, url)) return send(403, { error: 'FORBIDDEN', message: 'Open the URL spindle inspect printed: it carries the session token.' })
    // Decisions come from the inspector's own page (or a script that sends no Origin), never from another site's.
    const origin = request.headers.origin
    if (request.method !== 'GET' && origin !== undefined && origin !== `http://127.0.0.1:${port}` && origin !== `http://localhost:${port}`) {
      return send(403, { error: 'FORBIDDEN', message: `Requests from ${origin} may not change anything here.` })
    }
    try {
      if (request.method === 'GET' && url.pathname === '/') return send(200, inspectorPage(token, source), 'text/html; charset=utf-8')
      if (request.method === 'GET' && url.pathname === '/api/overview') return send(200, overview(source))
      if (request.method === 'GET' && url.pathname === '/events') return stream.attach(request, response)
      if (request.method === 'GET' && url.pathname === '/api/statechart') {
        // Loaded on first use: the layout engine is large, and `import 'spindle'` brings this module in.
        chart ??= import('./statechartSvg.js').then(({ statechartSvg }) => statechartSvg(threadMachine))
        const { visualizations } = await import('./visualize.js')
        return send(200, { svg: await chart, mermaid: visualizations()['thread.machine.mmd'] })
      }
      const match = /^\/api\/threads\/([a-z0-9_-]+)\/(transcript|conversation|rejected|approve|deny|answer|cancel|resume)$/.exec(url.pathname)
      if (match) {
        const [, id, what] = match as unknown as [string, string, string]
        // Every open page is shown what was left at once, not at the next poll.
        const left = (written: RequestWritten): void => {
          stream.nudge()
          send(200, written)
        }
        if (request.method === 'GET' && what === 'transcript') return send(200, source.transcript(id).slice(-200))
        if (request.method === 'GET' && what === 'conversation') return send(200, conversationOf(source.transcript(id)))
        if (request.method === 'GET' && what === 'rejected') {
          const rejected = source.rejected(id)
          if (rejected === null) {
            return send(501, { error: 'NOT_KEPT', message: 'A database keeps the answers its runtimes rejected in its inbox, which the inspector does not read back yet.' })
          }
          return send(200, rejected.map((r) => ({ ...r, summary: describeAnswer(r.answer) })))
        }
        if (request.method === 'POST' && what === 'approve') {
          const { limits, input, message } = (await body(request)) as { limits?: Record<string, number>; input?: unknown; message?: string }
          return left(source.approve(id, { ...(limits ? { limits } : {}), ...(input !== undefined ? { input } : {}), ...(message ? { message } : {}) }, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'answer') {
          const { answer } = (await body(request)) as { answer?: unknown }
          return left(source.answer(id, answer, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'deny') {
          const { reason } = (await body(request)) as { reason?: string }
          return left(source.deny(id, reason, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'cancel') {
          const { reason } = (await body(request)) as { reason?: string }
          return left(source.cancel(id, reason || 'cancelled from spindle inspect', 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'resume') return left(source.resume(id, 'spindle inspect'))
      }
      send(404, { error: 'NOT_FOUND', message: `${request.method} ${url.pathname} is not part of the inspector.` })
    } catch (error) {
      const { code, message } = describeError(error)
      // A database that does not answer is no fault of the request: the page may ask again.
      const status = !isSpindleError(error) ? 400 : code === 'THREAD_NOT_FOUND' ? 404 : code === 'DATABASE_UNAVAILABLE' ? 503 : 400
      send(status, { error: code, message })
    }
  })
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(options.port ?? 0, '127.0.0.1', () => resolve())
    })
  } catch (error) {
    source.close()
    throw error
  }
  port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/?token=${token}`,
    token,
    close: () => {
      // Open event streams would keep server.close waiting for ever.
      unwatch?.()
      stream.close()
      server.closeAllConnections()
      return new Promise((resolve) =>
        server.close(() => {
          // After the last request is answered: none reads the stores once they are closed.
          source.close()
          resolve()
        }),
      )
    },
  }
}

/** The name the tests and the CLI knew it by. */
export const startInspector = serveInspector
