/** What the wait tests share: reading tool results back, from a transcript file or a conversation. */
import fs from 'node:fs'
import path from 'node:path'
import type { Message } from '../../src/index.js'

/** The results of `tool`'s calls, as thread `id`'s transcript.jsonl in data directory `dir` recorded them. */
export function recordedToolResults(dir: string, id: string, tool: string): Array<{ ok: boolean; output: any }> {
  const calls = new Map<string, string>()
  const results: Array<{ ok: boolean; output: any }> = []
  for (const line of fs.readFileSync(path.join(dir, 'threads', id, 'transcript.jsonl'), 'utf8').trim().split('\n')) {
    const entry = JSON.parse(line)
    if (entry.type === 'MODEL_REPLIED') for (const call of entry.data.toolCalls) calls.set(call.id, call.name)
    if (entry.type === 'TOOL_DONE' && calls.get(entry.data.callId) === tool) results.push({ ok: entry.data.ok, output: entry.data.output })
  }
  return results
}

/** The parsed results of `name`'s calls in a conversation the model was given. */
export const toolResultsOf = (messages: readonly Message[], name: string): any[] =>
  messages.filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === name).map((m) => JSON.parse(m.content))

/** What a thread saw of its last wait, for its final reply: `refused CODE`, `cycle CODE`, `timed out` or `settled s1,s2`. */
export function sawOfWait(messages: readonly Message[]): string {
  const result = toolResultsOf(messages, 'wait_threads').at(-1)
  if (result.error) return `refused ${result.error}`
  if (result.cycle) return `cycle ${result.cycle.code}`
  if (result.timedOut) return 'timed out'
  return `settled ${result.settled.map((s: { status: string }) => s.status).join(',')}`
}
