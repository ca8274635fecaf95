/**
 * The inspector page end to end in headless Chromium (Debian's package, driven by playwright-core):
 * a suspended thread shows with its pending approval, one click on Approve, and the page shows the
 * thread completed once the host's runtime has carried it on; an answer the runtime rejected shows
 * on the thread's page. Skipped, saying so, on a machine without /usr/bin/chromium (`.ci/run`
 * installs it when it can).
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { chromium } from 'playwright-core'
import { describe, expect, it } from 'vitest'
import { startInspector } from '../../src/operator/inspector.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { formatUsd } from '../../src/base/money.js'
import { readThreadFiles } from '../../src/operator/inspectThread.js'

const CHROMIUM = process.env.SPINDLE_CHROMIUM ?? '/usr/bin/chromium'

function host(dir: string, mode: 'limit' | 'run' | 'budget'): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

describe.skipIf(!fs.existsSync(CHROMIUM))(`spindle inspect in headless Chromium (${CHROMIUM})`, () => {
  it('should approve a suspended thread with one click and then show it completed', async () => {
    const dir = tempDir('spindle-browser')
    const id = host(dir, 'limit')
    const inspector = await startInspector({ dir })
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
    try {
      const page = await browser.newPage()
      await page.goto(inspector.url)
      const node = page.locator(`.node[data-id="${id}"]`)
      await node.waitFor()
      await expect(node.locator('.st').textContent()).resolves.toBe('suspended')
      await node.click()
      const approve = page.locator('button.approve')
      await approve.waitFor()
      await expect(page.locator('.approval b').textContent()).resolves.toContain("has reached its tur")
      await expect(page.locator('.crumbs .here').textContent()).resolves.toBe('suspended')
      await expect(page.locator('#chart .state.current').textContent()).resolves.toBe('suspended')
      await approve.click()
      const answered = page.locator('.approval .answered')
      await answered.waitFor()
      expect(await answered.textContent()).toBe('approved by spindle inspect: waiting for the runtime running this directory to act on it')
      expect(await page.locator('button.approve').count()).toBe(0)

      // The answer lives in the response file, not in the page: a reload still shows it answered.
      await page.reload()
      await page.locator(`.node[data-id="${id}"]`).click()
      await answered.waitFor()
      expect(await page.locator('button.approve').count()).toBe(0)

      // The host's runtime opens the directory, honours the response file and finishes the thread.
      expect(JSON.parse(host(dir, 'run'))).toEqual([expect.objectContaining({ id, status: 'completed' })])
      await page.locator(`.node[data-id="${id}"] .st.completed`).waitFor({ timeout: 10_000 })
      // The statechart folds to the state it is in; the full chart, closed, marks it too.
      await page.locator('.crumbs .here', { hasText: 'completed' }).waitFor()
      expect(await page.locator('#chart .state.current').textContent()).toBe('completed')
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it("should show a thread's budget and its retries with the last error category on its page", async () => {
    const dir = tempDir('spindle-browser-budget')
    host(dir, 'budget')
    const inspector = await startInspector({ dir })
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
    try {
      const page = await browser.newPage()
      await page.goto(inspector.url)
      await page.locator('.node[data-id="lead"]').click()
      const spend = page.locator('table.budget tr', { hasText: 'spend' })
      await spend.waitFor()
      const cells = (await spend.locator('td').allTextContents()).map((c) => c.trim())
      expect(cells).toEqual([formatUsd(1), formatUsd(0.05), formatUsd(0.13), formatUsd(0), formatUsd(0.87)])
      expect(await page.locator('.retries').count()).toBe(0)
      await page.locator('.node[data-id="first"]').click()
      await page.locator('.retries').waitFor()
      expect(await page.locator('.retries').textContent()).toBe('model calls retried: 2; the last model error: transient (overloaded)')
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it("should show an answer the runtime rejected on the thread's page, with who wrote it and why", async () => {
    const dir = tempDir('spindle-browser-rejected')
    const id = host(dir, 'limit')
    const folder = path.join(dir, 'threads', id, 'approvals')
    const requestId = fs.readdirSync(folder).find((n) => n.endsWith('.request.json'))!.replace('.request.json', '')
    fs.writeFileSync(path.join(folder, `${requestId}.response.json`), JSON.stringify({ approved: true, limits: { turns: 1 }, by: 'mallory' }))
    // The host's runtime rejects it as it opens the directory: 1 turn is below the 2 used.
    expect(JSON.parse(host(dir, 'run'))).toEqual([expect.objectContaining({ id, status: 'suspended' })])
    const inspector = await startInspector({ dir })
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
    try {
      const page = await browser.newPage()
      await page.goto(inspector.url)
      await page.locator(`.node[data-id="${id}"]`).click()
      const rejected = page.locator(`.rejected[data-request="${requestId}"]`)
      await rejected.waitFor()
      expect(await rejected.locator('b').textContent()).toBe('approve (turns 1) by mallory')
      expect(await rejected.locator('.why').textContent()).toContain(`Approving thread ${id} with these limits would suspend it again at once`)
      // The request is still open: its buttons are there to answer it again.
      await page.locator('button.approve').waitFor()
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)

  it('should show spend to a thousandth of a cent, as the CLI prints it', async () => {
    // Issue 22: the page showed $0.0000 (or $0.0001) where `spindle ls` showed $0.00011.
    const dir = tempDir('spindle-browser-money')
    const id = host(dir, 'limit')
    const spend = formatUsd((readThreadFiles(dir, id).envelope!.snapshot as { context: { usage: { spend: number } } }).context.usage.spend)
    expect(spend).toMatch(/^\$0\.000\d[1-9]$/)
    const inspector = await startInspector({ dir })
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] })
    try {
      const page = await browser.newPage()
      await page.goto(inspector.url)
      const node = page.locator(`.node[data-id="${id}"]`)
      await node.waitFor()
      expect(await node.textContent()).toContain(spend)
      await node.click()
      const cost = page.locator('table.cost th', { hasText: 'spend' }).locator('xpath=following-sibling::td')
      await cost.waitFor()
      expect(await cost.textContent()).toBe(`${spend} / ∞`)
    } finally {
      await browser.close()
      await inspector.close()
    }
  }, 60_000)
})
