/**
 * The local inspector over a real HTTP server on 127.0.0.1: what it shows, that it refuses
 * requests without the session token, and that Approve reaches the thread (the next host process
 * carries it to the end). The page itself is tested in headless Chromium in inspectBrowser.test.ts.
 */
import { spawn, spawnSync } from 'node:child_process'
import { afterEach, describe, expect, it, onTestFinished } from 'vitest'
import { startInspector } from '../../src/operator/inspector.js'
import type { Inspector, ReplyDelta } from '../../src/operator/inspector.js'
import { compiled, tempDir } from '../helpers/dirs.js'

let inspector: Inspector | null = null
afterEach(async () => {
  await inspector?.close()
  inspector = null
})

function host(dir: string, mode: 'limit' | 'run' | 'budget'): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

describe('spindle inspect', () => {
  it('should show a suspended thread with its pending approval, and approve it with one POST', async () => {
    const dir = tempDir('spindle-inspect')
    const id = host(dir, 'limit')
    inspector = await startInspector({ dir })
    expect(inspector.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{32}$/)
    const base = inspector.url.split('?')[0]!
    const headers = { 'x-spindle-token': inspector.token, 'content-type': 'application/json' }

    expect((await fetch(`${base}api/overview`)).status).toBe(403)
    const page = await fetch(inspector.url)
    expect(page.status).toBe(200)
    expect(await page.text()).toContain('<title>spindle inspect</title>')

    const overview = (await (await fetch(`${base}api/overview`, { headers })).json()) as { threads: Array<Record<string, any>> }
    const thread = overview.threads.find((t) => t.id === id)!
    expect(thread).toMatchObject({ status: 'suspended', suspendReason: 'limit', usage: { turns: 2 }, limits: { turns: 2 } })
    expect(thread.approvals).toEqual([expect.objectContaining({ limit: 'turns', proposed: 4, answer: null })])
    const transcript = (await (await fetch(`${base}api/threads/${id}/transcript`, { headers })).json()) as Array<{ type: string }>
    expect(transcript[0]!.type).toBe('thread_spawned')

    const approved = await fetch(`${base}api/threads/${id}/approve`, { method: 'POST', headers, body: '{}' })
    expect(approved.status).toBe(200)
    expect(await approved.json()).toMatchObject({ threadId: id, action: 'approve' })
    // Until a runtime acts on it, the request shows with its answer rather than as open.
    const waiting = (await (await fetch(`${base}api/overview`, { headers })).json()) as { threads: Array<Record<string, any>> }
    expect(waiting.threads[0]!.approvals).toEqual([expect.objectContaining({ answer: { approved: true, by: 'spindle inspect', state: 'waiting' } })])
    const finished = JSON.parse(host(dir, 'run')) as Array<{ id: string; status: string }>
    expect(finished).toEqual([expect.objectContaining({ id, status: 'completed' })])

    const again = await fetch(`${base}api/overview`, { headers })
    expect(((await again.json()) as { threads: Array<{ id: string; status: string }> }).threads[0]).toMatchObject({ id, status: 'completed' })
    expect((await fetch(`${base}api/threads/nobody-aaaaaaaaaaaa/approve`, { method: 'POST', headers, body: '{}' })).status).toBe(404)
  })

  it('should refuse the events channel without the session token, and with it push the overview at once', async () => {
    const dir = tempDir('spindle-inspect-events')
    const id = host(dir, 'limit')
    inspector = await startInspector({ dir })
    const base = inspector.url.split('?')[0]!
    expect((await fetch(`${base}events`)).status).toBe(403)
    expect((await fetch(`${base}events?token=${'0'.repeat(32)}`)).status).toBe(403)
    const events = await fetch(`${base}events?token=${inspector.token}`)
    expect(events.status).toBe(200)
    expect(events.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    const reader = events.body!.getReader()
    let text = ''
    while (!text.includes('event: overview\ndata: ') || !text.slice(text.indexOf('event: overview')).includes('\n\n')) text += new TextDecoder().decode((await reader.read()).value)
    const data = text.slice(text.indexOf('event: overview\ndata: ') + 'event: overview\ndata: '.length).split('\n')[0]!
    const pushed = JSON.parse(data) as { threads: Array<{ id: string; status: string; statePaths: string[][] }>; changed: string[] }
    expect(pushed.threads).toEqual([expect.objectContaining({ id, status: 'suspended', statePaths: [['suspended']] })])
    expect(pushed.changed).toEqual([id])
    await reader.cancel()
  })

  it('should give a page that connects half way through a reply what streamed of it so far, then each delta as it comes', async () => {
    const dir = tempDir('spindle-inspect-deltas')
    host(dir, 'limit')
    const listeners = new Set<(delta: ReplyDelta) => void>()
    const push = (delta: ReplyDelta) => listeners.forEach((listener) => listener(delta))
    inspector = await startInspector({ dir, replies: (listener) => (listeners.add(listener), () => listeners.delete(listener)) })
    const at = { threadId: 'capped-aaaaaaaaaaaa', turn: 3, attempt: 1 }
    push({ type: 'text', ...at, text: 'Hel' })
    push({ type: 'text', ...at, text: 'lo' })
    push({ type: 'tool_call', ...at, callId: 'c9', toolName: 'noop' })
    push({ type: 'tool_input', ...at, callId: 'c9', text: '{"a":' })
    push({ type: 'tool_input', ...at, callId: 'c9', text: '1}' })
    // Another thread's reply, recorded already: nothing of it is left to show.
    push({ type: 'text', threadId: 'other-aaaaaaaaaaaa', turn: 1, attempt: 1, text: 'gone' })
    push({ type: 'reply_recorded', threadId: 'other-aaaaaaaaaaaa', turn: 1, attempt: 1 })
    const events = await fetch(`${inspector.url.split('?')[0]!}events?token=${inspector.token}`)
    const reader = events.body!.getReader()
    const replies: unknown[] = []
    let text = ''
    const more = async () => {
      text += new TextDecoder().decode((await reader.read()).value)
      for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
        const block = text.slice(0, end)
        text = text.slice(end + 2)
        if (block.startsWith('event: reply\n')) replies.push(JSON.parse(block.slice('event: reply\ndata: '.length)))
      }
    }
    while (replies.length < 3) await more()
    expect(replies).toEqual([
      { type: 'text', ...at, text: 'Hello' },
      { type: 'tool_call', ...at, callId: 'c9', toolName: 'noop' },
      { type: 'tool_input', ...at, callId: 'c9', text: '{"a":1}' },
    ])
    push({ type: 'reply_discarded', ...at, reason: 'failed', category: 'transient' })
    while (replies.length < 4) await more()
    expect(replies[3]).toEqual({ type: 'reply_discarded', ...at, reason: 'failed', category: 'transient' })
    await reader.cancel()
  })

  it('should refuse a session token that is not 32 to 128 hexadecimal digits, and serve with one that is', async () => {
    const dir = tempDir('spindle-inspect-token')
    host(dir, 'limit')
    await expect(startInspector({ dir, token: 'secret' })).rejects.toMatchObject({ code: 'INVALID_OPTIONS', message: expect.stringContaining('token must be 32 to 128 hexadecimal digits (got 6 characters)') })
    inspector = await startInspector({ dir, token: 'c0ffee'.repeat(6) })
    expect(inspector.url).toMatch(new RegExp(`\\?token=${'c0ffee'.repeat(6)}$`))
    expect((await fetch(`${inspector.url.split('?')[0]!}api/overview`, { headers: { 'x-spindle-token': 'c0ffee'.repeat(6) } })).status).toBe(200)
  })

  it("should give a thread's conversation: the task, each reply with its turn, each recorded time", async () => {
    const dir = tempDir('spindle-inspect-conversation-api')
    const id = host(dir, 'limit')
    inspector = await startInspector({ dir })
    const base = inspector.url.split('?')[0]!
    const headers = { 'x-spindle-token': inspector.token }
    expect((await fetch(`${base}api/threads/${id}/conversation`)).status).toBe(403)
    const conversation = (await (await fetch(`${base}api/threads/${id}/conversation`, { headers })).json()) as { items: Array<Record<string, unknown>>; omitted: number }
    expect(conversation.omitted).toBe(0)
    expect(conversation.items.filter((i) => i.kind !== 'event').map((i) => [i.kind, i.kind === 'assistant' ? i.turn : i.kind === 'tool_call' || i.kind === 'tool_result' ? i.tool : i.text])).toEqual([
      ['user', 'p'],
      ['assistant', 1],
      ['tool_call', 'noop'],
      ['tool_result', 'noop'],
      ['assistant', 2],
      ['tool_call', 'noop'],
      ['tool_result', 'noop'],
    ])
    for (const item of conversation.items) expect(Number.isNaN(Date.parse(item.at as string))).toBe(false)
    expect(conversation.items.at(-1)).toMatchObject({ kind: 'event', type: 'LIMIT_DECIDED', text: 'limit reached: escalate (proposed 4)' })
    expect((await fetch(`${base}api/threads/nobody-aaaaaaaaaaaa/conversation`, { headers })).status).toBe(404)
  })

  it('should give each thread its budget as rt.budget does, and its retries with the last error category', async () => {
    const dir = tempDir('spindle-inspect-budget')
    const lead = host(dir, 'budget')
    inspector = await startInspector({ dir })
    const base = inspector.url.split('?')[0]!
    const headers = { 'x-spindle-token': inspector.token }
    const overview = (await (await fetch(`${base}api/overview`, { headers })).json()) as { threads: Array<Record<string, any>> }
    const parent = overview.threads.find((t) => t.id === lead)!
    expect(parent.budget).toMatchObject({ threadId: lead, limit: { spend: 1, tokens: null }, reserved: { spend: 0, tokens: 0 }, released: true })
    expect(parent.budget.spent.own.spend).toBeCloseTo(0.05)
    expect(parent.budget.spent.total.spend).toBeCloseTo(0.13)
    expect(parent.budget.available.spend).toBeCloseTo(0.87)
    expect(parent).toMatchObject({ retries: 0, lastError: null })
    expect(overview.threads.find((t) => t.id === 'first')).toMatchObject({ retries: 2, lastError: { category: 'transient', message: expect.stringContaining('overloaded') } })
    expect(await (await fetch(inspector.url)).text()).toContain('<h3>budget</h3>')
  })

  it('should flag a running thread whose process was killed as having no live process, and one alive as run by its pid', async () => {
    const dir = tempDir('spindle-inspect-orphans')
    const child = spawn(process.execPath, [compiled('test/crash/leaseWorker.js'), dir, 'spawn', '2', '100000', '600000'], { stdio: ['ignore', 'pipe', 'pipe'] })
    // Killed whatever happens: a failed expectation must not leave it running.
    onTestFinished(() => {
      child.kill('SIGKILL')
    })
    let printed = ''
    child.stdout.on('data', (d: Buffer) => (printed += d))
    for (let i = 0; i < 400 && !printed.includes('spawned'); i++) await new Promise((r) => setTimeout(r, 25))
    inspector = await startInspector({ dir })
    const headers = { 'x-spindle-token': inspector.token }
    const base = inspector.url.split('?')[0]!
    const overview = async () => (await (await fetch(`${base}api/overview`, { headers })).json()) as { threads: Array<Record<string, any>>; orphans: Record<string, string> }
    // The registry row says running once the background round after START commits.
    let alive = await overview()
    for (let i = 0; i < 200 && !(alive.threads.length === 2 && alive.threads.every((t) => t.status === 'running')); i++) {
      await new Promise((r) => setTimeout(r, 25))
      alive = await overview()
    }
    expect(alive.threads).toHaveLength(2)
    for (const t of alive.threads) expect(t).toMatchObject({ status: 'running', orphan: null, heldBy: { pid: child.pid }, step: { effect: 'callModel', turn: 1, attempt: 1 } })
    child.kill('SIGKILL')
    await new Promise((resolve) => child.on('exit', resolve))
    const dead = await overview()
    for (const t of dead.threads) expect(t).toMatchObject({ status: 'running', orphan: 'dead_owner', heldBy: null })
    expect(Object.keys(dead.orphans).sort()).toEqual(dead.threads.map((t) => t.id).sort())
    const chart = (await (await fetch(`${base}api/statechart`, { headers })).json()) as { svg: string }
    expect(chart.svg).toMatch(/^<svg /)
    expect(chart.svg).toContain('data-state="running.callingModel"')
  })
})
