/**
 * A thread's transcript as the conversation a person reads in the inspector: its instructions, the
 * task, each assistant reply, each tool call with its input and each result, in order and with the
 * time each was recorded, and between them what happened to the thread (a paused call, a decision,
 * a failed model call, a cancel). Built from the transcript alone, so it shows what was recorded,
 * never what a process believes.
 */
import type { Message } from '../../actors/model.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { TranscriptEntry } from '../../persistence/types.js'
import { formatUsd } from '../base/money.js'
import { SPAWN_ENTRY, eventOfEntry, isMachineEventEntry } from '../thread/replay.js'
import { TOOL_CALLS_REPAIRED } from '../thread/messages.js'

export type ConversationItem =
  | { kind: 'system' | 'user'; seq: number; at: string; text: string }
  | { kind: 'assistant'; seq: number; at: string; text: string; turn: number; attempt: number; usage: string; model: string | null }
  | { kind: 'tool_call'; seq: number; at: string; turn: number; callId: string; tool: string; input: unknown }
  | { kind: 'tool_result'; seq: number; at: string; callId: string; tool: string; ok: boolean; output: unknown }
  /** What happened to the thread between messages, as one line (and its data to expand). */
  | { kind: 'event'; seq: number; at: string; type: string; text: string; data: unknown }

export interface Conversation {
  items: ConversationItem[]
  /** Items left out before the first one given (the page shows the newest). */
  omitted: number
  /** The last transcript entry read: the page asks again when the thread's transcript grows past it. */
  seq: number
}

const ms = (n: number): string => (n >= 1000 ? `${(n / 1000).toFixed(1)} s` : `${n} ms`)

/** One line for a machine input that is not a message. */
function eventLine(event: ThreadEvent): string {
  switch (event.type) {
    case 'START':
      return 'started'
    case 'MODEL_FAILED':
      return `model call failed (turn ${event.turn}, attempt ${event.attempt}): ${event.error.category}, ${event.error.message}${event.retryInMs > 0 ? `; retrying in ${ms(event.retryInMs)}` : ''}`
    case 'TOOL_PAUSED':
      return event.kind === 'approval' ? `call ${event.callId} waits for a person's approval (request ${event.requestId})` : `call ${event.callId} waits for an answer (request ${event.requestId})`
    case 'CALL_DECIDED': {
      const how = { approved: event.input !== undefined ? 'approved with edited input' : 'approved', denied: 'denied', answered: 'answered', timed_out: 'timed out' }[event.decision]
      return `call ${event.callId} ${how} by ${event.by}${event.reason ? `: ${event.reason}` : ''}`
    }
    case 'RETRY_DUE':
      return 'retry due'
    case 'CANCEL':
      return `cancel${event.by ? ` by ${event.by}` : ''}: ${event.reason}`
    case 'RESUME':
      return `${event.decision === 'approved' ? 'limit approved' : 'resumed'}${event.by ? ` by ${event.by}` : ''}${event.limits ? ` (${Object.entries(event.limits).map(([k, v]) => `${k} ${v}`).join(', ')})` : ''}`
    case 'LIMIT_DECIDED':
      return `limit reached: ${event.action}${event.proposed != null ? ` (proposed ${event.proposed})` : ''}${event.message ? `: ${event.message}` : ''}`
    case 'FAIL':
      return `failed: ${event.error.code}, ${event.error.message}`
    case 'HAND_OFF':
      return `continued as ${event.nextThreadId}`
    case 'CHILDREN_SETTLED':
      return `children settled (${event.children.length})`
    case 'BUDGET_EXHAUSTED':
      return `budget exhausted: ${event.amount} ${event.used} of ${event.max}`
    case 'RECOVERED':
      return 'taken over by a new process'
    case 'QUARANTINED':
      return `quarantined after ${event.recoveries} recoveries: ${event.message}`
    default:
      return (event as { type: string }).type
  }
}

function usageText(usage: { inputTokens: number; outputTokens: number; cost?: number }): string {
  return `${usage.inputTokens} in, ${usage.outputTokens} out${usage.cost !== undefined ? `, ${formatUsd(usage.cost)}` : ''}`
}

/** The messages a continuation starts from (recorded at its spawn), as items. */
function startingMessages(entry: TranscriptEntry, messages: readonly Message[]): ConversationItem[] {
  return messages.flatMap((m): ConversationItem[] => {
    const base = { seq: entry.seq, at: entry.ts }
    if (m.role === 'user') return [{ kind: 'user', ...base, text: m.content }]
    if (m.role === 'tool') return [{ kind: 'tool_result', ...base, callId: m.toolCallId, tool: m.toolName, ok: m.isError !== true, output: m.content }]
    if (m.role === 'assistant') {
      const calls = (m.toolCalls ?? []).map((c): ConversationItem => ({ kind: 'tool_call', ...base, turn: 0, callId: c.id, tool: c.name, input: c.input }))
      return [{ kind: 'assistant', ...base, text: m.content, turn: 0, attempt: 0, usage: '', model: null }, ...calls]
    }
    return [{ kind: 'system', ...base, text: (m as { content: string }).content }]
  })
}

/** The conversation of a transcript; `last`: how many items to keep, the newest. */
export function conversationOf(entries: readonly TranscriptEntry[], last = 400): Conversation {
  const items: ConversationItem[] = []
  const tools = new Map<string, string>()
  for (const entry of entries) {
    const base = { seq: entry.seq, at: entry.ts }
    if (entry.type === SPAWN_ENTRY) {
      const data = entry.data as { input: { directive: { prompt: string; instructions?: string } }; messages?: Message[] }
      // The same id spawned again after a spawn that never returned starts over, as replay does.
      items.length = 0
      const instructions = data.input.directive.instructions
      if (instructions) items.push({ kind: 'system', ...base, text: instructions })
      if (data.messages) items.push(...startingMessages(entry, data.messages))
      else items.push({ kind: 'user', ...base, text: data.input.directive.prompt })
    } else if (entry.type === TOOL_CALLS_REPAIRED) {
      items.push({ kind: 'event', ...base, type: entry.type, text: 'calls left without a result were given one after a crash', data: entry.data })
    } else if (isMachineEventEntry(entry)) {
      const event = eventOfEntry(entry)
      if (event.type === 'MODEL_REPLIED') {
        items.push({ kind: 'assistant', ...base, text: event.text, turn: event.turn, attempt: event.attempt, usage: usageText(event.usage), model: event.model ?? null })
        for (const call of event.toolCalls) {
          tools.set(call.id, call.name)
          items.push({ kind: 'tool_call', ...base, turn: event.turn, callId: call.id, tool: call.name, input: call.input })
        }
        if (event.outputErrors) items.push({ kind: 'event', ...base, type: 'OUTPUT_INVALID', text: `the answer does not match the output schema: ${event.outputErrors.join('; ')}`, data: event.outputErrors })
      } else if (event.type === 'TOOL_DONE') {
        items.push({ kind: 'tool_result', ...base, callId: event.callId, tool: tools.get(event.callId) ?? 'unknown', ok: event.ok, output: event.output })
      } else {
        const { type, ...data } = event
        items.push({ kind: 'event', ...base, type, text: eventLine(event), data })
      }
    }
  }
  const omitted = Math.max(0, items.length - last)
  return { items: items.slice(omitted), omitted, seq: entries.at(-1)?.seq ?? 0 }
}
