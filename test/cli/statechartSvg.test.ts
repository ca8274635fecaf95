/**
 * The SVG statecharts (`spindle viz`, the README, the inspector): every arrow's label must say
 * unambiguously which arrow it belongs to — its box on its own arrow, clearly nearer to it than to
 * any other — and the picture must read on a dark page too. Geometry is read back from the SVG
 * this module writes; what a browser draws of it is checked in headless Chromium.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Browser } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { svgVisualizations } from '../../src/operator/visualize.js'
import { launchChromium } from '../helpers/chromium.js'

// What runs in the page (page.evaluate) uses the browser's DOM, whose types this Node project leaves out.
declare const document: any

type Point = [number, number]
interface Rect {
  x: number
  y: number
  width: number
  height: number
}

/** The arrows (as segments) and labels (as boxes) of a statechart, keyed by `data-edge`. */
function geometry(svg: string) {
  const arrows = new Map<string, Array<[Point, Point]>>()
  for (const [, id, points] of svg.matchAll(/<polyline class="edge" data-edge="(\w+)"[^>]*? points="([^"]+)"/g)) {
    const p = points!.split(' ').map((xy) => xy.split(',').map(Number) as Point)
    const segments = arrows.get(id!) ?? []
    for (let i = 1; i < p.length; i++) segments.push([p[i - 1]!, p[i]!])
    arrows.set(id!, segments)
  }
  const labels = [
    ...svg.matchAll(/<g class="label" data-edge="(\w+)" data-from="([^"]*)" data-to="([^"]*)"><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"[^>]*\/><text[^>]*>([^<]*)<\/text>/g),
  ].map(([, edge, from, to, x, y, width, height, text]) => ({ edge: edge!, from: from!, to: to!, text: text!, box: { x: +x!, y: +y!, width: +width!, height: +height! } }))
  return { arrows, labels }
}

/** Distance from a box to a segment (0 when the segment touches or crosses it); a point is a box of no size. */
function distance(box: Rect, [a, b]: [Point, Point]): number {
  // Sampled along the segment: exact enough at a tenth of a pixel, for any direction.
  const steps = Math.max(1, Math.ceil(Math.hypot(b[0] - a[0], b[1] - a[1]) * 10))
  let best = Infinity
  for (let i = 0; i <= steps; i++) {
    const x = a[0] + ((b[0] - a[0]) * i) / steps
    const y = a[1] + ((b[1] - a[1]) * i) / steps
    const dx = Math.max(box.x - x, 0, x - box.x - box.width)
    const dy = Math.max(box.y - y, 0, y - box.y - box.height)
    best = Math.min(best, Math.hypot(dx, dy))
  }
  return best
}

const toArrow = (box: Rect, segments: Array<[Point, Point]>): number => Math.min(...segments.map((s) => distance(box, s)))
const middle = (box: Rect): Rect => ({ x: box.x + box.width / 2, y: box.y + box.height / 2, width: 0, height: 0 })

/** Within this of its arrow, a label's box is on it or right next to it. */
const ON_ARROW_PX = 3
/** How much nearer a label's middle must be to its own arrow than to any other, for the eye to tell. */
const CLEARLY_NEARER_PX = 8

