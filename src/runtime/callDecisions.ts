/**
 * Decisions on the tool call a thread is suspended at: approve it (with the input as the model
 * gave it, or as the approver edited it, checked by the tool's schema), deny it (the reason is the
 * call's result and the thread goes on), answer it (the answer is its result), or let its deadline
 * pass. Each is recorded as CALL_DECIDED before the thread acts on it, so the tool never runs
 * before its approval is durable; the decision file next to the request follows. A thread
 * suspended for anything else is passed on to the limit decisions (decisions.ts).
 */
import { z } from 'zod'
import type { Clock } from '../base/clock.js'
import { SpindleError } from '../base/errors.js'
import type { Tool } from '../../actors/tools.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { PendingCall } from '../../machines/threadContext.js'
import type { ThreadOutcome } from '../../machines/threadOutcome.js'
import type { GroupCommit } from '../../persistence/groupCommit.js'
import type { TranscriptStore } from '../../persistence/types.js'
import type { LiveThread } from '../thread/liveThread.js'
import type { ThreadHandle } from '../thread/threadView.js'
import type { AnswerOptions, ApproveOptions } from './api.js'
import type { Approvals } from './approvals.js'
import type { Decisions, Suspended } from './decisions.js'
import { assertText } from './decisions.js'

/** The most characters of JSON an answer may take: it is recorded and sent to the model. */
const MAX_ANSWER_CHARS = 1024 * 1024

export interface CallDecisionsDeps {
  decisions: Pick<Decisions, 'readSuspended' | 'wake' | 'deciding' | 'logged' | 'approve' | 'deny'>
  approvals: Pick<Approvals, 'writeDecision'>
  commit: Pick<GroupCommit, 'whenLogged'>
  transcripts: Pick<TranscriptStore, 'close'>
  tools: ReadonlyMap<string, Tool>
  clock: Clock
}

type Decided = Extract<ThreadEvent, { type: 'CALL_DECIDED' }>

export class CallDecisions {
  constructor(private readonly deps: CallDecisionsDeps) {}

  /** `rt.approve`: a tool call's approval, or (suspended for anything else) a limit's. */
  async approve(id: string, options: ApproveOptions = {}): Promise<ThreadHandle> {
    assertText(options.by, 'by')
    assertText(options.message, 'message')
    const stored = await this.deps.decisions.readSuspended(id)
    const pending = stored.context.pendingCall
    if (stored.context.suspendReason !== 'tool_approval' || !pending) {
      if (options.input !== undefined) throw this.notAt(id, stored, 'a tool approval', 'input')
      if (stored.context.suspendReason === 'waiting') throw this.notAt(id, stored, 'a tool approval')
      return this.deps.decisions.approve(id, options, stored)
    }
    this.assertRequest(id, pending, options.requestId)
    if (options.limits !== undefined) throw this.notAt(id, stored, 'a limit', 'limits')
    if (options.input !== undefined) await this.assertInput(id, pending, options.input)
    const decision = {
      decision: 'approved' as const,
      by: options.by ?? 'api',
      ...(options.input !== undefined ? { input: options.input } : {}),
      ...(options.message !== undefined ? { message: options.message } : {}),
    }
    return this.decide(id, stored, decision, options.message ?? null)
  }

  /**
   * `rt.deny`: at a tool approval the reason is the call's result and the thread goes on (its
   * handle comes back once the denial is recorded); at anything else the thread ends (decisions.ts)
   * and its outcome comes back.
   */
  async deny(id: string, reason?: string, options: { by?: string; requestId?: string } = {}): Promise<{ goesOn: true; thread: ThreadHandle } | { goesOn: false; outcome: ThreadOutcome }> {
    assertText(reason, 'reason')
    assertText(options.by, 'by')
    const stored = await this.deps.decisions.readSuspended(id)
    const pending = stored.context.pendingCall
    if (stored.context.suspendReason === 'tool_approval' && pending) {
      this.assertRequest(id, pending, options.requestId)
      const thread = await this.decide(id, stored, { decision: 'denied', by: options.by ?? 'api', reason: reason ?? null }, reason ?? null)
      return { goesOn: true, thread }
    }
    return { goesOn: false, outcome: await this.deps.decisions.deny(id, reason, options, stored) }
  }

  /** `rt.answer`: the answer to the call a thread waits at (`ask_human`, `waitForAnswer`) becomes its result. */
  async answer(id: string, answer: unknown, options: AnswerOptions = {}): Promise<ThreadHandle> {
    assertText(options.by, 'by')
    const json = answer === undefined ? undefined : JSON.stringify(answer)
    if (json === undefined || json.length > MAX_ANSWER_CHARS) {
      throw new SpindleError(
        'INVALID_OPTIONS',
        json === undefined ? 'answer: give a value with a JSON form (text, a number, an object …).' : `answer: ${json.length} characters of JSON, more than the ${MAX_ANSWER_CHARS} an answer may take.`,
        { details: { field: 'answer', threadId: id } },
      )
    }
    const stored = await this.deps.decisions.readSuspended(id)
    const pending = stored.context.pendingCall
    if (stored.context.suspendReason !== 'waiting' || !pending) throw this.notAt(id, stored, 'a question or a wait for an answer')
    this.assertRequest(id, pending, options.requestId)
    return this.decide(id, stored, { decision: 'answered', by: options.by ?? 'api', answer: JSON.parse(json) as unknown }, null)
  }

