/**
 * An in-memory request inbox: the reference implementation of `RequestInbox`, for a runtime that
 * keeps nothing on disk. No other process reads it, so it takes no cancel requests for threads
 * another process runs (`askCancel` says so with null); requests reach it only from this process,
 * through `submit` (or `leaveRequest`, the same). Approval requests, decisions and escalations are kept, not shown to anyone.
 */
import type { ClaimedRequest, InboxRequest, RequestInbox, RequestKind, RequestLogLine } from './types.js'

export interface MemoryRequestInbox extends RequestInbox {
  /** Leaves a request for a thread, as another writer would: what `claim` reads back. */
  submit(threadId: string, kind: RequestKind, body: unknown, requestId?: string): InboxRequest
  /** The request log so far. */
  readonly logged: readonly RequestLogLine[]
  /** Requests refused so far, by where they were set aside. */
  readonly refused: ReadonlyMap<string, InboxRequest>
  /** Escalations stored so far, by thread. */
  readonly escalations: ReadonlyMap<string, unknown>
}

function keyOf(threadId: string, kind: RequestKind, requestId?: string): string {
  return kind === 'approval' ? `${threadId}/approvals/${requestId}` : `${threadId}/${kind}`
}

/** Where a request left in this inbox is, as reports name it: `(memory)/<thread>/<kind>`. */
const PREFIX = '(memory)/'

const copy = <T>(value: T): T => (value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T))

export function createMemoryRequestInbox(): MemoryRequestInbox {
  const requests = new Map<string, unknown>()
  const decisions = new Map<string, unknown>()
  /** Request ids stored without a decision, by thread: `undecided` is asked once per recovered thread. */
  const undecidedIds = new Map<string, Set<string>>()
  const waiting = new Map<string, { request: InboxRequest; body: unknown }>()
  const claimed = new Set<ClaimedRequest>()
  const refused = new Map<string, InboxRequest>()
  const escalations = new Map<string, unknown>()
  const logged: RequestLogLine[] = []
  let changed = new Set<string>()

  function submit(threadId: string, kind: RequestKind, body: unknown, requestId?: string): InboxRequest {
    const key = keyOf(threadId, kind, requestId)
    const request: InboxRequest = { kind, threadId, ...(requestId !== undefined ? { requestId } : {}), ref: `${PREFIX}${key}` }
    waiting.set(key, { request, body: copy(body) })
    changed.add(threadId)
    return { ...request }
  }

  return {
    logged,
    refused,
    escalations,
    submit,

    hasApproval(threadId, requestId) {
      const key = keyOf(threadId, 'approval', requestId)
      return requests.has(key) || decisions.has(key)
    },

    putApprovalRequest(threadId, requestId, request) {
      const key = keyOf(threadId, 'approval', requestId)
      if (requests.has(key) || decisions.has(key)) return
      requests.set(key, copy(request))
      undecidedIds.set(threadId, (undecidedIds.get(threadId) ?? new Set()).add(requestId))
    },

    putDecision(threadId, requestId, decision) {
      const key = keyOf(threadId, 'approval', requestId)
      if (!requests.has(key)) return
      decisions.set(key, copy(decision))
      undecidedIds.get(threadId)?.delete(requestId)
    },

    undecided(threadId) {
      return [...(undecidedIds.get(threadId) ?? [])]
    },

    putEscalation(threadId, escalation) {
      escalations.set(threadId, copy(escalation))
    },

    answerAt() {
      return null
    },

    askCancel() {
      return null
    },

    // This process reads what is left here: for a thread it runs or watches, the request is acted on.
    leaveRequest(threadId, kind, body, requestId) {
      return submit(threadId, kind, body, requestId).ref
    },

    changed() {
      const ids = changed
      changed = new Set()
      return { ids, missed: false }
    },

    waiting(threadId, kind, requestId) {
      return waiting.has(keyOf(threadId, kind, requestId))
    },

    // Only this process claims from it: nothing is left by one that stopped.
    abandoned() {
      return []
    },

    claim(threadId, kind, requestId) {
      const key = keyOf(threadId, kind, requestId)
      const found = waiting.get(key)
      if (!found) return null
      waiting.delete(key)
      const request: ClaimedRequest = { ...found.request, body: { ok: true, value: copy(found.body) } }
      claimed.add(request)
      return request
    },

    honour(request) {
      claimed.delete(request as ClaimedRequest)
    },

    refuse(request) {
      const held = claimed.delete(request as ClaimedRequest)
      if (!held) {
        // A stray, not claimed: it leaves the requests waiting (found by where it was left).
        const key = request.ref.slice(PREFIX.length)
        if (!request.ref.startsWith(PREFIX) || !waiting.has(key)) return null
        waiting.delete(key)
      }
      let keptAs = `${request.ref}.refused`
      for (let n = 2; refused.has(keptAs); n++) keptAs = `${request.ref}.refused-${n}`
      refused.set(keptAs, { kind: request.kind, threadId: request.threadId, ...(request.requestId !== undefined ? { requestId: request.requestId } : {}), ref: request.ref })
      return keptAs
    },

    strayCancels(passOver) {
      const found: InboxRequest[] = []
      for (const { request } of waiting.values()) {
        if (request.kind === 'cancel' && request.threadId !== null && !passOver(request.threadId)) found.push({ ...request })
      }
      return found
    },

    strayAnswers(threadId, openRequest) {
      const found: Array<InboxRequest & { decided: boolean }> = []
      for (const { request } of waiting.values()) {
        if (request.kind !== 'approval' || request.threadId !== threadId || request.requestId === openRequest) continue
        const key = keyOf(threadId, 'approval', request.requestId)
        const decided = decisions.has(key)
        // An open request this process does not know of is another's to answer.
        if (!decided && requests.has(key)) continue
        found.push({ ...request, decided })
      }
      return found
    },

    log(line) {
      logged.push({ ...line })
      return null
    },

    approvals(threadId) {
      const prefix = `${threadId}/approvals/`
      return [...requests.keys()]
        .filter((key) => key.startsWith(prefix))
        .map((key) => key.slice(prefix.length))
        .sort()
        .map((requestId) => {
          const key = keyOf(threadId, 'approval', requestId)
          return { requestId, request: copy(requests.get(key)), decision: decisions.has(key) ? copy(decisions.get(key)) : null }
        })
    },

    unclaimed(threadId) {
      const found: Array<InboxRequest & { body: ClaimedRequest['body'] }> = []
      for (const { request, body } of waiting.values()) if (request.threadId === threadId) found.push({ ...request, body: { ok: true, value: copy(body) } })
      return found
    },
  }
}
