/**
 * The inspector shows text as it was written (issue 22), in headless Chromium: a long line of the
 * raw transcript is cut by characters before it is escaped — no half entity (`{&qu`), no half emoji — and the
 * cut is marked; an approval message keeps its line breaks.
 */
import { spawnSync } from 'node:child_process'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel } from '../../src/index.js'
import type { Inspector } from '../../src/operator/inspector.js'
import { startInspector } from '../../src/operator/inspector.js'
import { threadLog } from '../../src/operator/operator.js'
import { pendingApprovals } from '../../src/thread/requests.js'
import { launchChromium } from '../helpers/chromium.js'
import { compiled, tempDir } from '../helpers/dirs.js'

/** What the page cuts a transcript line to, in characters. */
const CUT = 400

describe('spindle inspect, text as written (headless Chromium)', () => {
  const dir = tempDir('spindle-inspect-text')
  let capped: string
  let quoting: string
  let inspector: Inspector
  let browser: Browser
  let page: Page

  beforeAll(async () => {
    // A thread suspended at its turn limit, with an approval request (written by a host process).
    const host = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, 'limit'], { encoding: 'utf8' })
    expect(host.status, host.stderr).toBe(0)
    capped = host.stdout.trim()
    // A thread whose reply is quotes (six characters each once escaped) then emoji (two UTF-16 units each).
    const rt = await createRuntime({ dir, model: scriptedModel(() => ({ text: `${'"'.repeat(150)}${'😀'.repeat(300)}` })) })
    const thread = await rt.spawn({ directive: { name: 'quoting', prompt: 'reply' } })
    quoting = thread.id
    await thread.done
    await rt.close()
    inspector = await startInspector({ dir })
    browser = await launchChromium()
    page = await browser.newPage()
    await page.goto(inspector.url)
  })
  afterAll(async () => {
    await browser?.close()
    await inspector?.close()
  })

  async function open(id: string): Promise<void> {
    await page.locator(`.node[data-id="${id}"]`).click()
    await page.locator('#detail .title .id', { hasText: id }).waitFor()
    // The raw transcript is on demand, below the conversation.
    const raw = page.locator('#raw-details')
    if ((await raw.getAttribute('open')) === null) await raw.locator('summary').click()
    await page.locator('#raw table.raw').waitFor()
  }

  it('should cut a long transcript line by characters before escaping it, and mark the cut', async () => {
    const long = threadLog(dir, quoting).entries.find((e) => JSON.stringify(e.data).includes('😀'))!
    const text = Array.from(JSON.stringify(long.data))
    // The cut falls among the emoji, after the escaped quotes.
    expect(text.slice(0, CUT).join('')).toContain('\\"\\"')
    expect(text[CUT - 1]).toBe('😀')
    await open(quoting)
    const cell = page.locator('#raw tr', { has: page.locator(`td:text-is("${long.seq}")`) }).locator('pre')
    const shown = await cell.evaluate((pre: any) => ({
      text: [...pre.childNodes].filter((n: any) => n.nodeType === 3).map((n: any) => n.data).join(''),
      mark: pre.querySelector('.cut')?.textContent ?? null,
    }))
    expect(shown.text).toBe(text.slice(0, CUT).join(''))
    expect(shown.mark).toBe(`… ${text.length - CUT} more characters`)
  })

  it('should show a transcript line under the limit whole and unmarked', async () => {
    const short = threadLog(dir, quoting).entries.find((e) => JSON.stringify(e.data).length < 100)!
    await open(quoting)
    const cell = page.locator('#raw tr', { has: page.locator(`td:text-is("${short.seq}")`) }).locator('pre')
    expect(await cell.textContent()).toBe(JSON.stringify(short.data))
    expect(await cell.locator('.cut').count()).toBe(0)
  })

  it("should show a reply whole in the conversation, its one-line preview cut by characters", async () => {
    await open(quoting)
    const reply = page.locator('#conversation .msg.assistant')
    expect(await reply.locator('.text').textContent()).toBe(`${'"'.repeat(150)}${'😀'.repeat(300)}`)
    expect(await reply.locator('.preview').textContent()).toBe(`${'"'.repeat(150)}${'😀'.repeat(10)}…`)
  })

  it('should show an approval message with its line breaks', async () => {
    const [request] = pendingApprovals(dir, capped)
    expect(request!.message.split('\n').length).toBeGreaterThan(3)
    await open(capped)
    // innerText is the text as laid out: collapsed white space would turn the breaks into spaces.
    expect(await page.locator('.approval b').innerText()).toBe(request!.message)
  })
})
