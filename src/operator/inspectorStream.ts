/**
 * The inspector's server-sent events: one poll of the directory or database for every open page,
 * not one per page, pushing the overview when it changed (with the ids of the threads that
 * changed), and the reply deltas of an in-process runtime as they arrive. Polling rather than
 * watching files: the registry is SQLite in WAL mode and a lease goes stale with no file changing,
 * so a file watch would miss what a poll sees; the poll runs only while a page is connected. A
 * source that announces changes (a database's NOTIFY) has the poll run at once as well.
 */
import type http from 'node:http'
import { describeError } from '../base/errors.js'
import type { Overview } from './inspectorData.js'
import type { ReplyDelta } from '../../actors/replyDelta.js'

/**
 * A piece of a model reply as it streams, for the page to show before the reply is recorded.
 * `text`: more of the reply's text; `tool_call`: a call begins (`callId`, `toolName`);
 * `tool_input`: more of a call's input JSON (`callId`, `text`); `reply_recorded`: the reply is in
 * the transcript, the page shows it from there; `reply_discarded`: the stream broke (`reason`), what
 * was streamed of this attempt is not the reply.
 */
/** What the page keeps of a delta: the runtime's `ReplyDelta`, its text joined as it arrives. */
interface StreamedPiece {
  type: 'text' | 'tool_call' | 'tool_input' | 'reply_recorded' | 'reply_discarded'
  threadId: string
  turn: number
  attempt: number
  text?: string
  callId?: string
  toolName?: string
  reason?: string
}

/** Subscribes a listener to a runtime's reply deltas and returns how to unsubscribe (e.g. `rt.onReply`). */
export type ReplySource = (listener: (delta: ReplyDelta) => void) => () => void
export type { ReplyDelta }

export interface InspectorStream {
  /** Takes over a GET /events response: it stays open, receiving every push, until the page goes. */
  attach(request: http.IncomingMessage, response: http.ServerResponse): void
  /** Threads changed (a request was left, another process announced a change): poll now rather than at the next tick. */
  nudge(): void
  close(): void
}

const frame = (event: string, data: unknown): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`

/** Per thread, what has streamed of the reply in flight, so a page opened half way sees it from its start. */
function partials() {
  const open = new Map<string, StreamedPiece[]>()
  return {
    add(delta: ReplyDelta): void {
      if (delta.type === 'reply_recorded' || delta.type === 'reply_discarded') {
        open.delete(delta.threadId)
        return
      }
      let kept = open.get(delta.threadId)
      if (!kept || kept[0]!.turn !== delta.turn || kept[0]!.attempt !== delta.attempt) open.set(delta.threadId, (kept = []))
      const last = kept.at(-1)
      // Text arrives a few characters at a time: kept as one delta, so the buffer grows with the reply, not with its chunks.
      if (last && last.type === delta.type && delta.type !== 'tool_call' && last.callId === ('callId' in delta ? delta.callId : undefined)) last.text = (last.text ?? '') + delta.text
      else kept.push({ ...delta })
    },
    all: (): StreamedPiece[] => [...open.values()].flat(),
  }
}

/** The least time between two polls that nudges bring forward: a burst of them is one poll. */
const ANNOUNCED_GAP_MS = 100

export interface InspectorStreamOptions {
  /** The overview as it stands now (throws when it cannot be read). */
  read: () => Overview
  pollMs: number
  replies?: ReplySource
}

export function inspectorStream(options: InspectorStreamOptions): InspectorStream {
  const clients = new Set<http.ServerResponse>()
  const streamed = partials()
  let timer: NodeJS.Timeout | null = null
  let soon: NodeJS.Timeout | null = null
  let last = ''
  let lastThreads = new Map<string, string>()
  let ticks = 0
  let polledAt = 0

  const broadcast = (text: string): void => {
    for (const client of clients) client.write(text)
  }

  const poll = (): void => {
    ticks++
    polledAt = Date.now()
    let view: Overview
    try {
      view = options.read()
    } catch (error) {
      broadcast(frame('problem', describeError(error)))
      // The first overview read again is pushed even if nothing changed meanwhile: it takes the
      // problem off the page.
      last = ''
      return
    }
    const text = JSON.stringify(view)
    if (text === last) {
      // A comment now and then: proxies and the browser keep an idle stream open.
      if (ticks % 30 === 0) broadcast(': still here\n\n')
      return
    }
    last = text
    const threads = new Map(view.threads.map((t) => [t.id, JSON.stringify(t)]))
    const changed = [...threads].filter(([id, json]) => lastThreads.get(id) !== json).map(([id]) => id)
    const removed = [...lastThreads.keys()].filter((id) => !threads.has(id))
    lastThreads = threads
    broadcast(frame('overview', { ...view, changed: [...changed, ...removed] }))
  }

  const unsubscribe = options.replies?.((delta) => {
    streamed.add(delta)
    broadcast(frame('reply', delta))
  })


  return {
    attach(request, response) {
      response.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-store',
        connection: 'keep-alive',
        'x-content-type-options': 'nosniff',
      })
      // EventSource reconnects by itself after a drop, a second later.
      response.write('retry: 1000\n\n')
      try {
        const view = options.read()
        response.write(frame('overview', { ...view, changed: view.threads.map((t) => t.id) }))
      } catch (error) {
        response.write(frame('problem', describeError(error)))
      }
      for (const delta of streamed.all()) response.write(frame('reply', delta))
      clients.add(response)
      timer ??= setInterval(poll, options.pollMs)
      request.on('close', () => {
        clients.delete(response)
        if (clients.size === 0 && timer) {
          clearInterval(timer)
          timer = null
          // The next page to connect gets the whole overview anyway; the next poll compares afresh.
          last = ''
          lastThreads = new Map()
        }
      })
    },
    nudge() {
      // Only while a page is connected, as the poll; a burst of nudges is one poll.
      if (!timer || soon) return
      soon = setTimeout(() => {
        soon = null
        if (timer) poll()
      }, Math.max(0, polledAt + ANNOUNCED_GAP_MS - Date.now()))
    },
    close() {
      if (timer) clearInterval(timer)
      if (soon) clearTimeout(soon)
      timer = soon = null
      unsubscribe?.()
      for (const client of clients) client.end()
      clients.clear()
    },
  }
}
