/**
 * The pure parts of continuation: repairing histories providers would reject, and the messages a
 * continuation thread starts from.
 */
import { describe, expect, it } from 'vitest'
import type { Message } from '../../src/index.js'
import { applyRepairs, continuationMessages, estimateTokens, findDanglingToolCalls } from '../../src/thread/continuation.js'

const user = (content: string): Message => ({ role: 'user', content })
const said = (content: string, ...ids: string[]): Message =>
  ids.length ? { role: 'assistant', content, toolCalls: ids.map((id) => ({ id, name: 'lookup', input: { q: id } })) } : { role: 'assistant', content }
const result = (id: string, content = '"ok"'): Message => ({ role: 'tool', toolCallId: id, toolName: 'lookup', content })

describe('tool calls left without results', () => {
  it('should find nothing to repair in a well-formed history', () => {
    expect(findDanglingToolCalls([user('p'), said('a', 'c1', 'c2'), result('c1'), result('c2'), said('done')])).toEqual([])
  })

  it('should give each call without a result a synthetic error result right after its turn', () => {
    const history = [user('p'), said('a', 'c1', 'c2'), result('c1'), said('b', 'c3')]
    const repairs = findDanglingToolCalls(history)
    expect(repairs).toEqual([
      { callId: 'c2', toolName: 'lookup', kind: 'missing_result' },
      { callId: 'c3', toolName: 'lookup', kind: 'missing_result' },
    ])
    const repaired = applyRepairs(history, repairs)
    expect(repaired.map((m) => (m.role === 'tool' ? `tool:${m.toolCallId}` : m.role))).toEqual(['user', 'assistant', 'tool:c1', 'tool:c2', 'assistant', 'tool:c3'])
    expect(repaired[3]).toMatchObject({ isError: true, content: expect.stringContaining('TOOL_RESULT_MISSING') })
    expect(findDanglingToolCalls(repaired)).toEqual([])
  })

  it('should drop a result that answers no call', () => {
    const history = [user('p'), result('ghost'), said('a', 'c1'), result('c1')]
    const repairs = findDanglingToolCalls(history)
    expect(repairs).toEqual([{ callId: 'ghost', toolName: 'lookup', kind: 'orphan_result' }])
    expect(applyRepairs(history, repairs)).toEqual([user('p'), said('a', 'c1'), result('c1')])
  })
})

describe('continuation messages', () => {
  const long = 'x'.repeat(400) // about 100 tokens
  const history: Message[] = [user('the task'), said(long, 'a'), result('a', `"${long}"`), said(long, 'b'), result('b', `"${long}"`), said('latest')]

  it('should start at a user message naming the predecessor and keep the most recent part within the ceiling', () => {
    const messages = continuationMessages(history, { prompt: 'the task', previousThreadId: 'job-aaaaaaaaaaaa', ceilingTokens: 300 })
    expect(messages[0]).toMatchObject({ role: 'user', content: expect.stringContaining('Continued from thread job-aaaaaaaaaaaa') })
    expect(messages[0]!.content.startsWith('the task')).toBe(true)
    expect(messages.slice(1)).toEqual([said(long, 'b'), result('b', `"${long}"`), said('latest')])
    expect(messages.reduce((n, m) => n + estimateTokens(m), 0)).toBeLessThanOrEqual(300)
  })

  it('should never start the carried part at a tool result whose call was cut off', () => {
    // A ceiling that would fit result('b') but not the call before it.
    const ceiling = estimateTokens(user('the task\n\n[Continued from thread job-aaaaaaaaaaaa. The conversation had grown too long for the context window; its most recent part follows. Carry on with the task from there.]')) + estimateTokens(result('b', `"${long}"`)) + estimateTokens(said('latest')) + 1
    const messages = continuationMessages(history, { prompt: 'the task', previousThreadId: 'job-aaaaaaaaaaaa', ceilingTokens: ceiling })
    expect(messages.slice(1)).toEqual([said('latest')])
  })

  it('should carry only the opening when nothing fits', () => {
    expect(continuationMessages(history, { prompt: 'the task', previousThreadId: 'job-aaaaaaaaaaaa', ceilingTokens: 10 })).toHaveLength(1)
  })
})