  /**
   * A paused call's deadline has passed: a wait ends with a timeout result, an approval request
   * as the thread's policy says (denied, or left waiting). False when the thread no longer waits
   * at `requestId`, or its policy leaves it waiting.
   */
  async deadlinePassed(id: string, requestId: string): Promise<boolean> {
    const stored = await this.deps.decisions.readSuspended(id)
    const pending = stored.context.pendingCall
    if (!pending || pending.requestId !== requestId) {
      this.closeUnread(id)
      return false
    }
    if (pending.kind === 'wait') {
      await this.decide(id, stored, { decision: 'timed_out', by: 'deadline' }, null)
      return true
    }
    if ((stored.context.policy.approvals?.onTimeout ?? 'deny') === 'stay') {
      this.closeUnread(id)
      return false
    }
    const seconds = stored.context.policy.approvals?.timeoutSeconds
    const reason = `no one decided within ${seconds ?? '?'} s (approvals.onTimeout: deny)`
    await this.decide(id, stored, { decision: 'denied', by: 'deadline', reason }, reason)
    return true
  }

  /** Wakes the thread with the decision, waits until it is logged, writes the decision file. */
  private decide(id: string, stored: Suspended, decision: Omit<Decided, 'type' | 'at' | 'callId' | 'requestId'>, message: string | null): Promise<LiveThread> {
    const { decisions, approvals, clock } = this.deps
    const pending = stored.context.pendingCall!
    const at = clock.now()
    const event: Decided = { type: 'CALL_DECIDED', at, callId: pending.callId, requestId: pending.requestId, ...decision }
    return decisions.deciding(id, pending.requestId, async () => {
      const thread = decisions.wake(id, stored, null, event)
      if (await decisions.logged()) {
        approvals.writeDecision(id, pending.requestId, {
          decision: decision.decision,
          by: decision.by,
          at: new Date(at).toISOString(),
          message,
          ...(decision.input !== undefined ? { input: decision.input } : {}),
          ...(decision.answer !== undefined ? { answer: decision.answer } : {}),
        })
      }
      return thread
    })
  }

  /** REQUEST_MISMATCH when the caller decided on another request than the one the thread waits at. */
  private assertRequest(id: string, pending: PendingCall, requestId: string | undefined): void {
    if (requestId === undefined || requestId === pending.requestId) return
    this.closeUnread(id)
    throw new SpindleError(
      'NO_PENDING_APPROVAL',
      `Thread ${id} waits at request ${pending.requestId} (${pending.tool}), not at ${requestId}: that one was decided already, or never existed. Nothing was decided.`,
      { details: { threadId: id, requestId, open: pending.requestId } },
    )
  }

  /** TOOL_INPUT_INVALID when edited input does not pass the tool's schema; the request stays open. */
  private async assertInput(id: string, pending: PendingCall, input: unknown): Promise<void> {
    const tool = this.deps.tools.get(pending.tool)
    let problem: string | null = null
    if (JSON.stringify(input) === undefined) problem = 'it has no JSON form'
    else if (tool) {
      const parsed = await tool.input.safeParseAsync(input)
      if (!parsed.success) problem = z.prettifyError(parsed.error)
    }
    if (problem === null) return
    this.closeUnread(id)
    throw new SpindleError(
      'TOOL_INPUT_INVALID',
      `The edited input for "${pending.tool}" (call ${pending.callId} of thread ${id}) is not valid input for the tool: ${problem}. Nothing was decided; the request stays open.`,
      { details: { threadId: id, tool: pending.tool, callId: pending.callId } },
    )
  }

  private notAt(id: string, stored: Suspended, what: string, field?: string): SpindleError {
    this.closeUnread(id)
    const at = stored.context.pendingCall
    const now =
      stored.context.suspendReason === 'tool_approval' && at
        ? `at a tool approval (${at.tool}): approve it, with edited input if need be, or deny it`
        : stored.context.suspendReason === 'waiting' && at
          ? `waiting for an answer to its ${at.tool} call: answer it with rt.answer / spindle answer`
          : `suspended for ${stored.context.suspendReason ?? 'an unknown reason'}`
    return new SpindleError(
      stored.context.suspendReason === 'waiting' || stored.context.suspendReason === 'tool_approval' ? 'NO_PENDING_APPROVAL' : 'THREAD_NOT_SUSPENDED',
      `Thread ${id} is not at ${what}${field ? ` (${field} applies only there)` : ''}: it is ${now}. Nothing was decided.`,
      { details: { threadId: id, suspendReason: stored.context.suspendReason } },
    )
  }

  /** A thread read but not woken: its transcript is not to stay open. */
  private closeUnread(id: string): void {
    this.deps.transcripts.close(id)
  }
}
