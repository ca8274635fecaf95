/**
 * Conversations that go on: the next user message to a completed thread starts its successor, which
 * carries the whole conversation, the directive, the limits and the cumulative usage on from there
 * (`rt.followUp`). A successor rather than the same thread reopened: a completed thread's outcome
 * stays what `done` resolved with and what its transcript replays to, and each exchange is a thread
 * of its own in `chain`, `tree` and the inspector, linked by `previousThreadId`.
 */
import type { Clock } from '../base/clock.js'
import { SpindleError } from '../base/errors.js'
import { assertThreadId, childThreadId } from '../base/ids.js'
import type { Message } from '../../actors/model.js'
import type { Registry, TranscriptStore } from '../../persistence/types.js'
import { messagesFromTranscript } from '../thread/messages.js'
import type { HookSpec } from '../policies/hooks.js'
import type { ThreadHandle } from '../thread/threadView.js'
import type { FollowUpOptions } from './api.js'
import type { Budgets } from './budgets.js'
import type { Emitter } from './events.js'
import type { PolicyDesk } from './policyDesk.js'
import { validateLayer } from './settings.js'
import type { ThreadStarter } from './threadStarter.js'
import type { ThreadTable } from './threadTable.js'

export interface FollowUpDeps {
  dir: string
  registry: Registry
  table: ThreadTable
  transcripts: Pick<TranscriptStore, 'read'>
  budgets: Pick<Budgets, 'continueAccount'>
  policies: Pick<PolicyDesk, 'withDirective'>
  starter: ThreadStarter
  clock: Clock
  bus: Emitter
}

function refused(message: string, details: Record<string, unknown>): SpindleError {
  return new SpindleError('FOLLOW_UP_REFUSED', message, { details })
}

export class FollowUps {
  constructor(private readonly deps: FollowUpDeps) {}

  async followUp(id: string, message: string, options: FollowUpOptions = {}): Promise<ThreadHandle> {
    const { registry, table, dir } = this.deps
    assertThreadId(id)
    if (typeof message !== 'string' || message.trim() === '') {
      throw new SpindleError('INVALID_OPTIONS', 'followUp needs the next user message, a non-empty string.', { details: { field: 'message' } })
    }
    const record = registry.get(id)
    if (!record) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}.`, { details: { threadId: id } })
    // One id per follow-up of a thread: two processes answering the same thread at once make one
    // successor (the second is refused below, or by the lease the first holds), never two.
    const nextId = childThreadId(record.directiveName, `follow-up:${id}`)
    const next = registry.successorOf(id) ?? (registry.get(nextId) ? nextId : null)
    if (next !== null) {
      const latest = registry.chain(id).at(-1)?.id ?? next
      throw refused(`Thread ${id} was already followed up by ${next}: send the next message to the conversation's latest thread, ${latest}.`, { threadId: id, nextThreadId: next, latest })
    }
    if (record.status !== 'completed') {
      throw refused(
        `Thread ${id} is ${record.status}: a follow-up goes to a completed thread${record.status === 'running' || record.status === 'created' ? ' (await its done first)' : ''}.`,
        { threadId: id, status: record.status },
      )
    }
    if (record.parentId !== null) {
      throw refused(`Thread ${id} is a child of ${record.parentId}: a follow-up goes to a thread spawned by host code, which owns the conversation.`, { threadId: id, parentId: record.parentId })
    }
    const context = table.storedContext(id)
    if (!context) throw new SpindleError('STATE_CORRUPT', `Thread ${id} has no readable state.json in ${dir}; run \`spindle doctor\`.`, { details: { threadId: id } })
    const limits = options.limits ? { ...context.limits, ...validateLayer({ limits: options.limits }, 'followUp').limits } : context.limits
    const messages: Message[] = [...messagesFromTranscript(this.deps.transcripts.read(id).entries), { role: 'user', content: message }]
    this.deps.budgets.continueAccount(nextId, id)
    const thread = await this.deps.starter.start({
      input: {
        threadId: nextId,
        directive: context.directive,
        limits,
        policy: context.policy,
        depth: context.depth,
        carried: { usage: { ...context.usage }, activeMs: context.activeMs, previousThreadId: id },
      },
      hooks: this.deps.policies.withDirective(context.directive.name, context.policy.hooks as unknown as HookSpec[]),
      parentId: null,
      previousThreadId: id,
      messages,
    })
    this.deps.bus.emit({ type: 'thread_followed_up', at: this.deps.clock.now(), threadId: id, nextThreadId: nextId })
    return thread
  }
}