describe('statechart SVG', () => {
  let svgs: Record<string, string>
  beforeAll(async () => {
    svgs = await svgVisualizations()
  })

  for (const name of ['thread.machine.svg', 'orchestrator.machine.svg']) {
    it(`should put each label of ${name} on its own arrow, nearer to it than to any other`, () => {
      const { arrows, labels } = geometry(svgs[name]!)
      expect(labels.length).toBeGreaterThan(2)
      expect(labels.length).toBe([...arrows.keys()].filter((id) => labels.some((l) => l.edge === id)).length)
      for (const label of labels) {
        const what = `"${label.text}" (${label.from} → ${label.to})`
        const own = arrows.get(label.edge)!
        expect(toArrow(label.box, own), `${what}: its box is off its arrow`).toBeLessThanOrEqual(ON_ARROW_PX)
        // A label that only touches its arrow at one end can still read as another's: its middle must be clearly nearer its own.
        const ownFromMiddle = toArrow(middle(label.box), own)
        for (const [id, segments] of arrows) {
          if (id === label.edge) continue
          expect(toArrow(label.box, segments), `${what}: arrow ${id} touches its box`).toBeGreaterThan(ON_ARROW_PX)
          expect(toArrow(middle(label.box), segments), `${what}: its middle is as near to arrow ${id} as to its own`).toBeGreaterThan(ownFromMiddle + CLEARLY_NEARER_PX)
        }
      }
    })
  }

  it('should label the arrow from callingModel to suspended with its events, on that arrow (issue 22)', () => {
    const { arrows, labels } = geometry(svgs['thread.machine.svg']!)
    const label = labels.find((l) => l.text === 'BUDGET_EXHAUSTED, MODEL_FAILED')!
    expect(label).toMatchObject({ from: 'running.callingModel', to: 'suspended' })
    const intoContinued = labels.find((l) => l.to === 'continued')!
    expect(toArrow(middle(label.box), arrows.get(label.edge)!)).toBeLessThanOrEqual(ON_ARROW_PX)
    expect(toArrow(label.box, arrows.get(intoContinued.edge)!)).toBeGreaterThan(ON_ARROW_PX + CLEARLY_NEARER_PX)
  })

  it('should draw an opaque light canvas under the whole chart', () => {
    const svg = svgs['thread.machine.svg']!
    const [, width, height] = /viewBox="0 0 ([\d.]+) ([\d.]+)"/.exec(svg)!
    expect(svg).toContain(`<rect class="canvas" x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`)
    // Drawn first, so everything else is on it.
    expect(svg.indexOf('class="canvas"')).toBeLessThan(svg.indexOf('class="state'))
  })
})

describe('statechart SVG in headless Chromium', () => {
  let browser: Browser
  beforeAll(async () => {
    browser = await launchChromium()
  })
  afterAll(async () => {
    await browser?.close()
  })

  it('should fit each label and state name inside its box in the fonts this browser draws with', async () => {
    const page = await browser.newPage()
    for (const svg of Object.values(await svgVisualizations())) {
      await page.setContent(`<!doctype html><html><body style="margin:0">${svg}</body></html>`)
      const overflows = await page.evaluate(() =>
        [...document.querySelectorAll('g.label, g.state:not(.compound)')].flatMap((g) => {
          const box = g.querySelector('rect')!.getBBox()
          const text = g.querySelector('text')!.getBBox()
          const fits = text.x >= box.x && text.y >= box.y && text.x + text.width <= box.x + box.width && text.y + text.height <= box.y + box.height
          return fits ? [] : [`${g.textContent}: text ${text.width.toFixed(1)}×${text.height.toFixed(1)} in a box ${box.width.toFixed(1)}×${box.height.toFixed(1)}`]
        }),
      )
      expect(overflows).toEqual([])
    }
    await page.close()
  })

  it('should show the README image on a dark page with a light background', async () => {
    const root = path.resolve(import.meta.dirname, '../..')
    const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8')
    const [, src] = /!\[[^\]]*\]\((visualizations\/thread\.machine\.svg)\)/.exec(readme)!
    const page = await browser.newPage()
    // As GitHub shows a README image: an <img>, on its dark theme's background.
    const dataUrl = `data:image/svg+xml;base64,${fs.readFileSync(path.join(root, src!)).toString('base64')}`
    await page.setContent(`<!doctype html><html><body style="margin:0;background:#0d1117"><img id="chart" src="${dataUrl}"></body></html>`)
    const seen = await page.evaluate(async () => {
      const img = document.getElementById('chart')
      await img.decode()
      const canvas = document.createElement('canvas')
      canvas.width = img.naturalWidth
      canvas.height = img.naturalHeight
      const ctx = canvas.getContext('2d')!
      ctx.fillStyle = '#0d1117'
      ctx.fillRect(0, 0, canvas.width, canvas.height)
      ctx.drawImage(img, 0, 0)
      const at = (x: number, y: number) => [...ctx.getImageData(x, y, 1, 1).data]
      return { width: img.naturalWidth, corners: [at(1, 1), at(canvas.width - 2, 1), at(1, canvas.height - 2), at(canvas.width - 2, canvas.height - 2)] }
    })
    expect(seen.width).toBeGreaterThan(100)
    for (const corner of seen.corners) expect(corner).toEqual([255, 255, 255, 255])
    await page.close()
  })
})
