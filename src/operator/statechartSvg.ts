/**
 * A machine drawn as an SVG statechart from its ELK layout (statechartLayout.ts). Each state's group
 * carries `data-state="running.callingModel"`, so a page can highlight the state a thread is in
 * without drawing again; each arrow and its label carry `data-edge`, and the label's box is drawn
 * where ELK put it, on its own arrow.
 */
import type { AnyStateMachine } from 'xstate'
import type { LaidOutEdge, LaidOutState } from './statechartLayout.js'
import { LABEL_FONT_PX, STATE_FONT_PX, layoutStatechart } from './statechartLayout.js'

const esc = (text: string): string => text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)
const n = (value: number): string => (Math.round(value * 10) / 10).toString()

function drawState(state: LaidOutState): string {
  const { x, y, width: w, height: h } = state
  if (state.kind === 'initial') return `<circle class="initial" cx="${n(x + w / 2)}" cy="${n(y + h / 2)}" r="${n(w / 2)}"/>`
  if (state.kind === 'compound') {
    return (
      `<g class="state compound" data-state="${esc(state.path)}"><rect x="${n(x)}" y="${n(y)}" width="${n(w)}" height="${n(h)}" rx="12"/>` +
      `<text class="title" x="${n(x + 14)}" y="${n(y + 23)}">${esc(state.title)}</text></g>`
    )
  }
  const inner = state.kind === 'final' ? `<rect class="inner" x="${n(x + 4)}" y="${n(y + 4)}" width="${n(w - 8)}" height="${n(h - 8)}" rx="6"/>` : ''
  return (
    `<g class="state ${state.kind}" data-state="${esc(state.path)}"><rect x="${n(x)}" y="${n(y)}" width="${n(w)}" height="${n(h)}" rx="9"/>${inner}` +
    `<text x="${n(x + w / 2)}" y="${n(y + h / 2 + STATE_FONT_PX * 0.35)}" text-anchor="middle">${esc(state.title)}</text></g>`
  )
}

const ends = (edge: LaidOutEdge): string => `data-edge="${edge.id}" data-from="${esc(edge.from)}" data-to="${esc(edge.to)}"`

function drawArrow(edge: LaidOutEdge): string[] {
  return edge.sections.map((points) => `<polyline class="edge" ${ends(edge)} points="${points.map((p) => `${n(p.x)},${n(p.y)}`).join(' ')}" marker-end="url(#arrow)"/>`)
}

function drawLabel(edge: LaidOutEdge): string {
  const label = edge.label!
  // The box hides the arrow where the label sits on it, so the arrow reads as passing through it.
  return (
    `<g class="label" ${ends(edge)}><rect x="${n(label.x)}" y="${n(label.y)}" width="${n(label.width)}" height="${n(label.height)}" rx="3"/>` +
    `<text x="${n(label.x + label.width / 2)}" y="${n(label.y + label.height / 2 + LABEL_FONT_PX * 0.35)}" text-anchor="middle">${esc(label.text)}</text></g>`
  )
}

/** The statechart of `machine` as a standalone SVG document. */
export async function statechartSvg(machine: AnyStateMachine): Promise<string> {
  const layout = await layoutStatechart(machine)
  const width = n(layout.width)
  const height = n(layout.height)
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-family="Helvetica, Arial, sans-serif" font-size="${STATE_FONT_PX}">`,
    `<!-- Generated from machines/ by \`spindle viz\`; do not edit. -->`,
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    '<style>.state rect{fill:#f6f7fb;stroke:#8a8fa3;stroke-width:1.2}.compound>rect{fill:#fff;stroke:#a9adbf}.final .inner{fill:none}' +
      `.title{font-weight:600}.edge{fill:none;stroke:#7a7a7a;stroke-width:1.1}.label rect{fill:#fff;stroke:#c9ccd8;stroke-width:.8}.label text{font-size:${LABEL_FONT_PX}px;fill:#3d4466}.initial{fill:#333}` +
      '.current>rect{fill:#ffe066;stroke:#a67c00;stroke-width:2}.within>rect{fill:#fffbe6;stroke:#a67c00;stroke-width:2}</style>',
    // An opaque canvas: on a dark page (GitHub's dark theme shows the README's image as it is) the
    // grey arrows and dark text would otherwise sit on black.
    `<rect class="canvas" x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
    ...layout.states.map(drawState),
    ...layout.edges.flatMap(drawArrow),
    ...layout.edges.filter((e) => e.label).map(drawLabel),
    '</svg>',
    '',
  ].join('\n')
}
