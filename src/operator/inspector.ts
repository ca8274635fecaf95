/**
 * `spindle inspect`: a local page over a data directory — the thread tree, each thread's state,
 * cost against limits, its transcript, pending approvals with Approve and Deny buttons, and the
 * answers a runtime rejected. It listens on 127.0.0.1 only, and every request must carry the
 * session token printed with the URL, so other sites in the same browser cannot act through it.
 * Decisions are written as approval response files, which the runtime running the directory
 * carries out.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { describeError, isSpindleError } from '../base/errors.js'
import { threadLog } from './operator.js'
import { recordOf, withRegistry } from './registryAccess.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { assertDataDir, dataPaths } from '../../persistence/paths.js'
import { answerThread, approveThread, denyThread, orphanWhy, threadTree } from './operatorActions.js'
import { isActive } from '../thread/threadStatus.js'
import { stepOfSnapshot } from '../thread/threadView.js'
import { locks } from './locks.js'
import { statechartSvg } from './statechartSvg.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { TreeNode } from './operatorActions.js'
import { approvalAnswer, openApprovalRequest } from '../thread/requests.js'
import { describeAnswer, rejectedAnswers } from '../thread/approvalRecords.js'
import { visualizations } from './visualize.js'
import { inspectorPage } from './inspectorPage.js'
import { readBudgets } from './budgetFigures.js'
import type { BudgetView } from '../runtime/budgetView.js'

export interface Inspector {
  url: string
  token: string
  close(): Promise<void>
}

function flatten(nodes: TreeNode[], out: TreeNode[] = []): TreeNode[] {
  for (const node of nodes) {
    out.push(node)
    flatten(node.children, out)
  }
  return out
}

/** The approval request a thread waits at, with the answer given to it if any (a list: the page loops). */
function openApprovals(dir: string, id: string, status: TreeNode['status']) {
  const open = status === 'suspended' ? openApprovalRequest(dir, id, status) : null
  return open ? [{ ...open, answer: approvalAnswer(dir, id, open.id) }] : []
}

/** What the page shows, as JSON. */
function overview(dir: string) {
  const tree = threadTree(dir)
  const leases = new Map(locks(dir).locks.map((l) => [l.threadId, l]))
  const orphans: Record<string, string> = {}
  // Once a second for every thread: the registry (read once, above) and each state.json, never the
  // transcripts — the selected thread's own is fetched and verified by its detail view.
  const checkpoints = createFileCheckpointStore({ paths: dataPaths(dir), durability: 'process' })
  const nodes = flatten(tree)
  let budgets: Map<string, BudgetView> = new Map()
  const ledgerProblems: Array<{ code: string; message: string }> = []
  try {
    budgets = readBudgets(dir, nodes.map((n) => n.id))
  } catch (error) {
    ledgerProblems.push(describeError(error))
  }
  const threads = nodes.map((node) => {
    const report: { state: { value: unknown; context: ThreadContext } | null; problems: Array<{ code: string; message: string }> } = { state: null, problems: [...ledgerProblems] }
    try {
      const envelope = checkpoints.load(node.id)
      if (envelope) report.state = envelope.snapshot as { value: unknown; context: ThreadContext }
    } catch (error) {
      report.problems.push(describeError(error))
    }
    const context = report.state?.context
    const lease = leases.get(node.id)
    // A thread the registry calls running that no live process holds must not look alive.
    const orphan = isActive(node.status) ? orphanWhy(lease) : null
    if (orphan) orphans[node.id] = orphan
    return {
      id: node.id,
      directive: node.directive,
      status: node.status,
      state: report.state?.value ?? null,
      // What its last checkpoint says the runtime runs for it (a model call, which tool …).
      step: report.state ? stepOfSnapshot(report.state as Parameters<typeof stepOfSnapshot>[0]) : null,
      usage: context?.usage ?? null,
      limits: context?.limits ?? null,
      // As rt.budget gives it: the page shows what its children spent and hold, not only its own cost.
      budget: budgets.get(node.id) ?? null,
      retries: context?.retries ?? 0,
      lastError: context?.lastError ?? null,
      suspendReason: context?.suspendReason ?? null,
      result: context?.result ?? null,
      error: context?.error ?? null,
      tools: context?.policy.tools ?? null,
      permissions: context?.policy.permissions ?? null,
      orphan,
      heldBy: lease?.state === 'live' ? { owner: lease.owner, pid: lease.pid, host: lease.host } : null,
      // An answer stays on the page until the runtime acts on it, however often the page refreshes.
      approvals: openApprovals(dir, node.id, node.status),
      problems: report.problems,
    }
  })
  return { tree, threads, orphans }
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

export async function startInspector(options: { dir: string; port?: number }): Promise<Inspector> {
  // A page over a directory that is not there would only show errors, once a second.
  assertDataDir(dataPaths(options.dir))
  const token = randomBytes(16).toString('hex')
  const expected = Buffer.from(token)
  const authorised = (request: http.IncomingMessage, url: URL): boolean => {
    const given = Buffer.from(url.searchParams.get('token') ?? String(request.headers['x-spindle-token'] ?? ''))
    return given.length === expected.length && timingSafeEqual(given, expected)
  }
  let port = 0
  // Laid out once per inspector, on first use: the machine does not change while it runs.
  let chart: Promise<string> | undefined
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
      if (request.method === 'GET' && url.pathname === '/') return send(200, inspectorPage(token), 'text/html; charset=utf-8')
      if (request.method === 'GET' && url.pathname === '/api/overview') return send(200, overview(options.dir))
      if (request.method === 'GET' && url.pathname === '/api/statechart') {
        chart ??= statechartSvg(threadMachine)
        return send(200, { svg: await chart, mermaid: visualizations()['thread.machine.mmd'] })
      }
      const match = /^\/api\/threads\/([a-z0-9_-]+)\/(transcript|rejected|approve|deny|answer)$/.exec(url.pathname)
      if (match) {
        const [, id, what] = match as unknown as [string, string, string]
        if (request.method === 'GET' && what === 'transcript') return send(200, threadLog(options.dir, id).entries.slice(-200))
        if (request.method === 'GET' && what === 'rejected') {
          // An unknown thread is refused (404) as for its transcript.
          withRegistry(options.dir, (registry) => recordOf(registry, options.dir, id))
          return send(200, rejectedAnswers(dataPaths(options.dir), id).map((r) => ({ ...r, summary: describeAnswer(r.answer) })))
        }
        if (request.method === 'POST' && what === 'approve') {
          const { limits, input, message } = (await body(request)) as { limits?: Record<string, number>; input?: unknown; message?: string }
          return send(200, approveThread(options.dir, id, { ...(limits ? { limits } : {}), ...(input !== undefined ? { input } : {}), ...(message ? { message } : {}) }, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'answer') {
          const { answer } = (await body(request)) as { answer?: unknown }
          return send(200, answerThread(options.dir, id, answer, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'deny') {
          const { reason } = (await body(request)) as { reason?: string }
          return send(200, denyThread(options.dir, id, reason, 'spindle inspect'))
        }
      }
      send(404, { error: 'NOT_FOUND', message: `${request.method} ${url.pathname} is not part of the inspector.` })
    } catch (error) {
      const { code, message } = describeError(error)
      send(isSpindleError(error) && code === 'THREAD_NOT_FOUND' ? 404 : 400, { error: code, message })
    }
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve())
  })
  port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/?token=${token}`,
    token,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}
