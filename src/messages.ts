import type { Message } from '../actors/model.js'
import type { ThreadEvent } from '../machines/thread.machine.js'
import type { TranscriptEntry } from '../persistence/types.js'
import { SPAWN_ENTRY, eventOfEntry, isMachineEventEntry } from './replay.js'

function toolContent(output: unknown): string {
  return typeof output === 'string' ? output : JSON.stringify(output)
}

/** Appends to `messages` what one recorded input adds to the conversation. */
export function applyToMessages(messages: Message[], event: ThreadEvent, toolNames: ReadonlyMap<string, string>): void {
  if (event.type === 'MODEL_REPLIED') {
    messages.push(
      event.toolCalls.length > 0
        ? { role: 'assistant', content: event.text, toolCalls: event.toolCalls }
        : { role: 'assistant', content: event.text },
    )
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

/** The conversation a thread's transcript records: the directive prompt, replies and tool results. */
export function messagesFromTranscript(entries: readonly TranscriptEntry[]): Message[] {
  const messages: Message[] = []
  const toolNames = new Map<string, string>()
  for (const entry of entries) {
    if (entry.type === SPAWN_ENTRY) {
      const prompt = (entry.data as { input: { directive: { prompt: string } } }).input.directive.prompt
      messages.push({ role: 'user', content: prompt })
    } else if (isMachineEventEntry(entry)) {
      const event = eventOfEntry(entry)
      if (event.type === 'MODEL_REPLIED') for (const call of event.toolCalls) toolNames.set(call.id, call.name)
      applyToMessages(messages, event, toolNames)
    }
  }
  return messages
}
