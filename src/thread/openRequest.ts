/**
 * The approval request a suspended thread waits at — a limit escalation, a tool call to approve, a
 * question — as the runtime stores it for people to answer. Built from the thread's checkpointed
 * context alone, so a reader holding no stored copy of it (the operator commands on a database,
 * whose inbox keeps requests for runtimes only) shows the very request the runtime stored.
 */
import type { ThreadContext } from '../../machines/threadContext.js'
import { escalationMessage } from '../policies/escalation.js'
import type { ApprovalRequest, CallRequest } from './requests.js'

/**
 * @param answerAt where a person answers it (`RequestInbox.answerAt`), null where nobody outside the process can
 * @param now the time a request whose thread records no last input says it was made (ms)
 */
export function openRequestOf(id: string, context: ThreadContext, answerAt: string | null, now: number): ApprovalRequest | CallRequest {
  return context.suspendReason === 'limit' ? limitRequest(id, context, answerAt, now) : callRequest(id, context, answerAt, now)
}

/** The request of a thread paused at a tool call: an approval of the call, or a question to answer. */
function callRequest(id: string, context: ThreadContext, answerAt: string | null, now: number): CallRequest {
  const call = context.pendingCall!
  const common = {
    id: call.requestId,
    threadId: id,
    directive: context.directive.name,
    tool: call.tool,
    callId: call.callId,
    createdAt: new Date(context.lastAt ?? now).toISOString(),
    deadline: call.deadlineAt === null ? null : new Date(call.deadlineAt).toISOString(),
  }
  const file = answerAt ?? '(none: this runtime keeps nothing on disk; answer with rt.approve, rt.deny or rt.answer)'
  if (call.kind === 'approval') {
    return {
      ...common,
      kind: 'tool_approval',
      input: call.input,
      message: `Thread ${id} (${context.directive.name}) wants to call ${call.tool}. Approve it (optionally with edited input) or deny it.`,
      respond: { file, approve: { approved: true, input: call.input }, deny: { approved: false, message: 'why' } },
    }
  }
  return {
    ...common,
    kind: 'question',
    input: call.input,
    request: call.request,
    message: `Thread ${id} (${context.directive.name}) waits for an answer to its ${call.tool} call.`,
    respond: { file, answer: { answer: 'your answer (any JSON value)' } },
  }
}

function limitRequest(id: string, context: ThreadContext, answerAt: string | null, now: number): ApprovalRequest {
  const hit = context.limitHit!
  const cost = { ...context.usage }
  return {
    id: hit.requestId!,
    threadId: id,
    directive: context.directive.name,
    kind: 'limit_escalation',
    limit: hit.limit,
    used: hit.used,
    max: hit.max,
    proposed: hit.proposed,
    cost,
    message: escalationMessage(context.directive.name, hit, cost),
    // When the thread suspended (its last input's time), also for a request written after a
    // restart: the stated timeout runs from the request, not from the process that wrote it.
    createdAt: new Date(context.lastAt ?? now).toISOString(),
    timeoutSeconds: context.policy.escalation.requestTimeoutSeconds,
    respond: {
      file: answerAt ?? '(none: this runtime keeps nothing on disk; answer with rt.approve or rt.deny)',
      approve: { approved: true, ...(hit.proposed !== null ? { limits: { [hit.limit]: hit.proposed } } : {}), message: 'optional note' },
      deny: { approved: false, message: 'why' },
    },
  }
}
