/**
 * The tool gate: whether a tool call may run now, or the thread must first ask a person — the
 * tool's own `needsApproval`, the tools its configuration and directive name, then its
 * `tool_approval` hooks, which may approve or deny in the person's place — and the request id and
 * deadline of a call that pauses (for an approval, or for an answer from outside).
 */
import type { Clock } from '../base/clock.js'
import type { ApprovalVerdict } from '../../actors/effectPorts.js'
import type { Tool } from '../../actors/tools.js'
import type { ToolCall } from '../../machines/threadEvents.js'
import type { LiveThread } from '../thread/liveThread.js'
import type { Reporter } from './events.js'
import type { PolicyDesk } from './policyDesk.js'
import type { ThreadTable } from './threadTable.js'

const RUN: ApprovalVerdict = { verdict: 'run' }

export interface ToolGateDeps {
  table: ThreadTable
  tools: ReadonlyMap<string, Tool>
  policies: Pick<PolicyDesk, 'hooksOf' | 'hookInput'>
  clock: Clock
  bus: Reporter
}

export class ToolGate {
  /** Request ids made in this millisecond, so two pauses of one thread never share one. */
  private lastStamp = ''
  private sameStamp = 0

  constructor(private readonly deps: ToolGateDeps) {}

  /** Synchronous for a call that plainly needs no approval (nearly every call): no extra turn of the event loop. */
  approval(threadId: string, turn: number, call: ToolCall): ApprovalVerdict | Promise<ApprovalVerdict> {
    const thread = this.deps.table.running(threadId)
    const named = thread.context().policy.approvals?.tools ?? []
    if (this.deps.tools.get(call.name)?.needsApproval === false && !named.includes(call.name)) return RUN
    return this.decide(thread, turn, call, named)
  }

  private async decide(thread: LiveThread, turn: number, call: ToolCall, named: readonly string[]): Promise<ApprovalVerdict> {
    const { clock } = this.deps
    const threadId = thread.id
    const context = thread.context()
    if (!(await this.needsApproval(threadId, context.directive.name, named, call))) return RUN
    const hooks = this.deps.policies.hooksOf(threadId)
    if (hooks.has('tool_approval')) {
      const decided = await hooks.decide('tool_approval', this.deps.policies.hookInput(context, { tool: { name: call.name, callId: call.id, input: call.input ?? null } }))
      if (decided.hookId && (decided.action === 'approve' || decided.action === 'deny')) {
        const by = `hook ${decided.hookId}`
        // Recorded before the call runs: the intent that follows is durable only with it.
        thread.note('tool_approval_decided', { at: clock.now(), callId: call.id, tool: call.name, decision: decided.action === 'approve' ? 'approved' : 'denied', by, ...(decided.message ? { message: decided.message } : {}) })
        if (decided.action === 'approve') return RUN
        return { verdict: 'deny', by, reason: decided.message ?? null }
      }
    }
    const timeout = context.policy.approvals?.timeoutSeconds ?? null
    return { verdict: 'ask', requestId: this.requestId('tool', turn), deadlineAt: timeout === null ? null : clock.now() + timeout * 1000 }
  }

  waitRequest(turn: number, deadlineMs: number | undefined): { requestId: string; deadlineAt: number | null } {
    return { requestId: this.requestId('wait', turn), deadlineAt: deadlineMs === undefined ? null : this.deps.clock.now() + deadlineMs }
  }

  /**
   * Whether the call needs a person: named by configuration or directive, or by the tool itself
   * (a function of the validated input). A call whose input the tool's schema rejects needs none:
   * it fails with TOOL_INPUT_INVALID without running. A `needsApproval` that throws asks a person
   * (reported): unsure is not approved.
   */
  private async needsApproval(threadId: string, directive: string, named: readonly string[], call: ToolCall): Promise<boolean> {
    if (named.includes(call.name)) return true
    const tool = this.deps.tools.get(call.name)
    if (!tool) return false
    // A constant needs no input: the schema runs once per call, when the call runs.
    if (typeof tool.needsApproval === 'boolean') return tool.needsApproval
    let parsed: Awaited<ReturnType<typeof tool.input.safeParseAsync>>
    try {
      parsed = await tool.input.safeParseAsync(call.input)
    } catch {
      // A schema that throws is a bug the call's run reports (the thread crashes for its supervisor).
      return false
    }
    if (!parsed.success) return false
    try {
      return (await tool.needsApproval(parsed.data, { threadId, directive })) === true
    } catch (error) {
      this.deps.bus.report(error, threadId)
      return true
    }
  }

  private requestId(kind: 'tool' | 'wait', turn: number): string {
    const stamp = this.deps.clock.now().toString(36)
    this.sameStamp = stamp === this.lastStamp ? this.sameStamp + 1 : 0
    this.lastStamp = stamp
    return `${kind}-${turn}-${stamp}${this.sameStamp ? `-${this.sameStamp}` : ''}`
  }
}
