/**
 * Issue 24, item 5: the inspector kept up to date by server-sent events, in headless Chromium. A
 * person answers a question by typing and cancels a thread from the page; a runtime opened on the
 * directory afterwards acts on both, and the open page — never reloaded — shows the threads end,
 * the conversation of the one answered turn by turn. A reply streaming from an in-process runtime
 * shows as its deltas arrive and gives way to the reply the transcript records. Screenshots go to
 * artifacts/inspector/.
 */
import { spawnSync } from 'node:child_process'
import type { Page } from 'playwright-core'
import { describe, expect, it } from 'vitest'
import { createRuntime } from '../../src/index.js'
import type { ModelAdapter } from '../../src/index.js'
import { serveInspector } from '../../src/operator/inspector.js'
import { readThreadFiles } from '../../src/operator/inspectThread.js'
import { pausedAtCall, carryOn } from '../helpers/callThreads.js'
import { launchChromium, screenshotPath } from '../helpers/chromium.js'
import { compiled, tempDir } from '../helpers/dirs.js'

/** Marks the page's window: a mark still there later means the page was never loaded again. */
const mark = (page: Page) => page.evaluate(() => void ((globalThis as Record<string, unknown>).spindleMark = 'kept'))
const marked = (page: Page) => page.evaluate(() => (globalThis as Record<string, unknown>).spindleMark)

/** The CLI tests' host program: leaves a thread at its turn limit (`limit`) or suspended after its retries (`error`), or runs what was decided (`run`). */
function host(dir: string, mode: 'limit' | 'error' | 'run'): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

function entries(dir: string, id: string, type: string): Array<Record<string, unknown>> {
  return readThreadFiles(dir, id).entries.filter((e) => e.type === type).map((e) => e.data as Record<string, unknown>)
}

