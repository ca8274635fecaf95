/**
 * Conversations that outgrow the context window: repairing tool calls left without results, and
 * the messages a continuation thread starts from. Pure functions over messages.
 */
import type { Message } from '../../actors/model.js'

/**
 * A rough token count: about four characters a token, plus a little per message. Providers count
 * differently; the ceiling only has to keep the rebuilt history well inside the window.
 */
export function estimateTokens(message: Message): number {
  let chars = message.content.length
  if (message.role === 'assistant' && message.toolCalls) {
    for (const call of message.toolCalls) chars += call.name.length + JSON.stringify(call.input ?? null).length
  }
  return Math.ceil(chars / 4) + 4
}

export interface RepairedCall {
  callId: string
  toolName: string
  /** missing_result: an assistant tool call had no result; orphan_result: a result answered no call. */
  kind: 'missing_result' | 'orphan_result'
}

export const MISSING_RESULT_MESSAGE =
  'This tool call has no recorded result: the thread was cancelled, aborted or crashed while it ran, ' +
  'or earlier turns were dropped. Its effect is unknown; call it again if you still need it.'

/** The synthetic result given to a tool call that has none. */
export function missingResult(callId: string, toolName: string): Message {
  return {
    role: 'tool',
    toolCallId: callId,
    toolName,
    content: JSON.stringify({ error: 'TOOL_RESULT_MISSING', message: MISSING_RESULT_MESSAGE }),
    isError: true,
  }
}

/**
 * What a provider would reject in a history: an assistant tool call with no result before the next
 * assistant or user message, and a tool result that answers no call. Returns the repairs to make;
 * `applyRepairs` makes them.
 */
export function findDanglingToolCalls(messages: readonly Message[]): RepairedCall[] {
  const repairs: RepairedCall[] = []
  let open = new Map<string, string>()
  const closeTurn = (): void => {
    for (const [callId, toolName] of open) repairs.push({ callId, toolName, kind: 'missing_result' })
    open = new Map()
  }
  for (const message of messages) {
    if (message.role === 'tool') {
      if (open.has(message.toolCallId)) open.delete(message.toolCallId)
      else repairs.push({ callId: message.toolCallId, toolName: message.toolName, kind: 'orphan_result' })
      continue
    }
    closeTurn()
    if (message.role === 'assistant') for (const call of message.toolCalls ?? []) open.set(call.id, call.name)
  }
  // Calls of the last assistant message: their results are still to come only while tools run, and
  // repairs are looked for just before a model call, when none should be outstanding.
  closeTurn()
  return repairs
}

/** A copy of `messages` with synthetic results inserted and orphan results dropped. */
export function applyRepairs(messages: readonly Message[], repairs: readonly RepairedCall[]): Message[] {
  if (repairs.length === 0) return [...messages]
  const missing = new Map(repairs.filter((r) => r.kind === 'missing_result').map((r) => [r.callId, r.toolName]))
  const orphans = new Set(repairs.filter((r) => r.kind === 'orphan_result').map((r) => r.callId))
  const out: Message[] = []
  let pending: string[] = []
  const flush = (): void => {
    for (const callId of pending) out.push(missingResult(callId, missing.get(callId)!))
    pending = []
  }
  for (const message of messages) {
    if (message.role === 'tool') {
      if (!orphans.has(message.toolCallId) || pending.includes(message.toolCallId)) out.push(message)
      continue
    }
    flush()
    out.push(message)
    if (message.role === 'assistant') pending = (message.toolCalls ?? []).map((c) => c.id).filter((id) => missing.has(id))
  }
  flush()
  return out
}

/**
 * Whether handing a thread's conversation (`current`) off to a successor starting from `next` (what
 * `continuationMessages` made of it) can relieve anything. Not when there is no conversation to
 * carry — the task's prompt alone is too big, on the very first call — nor when the thread is itself
 * a continuation and its successor would carry all of its conversation again: that successor would
 * meet the same wall, and hand off to another, without end. A first thread whose whole conversation
 * fits gets one hand-off (the provider may count tokens far above the estimate).
 */
export function continuationSheds(current: readonly Message[], next: readonly Message[], options: { isContinuation: boolean }): boolean {
  const body = current[0]?.role === 'user' ? current.length - 1 : current.length
  const carried = next.length - 1
  if (carried < body) return true
  return body > 0 && !options.isContinuation
}

export interface ContinuationSeed {
  /** The directive prompt the chain started with. */
  prompt: string
  previousThreadId: string
  /** The most tokens (estimated) the rebuilt history may take. */
  ceilingTokens: number
}

/**
 * The messages a continuation thread starts with: a user message restating the task and saying
 * where it continues from, then the most recent part of the previous conversation that fits
 * within the ceiling, cut so that it starts at an assistant message (never at a tool result whose
 * call was dropped).
 */
export function continuationMessages(previous: readonly Message[], seed: ContinuationSeed): Message[] {
  const opening: Message = {
    role: 'user',
    content:
      `${seed.prompt}\n\n[Continued from thread ${seed.previousThreadId}. The conversation had grown too long for the ` +
      'context window; its most recent part follows. Carry on with the task from there.]',
  }
  let budget = seed.ceilingTokens - estimateTokens(opening)
  // The first message of a thread's history is its own opening prompt: never carried over twice.
  const body = previous[0]?.role === 'user' ? previous.slice(1) : previous.slice()
  let start = body.length
  while (start > 0) {
    const cost = estimateTokens(body[start - 1]!)
    if (cost > budget) break
    budget -= cost
    start--
  }
  while (start < body.length && body[start]!.role === 'tool') start++
  // Tool calls left without results are repaired before the successor's first model call, where
  // every repair is recorded.
  return [opening, ...body.slice(start)]
}
