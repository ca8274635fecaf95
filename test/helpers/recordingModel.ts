/**
 * A scripted model that keeps a copy of every request it is given (the messages copied: the
 * runtime's own array is its live cache), and the result the model was last given for a call.
 */
import type { ModelRequest } from '../../src/index.js'
import { scriptedModel } from '../../src/index.js'
import type { Script } from '../../actors/scriptedModel.js'

export function recording(script: Script): { model: ReturnType<typeof scriptedModel>; requests: ModelRequest[] } {
  const requests: ModelRequest[] = []
  const inner = scriptedModel(script)
  return { requests, model: { name: 'recording', generate: (request) => (requests.push({ ...request, messages: [...request.messages] }), inner.generate(request)) } }
}

/** The result the model was given for call `callId` in the last request: parsed JSON, else the text. */
export function resultOf(requests: readonly ModelRequest[], callId: string): unknown {
  const message = requests.at(-1)!.messages.find((m) => m.role === 'tool' && m.toolCallId === callId)
  if (!message) return undefined
  try {
    return JSON.parse(message.content) as unknown
  } catch {
    return message.content
  }
}
