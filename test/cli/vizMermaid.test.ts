/**
 * The Mermaid diagrams `spindle viz` writes, rendered by the real mermaid package (its browser
 * bundle, in headless Chromium: Mermaid needs a DOM) — not compared as text. Each must render
 * without error, draw every state of its machine under its own name, nest exactly the states the
 * machine nests, and label every transition.
 */
import fs from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AnyStateMachine } from 'xstate'
import { orchestratorMachine } from '../../machines/orchestrator.machine.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { NodeLike } from '../../src/operator/machineShape.js'
import { mermaidId, toMermaid } from '../../src/operator/visualize.js'
import { launchChromium, mermaidBundle } from '../helpers/chromium.js'

// What runs in the page (page.evaluate) uses the browser's DOM, whose types this Node project leaves out.
declare const document: any

interface Rendered {
  error: string | null
  /** Each drawn state (by Mermaid id): its text and its box on the page. */
  states: Record<string, { text: string; box: { x: number; y: number; width: number; height: number } }>
  labels: string[]
}

/** Renders `text` with mermaid.render and reads back what it drew. */
async function render(page: Page, text: string): Promise<Rendered> {
  return page.evaluate(async (text) => {
    const mermaid = (globalThis as unknown as { mermaid: any }).mermaid
    mermaid.initialize({ startOnLoad: false })
    const out = document.getElementById('out')!
    out.innerHTML = ''
    const id = `d${Math.random().toString(36).slice(2)}`
    try {
      const { svg } = await mermaid.render(id, text)
      out.innerHTML = svg
    } catch (error) {
      return { error: String((error as Error).message ?? error), states: {}, labels: [] }
    }
    // Mermaid 11 names each state's group `<render id>-state-<state id>-<n>`.
    const named = new RegExp(`^${id}-state-(.+)-\\d+$`)
    const states: Rendered['states'] = {}
    for (const g of out.querySelectorAll('g[id]')) {
      const state = named.exec(g.id)?.[1]
      if (!state) continue
      const { x, y, width, height } = g.getBoundingClientRect()
      // A composite's box holds its children's text too; its own title is its first label.
      const title = g.classList.contains('statediagram-cluster') ? (g.querySelector('.cluster-label, .label')?.textContent ?? '') : (g.textContent ?? '')
      states[state] = { text: title.trim(), box: { x, y, width, height } }
    }
    const labels = [...out.querySelectorAll('g.label[data-id^="edge"]')].map((g) => (g.textContent ?? '').trim()).filter((t) => t !== '')
    return { error: null, states, labels }
  }, text)
}

function statesOf(node: NodeLike, parent: NodeLike | null = null, out: Array<{ node: NodeLike; parent: NodeLike | null }> = []) {
  for (const child of Object.values(node.states)) {
    out.push({ node: child, parent })
    statesOf(child, child, out)
  }
  return out
}

const inside = (a: Rendered['states'][string]['box'], b: Rendered['states'][string]['box']): boolean =>
  a.x >= b.x && a.y >= b.y && a.x + a.width <= b.x + b.width && a.y + a.height <= b.y + b.height

describe('visualizations/*.mmd rendered by mermaid in headless Chromium', () => {
  let browser: Browser
  let page: Page
  beforeAll(async () => {
    browser = await launchChromium()
    page = await browser.newPage({ viewport: { width: 1600, height: 1200 } })
    await page.setContent('<!doctype html><html><body><div id="out"></div></body></html>')
    await page.addScriptTag({ path: mermaidBundle() })
  })
  afterAll(async () => {
    await browser?.close()
  })

  for (const [name, machine] of [['thread', threadMachine], ['orchestrator', orchestratorMachine]] as [string, AnyStateMachine][]) {
    it(`should render the ${name} machine with every state in the box of the state that holds it`, async () => {
      const drawn = await render(page, toMermaid(machine))
      expect(drawn.error).toBeNull()
      const all = statesOf(machine.root as unknown as NodeLike)
      for (const { node } of all) {
        const state = drawn.states[mermaidId(node.id)]
        expect(state, `state ${node.id} is not drawn`).toBeDefined()
        expect(state!.text).toContain(node.key)
      }
      // Mermaid draws a state where it is first named: one named first inside a composite's block lands in its box.
      for (const composite of all.filter(({ node }) => Object.keys(node.states).length > 0)) {
        const box = drawn.states[mermaidId(composite.node.id)]!.box
        for (const { node, parent } of all) {
          if (node === composite.node) continue
          const within = parent !== null && (parent === composite.node || parent.id.startsWith(`${composite.node.id}.`))
          expect(inside(drawn.states[mermaidId(node.id)]!.box, box), `${node.id} ${within ? 'outside' : 'inside'} ${composite.node.id}`).toBe(within)
        }
      }
    })

    it(`should label every transition of the ${name} machine`, async () => {
      const text = toMermaid(machine)
      const drawn = await render(page, text)
      const written = [...text.matchAll(/^\s*\S+ --> \S+: (.+)$/gm)].map((m) => m[1]!)
      expect(written.length).toBeGreaterThan(0)
      expect(drawn.labels.sort()).toEqual(written.sort())
    })
  }

  it('should render the diagrams checked in under visualizations/', async () => {
    for (const name of ['thread', 'orchestrator']) {
      const file = new URL(`../../visualizations/${name}.machine.mmd`, import.meta.url)
      expect((await render(page, fs.readFileSync(file, 'utf8'))).error, name).toBeNull()
    }
  })
})
