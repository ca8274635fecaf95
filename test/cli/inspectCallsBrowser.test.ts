/**
 * Issue 23, items 4 and 5, in the inspector: the page leads with what waits for a person — here a
 * thread at the approval of its `deploy` call and one waiting for the answer to its `ask_human`
 * question. In headless Chromium a person edits the call's input (input that is not JSON is refused
 * on the page, nothing sent) and approves, and picks one of the question's choices; the page writes
 * the response files through its token-checked endpoints, and once a runtime opens the directory
 * the tool has run with the edited input and the model has the answer. A screenshot of the page
 * is kept under artifacts/inspector/ to look at.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Inspector } from '../../src/operator/inspector.js'
import { startInspector } from '../../src/operator/inspector.js'
import { CHOICES, QUESTION, carryOn, pausedAtCall } from '../helpers/callThreads.js'
import { launchChromium, screenshotPath } from '../helpers/chromium.js'
import { readThreadFiles } from '../../src/operator/inspectThread.js'
import { tempDir } from '../helpers/dirs.js'

function response(dir: string, id: string, requestId: string): unknown {
  const file = path.join(dir, 'threads', id, 'approvals', `${requestId}.response.json`)
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null
}

describe('spindle inspect at tool calls (headless Chromium)', () => {
  const dir = tempDir('spindle-inspect-calls')
  let ship: { id: string; requestId: string }
  let ask: { id: string; requestId: string }
  let inspector: Inspector
  let browser: Browser
  let page: Page

  beforeAll(async () => {
    ship = await pausedAtCall(dir, 'ship')
    ask = await pausedAtCall(dir, 'ask')
    inspector = await startInspector({ dir })
    browser = await launchChromium()
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } })
    await page.goto(inspector.url)
  }, 60_000)
  afterAll(async () => {
    await browser?.close()
    await inspector?.close()
  })

  const card = (request: { requestId: string }) => page.locator(`#waiting .approval[data-request="${request.requestId}"]`)

  it('should lead with both requests: the call with its input to edit, the question with its choices', async () => {
    await card(ship).waitFor()
    await card(ask).waitFor()
    expect(await page.locator('#waiting h2').textContent()).toBe('waiting for a person (2)')
    expect(JSON.parse(await card(ship).locator('textarea.input').inputValue())).toEqual({ env: 'production' })
    expect(await card(ship).locator('code').textContent()).toBe('deploy')
    expect(await card(ask).locator('.asked').textContent()).toBe(QUESTION)
    expect(await card(ask).locator('button.choice').allTextContents()).toEqual(CHOICES)
    await card(ask).locator('input.answer-text').waitFor()
    const shot = screenshotPath('waiting')
    await page.screenshot({ path: shot })
    expect(fs.statSync(shot).size).toBeGreaterThan(0)
  })

  it('should refuse edited input that is not JSON on the page, sending nothing and keeping the text', async () => {
    await card(ship).locator('textarea.input').fill('{"env": staging}')
    await card(ship).locator('button.approve').click()
    await card(ship).locator('.failed', { hasText: 'not valid JSON' }).waitFor()
    expect(await card(ship).locator('textarea.input').inputValue()).toBe('{"env": staging}')
    expect(response(dir, ship.id, ship.requestId)).toBeNull()
  })

  it('should approve the call with the edited input, writing it to the response file', async () => {
    await card(ship).locator('textarea.input').fill('{"env": "staging"}')
    await card(ship).locator('button.approve').click()
    const answered = card(ship).locator('.answered')
    await answered.waitFor()
    expect(await answered.textContent()).toBe('approved by spindle inspect: waiting for the runtime running this directory to act on it')
    expect(response(dir, ship.id, ship.requestId)).toEqual({ approved: true, input: { env: 'staging' }, by: 'spindle inspect' })
  })

  it('should answer the question with the choice clicked', async () => {
    await card(ask).locator('button.choice', { hasText: CHOICES[1]! }).click()
    const answered = card(ask).locator('.answered')
    await answered.waitFor()
    expect(await answered.textContent()).toBe('answered by spindle inspect: waiting for the runtime running this directory to act on it')
    expect(response(dir, ask.id, ask.requestId)).toEqual({ answer: CHOICES[1], by: 'spindle inspect' })
  })

  it('should show both threads completed once a runtime acted on the answers: the tool ran with the edited input, the model has the answer', async () => {
    const { threads, runs } = await carryOn(dir)
    expect(runs).toEqual([{ env: 'staging' }])
    // The transcript records the decision with the input the person gave, and the tool's result from it.
    const recorded = readThreadFiles(dir, ship.id).entries
    expect(recorded.find((e) => e.type === 'CALL_DECIDED')?.data).toMatchObject({ decision: 'approved', input: { env: 'staging' }, by: 'spindle inspect' })
    expect(recorded.find((e) => e.type === 'TOOL_DONE')?.data).toMatchObject({ callId: 'c1', ok: true, output: 'deployed to staging' })
    expect(threads).toEqual(
      expect.arrayContaining([
        { id: ship.id, status: 'completed', result: 'told: deployed to staging' },
        { id: ask.id, status: 'completed', result: `told: ${CHOICES[1]}` },
      ]),
    )
    await page.locator(`.node[data-id="${ship.id}"] .st.completed`).waitFor({ timeout: 10_000 })
    await page.locator(`.node[data-id="${ask.id}"] .st.completed`).waitFor({ timeout: 10_000 })
    expect(await page.locator('#waiting').textContent()).toBe('Nothing waits for a person.')
    // The conversation of the call approved with other input, as the page shows it.
    await page.locator(`.node[data-id="${ship.id}"]`).click()
    await page.locator('#conversation .event', { hasText: 'approved with edited input by spindle inspect' }).waitFor()
    expect(await page.locator('#conversation .msg.tool_result pre').textContent()).toBe('deployed to staging')
    await page.screenshot({ path: screenshotPath('approved-with-edited-input'), fullPage: true })
  })
})
