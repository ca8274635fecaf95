import type { Message } from '../../actors/model.js'
import type { ThreadEvent } from '../../machines/threadEvents.js'
import type { TranscriptEntry } from '../../persistence/types.js'
import { applyRepairs } from './continuation.js'
import type { RepairedCall } from './continuation.js'
import { SPAWN_ENTRY, eventOfEntry, isMachineEventEntry } from './replay.js'

/** Transcript note recording the synthetic results given to tool calls left without one. */
export const TOOL_CALLS_REPAIRED = 'tool_calls_repaired'

function toolContent(output: unknown): string {
  return typeof output === 'string' ? output : JSON.stringify(output)
}

/**
 * What the model is told after an answer that failed the directive's output schema. Built from the
 * recorded errors alone, so a conversation rebuilt from the transcript says the same.
 */
export function invalidOutputMessage(errors: readonly string[]): string {
  return (
    `Your answer does not match the required output schema:\n${errors.map((e) => `- ${e}`).join('\n')}\n` +
    'Answer again with only the JSON value, matching the schema.'
  )
}

/** Appends to `messages` what one recorded input adds to the conversation. */
export function applyToMessages(messages: Message[], event: ThreadEvent, toolNames: ReadonlyMap<string, string>): void {
  if (event.type === 'MODEL_REPLIED') {
    messages.push(
      event.toolCalls.length > 0
        ? { role: 'assistant', content: event.text, toolCalls: event.toolCalls }
        : { role: 'assistant', content: event.text },
    )
    if (event.outputErrors !== undefined) messages.push({ role: 'user', content: invalidOutputMessage(event.outputErrors) })
  } else if (event.type === 'TOOL_DONE') {
    const message: Message = {
      role: 'tool',
      toolCallId: event.callId,
      toolName: toolNames.get(event.callId) ?? 'unknown',
      content: toolContent(event.output),
    }
    if (!event.ok) message.isError = true
    messages.push(message)
  }
}

/**
 * The conversation a thread's transcript records: the directive prompt, replies and tool results.
 * `toolNames` (tool call id → tool name) is filled from the replies, for a caller that goes on.
 */
export function messagesFromTranscript(entries: readonly TranscriptEntry[], toolNames = new Map<string, string>()): Message[] {
  const messages: Message[] = []
  for (const entry of entries) {
    if (entry.type === SPAWN_ENTRY) {
      const data = entry.data as { input: { directive: { prompt: string } }; messages?: Message[] }
      // A later spawn entry is the same id spawned again after a spawn that never returned: it starts over.
      messages.length = 0
      // A continuation starts from messages rebuilt from its predecessor, recorded at spawn.
      if (data.messages) messages.push(...data.messages)
      else messages.push({ role: 'user', content: data.input.directive.prompt })
    } else if (entry.type === TOOL_CALLS_REPAIRED) {
      const repaired = applyRepairs(messages, (entry.data as { repairs: RepairedCall[] }).repairs)
      messages.length = 0
      messages.push(...repaired)
    } else if (isMachineEventEntry(entry)) {
      const event = eventOfEntry(entry)
      if (event.type === 'MODEL_REPLIED') for (const call of event.toolCalls) toolNames.set(call.id, call.name)
      applyToMessages(messages, event, toolNames)
    }
  }
  return messages
}