describe('spindle inspect, live (headless Chromium)', () => {
  it('should answer a question typed on the page and cancel another thread, the open page showing both end without a reload', async () => {
    const dir = tempDir('spindle-inspect-live')
    const asked = await pausedAtCall(dir, 'ask')
    const doomed = await pausedAtCall(dir, 'ship')
    const inspector = await serveInspector({ dir })
    const browser = await launchChromium()
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
      // Every request the page makes, to check that none leaves the inspector.
      const requested: string[] = []
      page.on('request', (r) => requested.push(r.url()))
      await page.goto(inspector.url)
      await page.locator('#live.on').waitFor()
      await mark(page)
      const question = page.locator(`#waiting .approval[data-request="${asked.requestId}"]`)
      await question.locator('input.answer-text').fill('Tuesday, after the freeze')
      await question.locator('button.answer').click()
      await question.locator('.answered').waitFor()
      const ship = page.locator(`#waiting .approval[data-thread="${doomed.id}"]`)
      await ship.locator('button.cancel').click()
      await ship.locator('.note', { hasText: 'cancel requested' }).waitFor()
      await page.screenshot({ path: screenshotPath('decided') })

      // A runtime opens the directory: it takes the answer and the cancel request and runs both threads to their end.
      const { threads } = await carryOn(dir)
      expect(threads).toEqual(
        expect.arrayContaining([
          { id: asked.id, status: 'completed', result: 'told: Tuesday, after the freeze' },
          expect.objectContaining({ id: doomed.id, status: 'cancelled' }),
        ]),
      )
      expect(entries(dir, asked.id, 'CALL_DECIDED')).toEqual([expect.objectContaining({ decision: 'answered', answer: 'Tuesday, after the freeze', by: 'spindle inspect' })])
      expect(entries(dir, doomed.id, 'CANCEL')).toEqual([expect.objectContaining({ by: 'spindle inspect', reason: 'cancelled from spindle inspect' })])

      // Pushed to the page as it stands: the tree shows both ended, nothing waits.
      await page.locator(`.node[data-id="${asked.id}"] .st.completed`).waitFor({ timeout: 10_000 })
      await page.locator(`.node[data-id="${doomed.id}"] .st.cancelled`).waitFor({ timeout: 10_000 })
      await page.locator('#waiting .calm').waitFor()
      expect(await marked(page)).toBe('kept')
      const origin = new URL(inspector.url).origin
      expect(requested.filter((url) => !url.startsWith(`${origin}/`) && !url.startsWith('data:'))).toEqual([])
      expect(requested.filter((url) => url.startsWith(`${origin}/events`))).toEqual([`${origin}/events?token=${inspector.token}`])
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it('should approve a limit with a value of its own and resume a thread suspended after its retries, each carried out by the next runtime', async () => {
    const dir = tempDir('spindle-inspect-limit-resume')
    const capped = host(dir, 'limit')
    const flaky = host(dir, 'error')
    const inspector = await serveInspector({ dir })
    const browser = await launchChromium()
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
      await page.goto(inspector.url)
      const limit = page.locator(`#waiting .approval.limit_escalation[data-thread="${capped}"]`)
      const suspended = page.locator(`#waiting .approval.resume[data-thread="${flaky}"]`)
      expect(await limit.locator('input.limit-value').inputValue()).toBe('4')
      expect(await suspended.locator('b').textContent()).toContain('Suspended: its model calls kept failing')
      await page.screenshot({ path: screenshotPath('limit-and-resume') })
      await mark(page)
      await limit.locator('input.limit-value').fill('6')
      await limit.locator('button.approve').click()
      await limit.locator('.answered').waitFor()
      await suspended.locator('button.resume').click()
      await suspended.locator('.answered', { hasText: 'resume requested' }).waitFor()

      expect(JSON.parse(host(dir, 'run'))).toEqual(
        expect.arrayContaining([expect.objectContaining({ id: capped, status: 'completed' }), expect.objectContaining({ id: flaky, status: 'completed', result: 'flaky done' })]),
      )
      expect(entries(dir, capped, 'RESUME')).toEqual([expect.objectContaining({ decision: 'approved', limits: { turns: 6 }, by: 'spindle inspect' })])
      expect(entries(dir, flaky, 'RESUME')).toEqual([expect.objectContaining({ decision: 'resumed' })])
      await page.locator(`.node[data-id="${capped}"] .st.completed`).waitFor({ timeout: 10_000 })
      await page.locator(`.node[data-id="${flaky}"] .st.completed`).waitFor({ timeout: 10_000 })
      expect(await marked(page)).toBe('kept')
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it('should reconnect when the inspector comes back after a restart, and go on being pushed what changes', async () => {
    const dir = tempDir('spindle-inspect-reconnect')
    const asked = await pausedAtCall(dir, 'ask')
    const token = 'ab'.repeat(16)
    let inspector = await serveInspector({ dir, token })
    const port = Number(new URL(inspector.url).port)
    const browser = await launchChromium()
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
      await page.goto(inspector.url)
      await page.locator('#live.on').waitFor()
      await mark(page)
      // The host restarts its inspector: the page's stream drops, and the page says so.
      await inspector.close()
      await page.locator('#live.off', { hasText: 'reconnecting' }).waitFor()
      inspector = await serveInspector({ dir, token, port })
      await page.locator('#live.on').waitFor({ timeout: 20_000 })
      await page.locator(`#waiting .approval[data-request="${asked.requestId}"] button.choice`, { hasText: 'Monday' }).click()
      await carryOn(dir)
      await page.locator(`.node[data-id="${asked.id}"] .st.completed`).waitFor({ timeout: 10_000 })
      expect(await marked(page)).toBe('kept')
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it("should show a thread's conversation turn by turn, with the state it ended in folded to its path", async () => {
    const dir = tempDir('spindle-inspect-conversation')
    const asked = await pausedAtCall(dir, 'ask')
    const inspector = await serveInspector({ dir })
    const browser = await launchChromium()
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
      await page.goto(inspector.url)
      await page.locator(`.node[data-id="${asked.id}"]`).click()
      await page.locator('#conversation .msg.tool_call').waitFor()
      await mark(page)
      expect(await page.locator('.crumbs .here').textContent()).toBe('suspended')
      await page.locator(`#waiting .approval[data-request="${asked.requestId}"] button.choice`, { hasText: 'Friday' }).click()
      await carryOn(dir)
      // The conversation grows on the page as the transcript does.
      const result = page.locator('#conversation .msg.assistant', { hasText: 'told: Friday' })
      await result.waitFor({ timeout: 10_000 })
      const roles = await page.locator('#conversation .msg .role').allTextContents()
      expect(roles).toEqual(['user', 'assistant', 'tool call', 'result', 'assistant'])
      expect(await page.locator('#conversation .msg.user .text').textContent()).toBe('Ask when to ship')
      expect(JSON.parse((await page.locator('#conversation .msg.tool_call pre').textContent())!)).toEqual({ question: 'Which day should we ship?', choices: ['Monday', 'Friday'] })
      expect(await page.locator('#conversation .msg.tool_result pre').textContent()).toBe('Friday')
      expect(await page.locator('#conversation .event', { hasText: 'answered by spindle inspect' }).count()).toBe(1)
      expect(await page.locator('#conversation .msg time').first().getAttribute('datetime')).toMatch(/^\d{4}-\d\d-\d\dT/)
      await page.locator('.crumbs .here', { hasText: 'completed' }).waitFor()
      // The full statechart only on demand, with the state it is in marked.
      expect(await page.locator('details.chart').getAttribute('open')).toBeNull()
      await page.locator('details.chart summary').click()
      await page.locator('#chart .state.current', { hasText: 'completed' }).waitFor()
      await page.locator('details.chart summary').click()
      await page.screenshot({ path: screenshotPath('conversation'), fullPage: true })
      expect(await marked(page)).toBe('kept')
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it('should show a reply as it streams from the runtime in the same process, then the recorded reply in its place', async () => {
    const dir = tempDir('spindle-inspect-stream')
    // The model streams the start of its reply, then waits at a gate the test opens, so the page
    // can be looked at before the reply is recorded.
    let streamed!: () => void
    const halfWay = new Promise<void>((resolve) => (streamed = resolve))
    let open!: () => void
    const gate = new Promise<void>((resolve) => (open = resolve))
    const model: ModelAdapter = {
      name: 'gated',
      generate: async (request) => {
        if (request.streaming) {
          request.emit?.({ type: 'text', text: 'Hello' })
          request.emit?.({ type: 'text', text: ', wor' })
        }
        streamed()
        await gate
        request.emit?.({ type: 'text', text: 'ld.' })
        return { text: 'Hello, world.', toolCalls: [], usage: { inputTokens: 4, outputTokens: 3 } }
      },
    }
    const rt = await createRuntime({ dir, model })
    const inspector = await serveInspector({ dir, replies: (listener) => rt.onReply(listener) })
    const browser = await launchChromium()
    try {
      const thread = await rt.spawn({ directive: { name: 'greet', prompt: 'Say hello', instructions: 'You are terse.' } })
      await halfWay
      const page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
      await page.goto(inspector.url)
      await page.locator(`.node[data-id="${thread.id}"]`).click()
      await page.locator('#conversation .msg.system').waitFor()
      await mark(page)
      // The page opened after the first pieces streamed: it is shown them from the start.
      const streaming = page.locator('#streaming .msg.assistant.streaming .text')
      await streaming.filter({ hasText: 'Hello, wor' }).waitFor()
      expect(await streaming.textContent()).toBe('Hello, wor')
      await page.screenshot({ path: screenshotPath('streaming') })

      open()
      await thread.done
      await page.locator('#conversation .msg.assistant .text', { hasText: 'Hello, world.' }).waitFor({ timeout: 10_000 })
      await page.locator('#streaming .msg').waitFor({ state: 'detached' })
      expect(await page.locator('#conversation .msg .role').allTextContents()).toEqual(['instructions', 'user', 'assistant'])
      expect(await marked(page)).toBe('kept')
    } finally {
      await browser.close()
      await inspector.close()
      await rt.close()
    }
  }, 60_000)
})
