/**
 * A machine drawn as an SVG statechart: compound states as boxes around their children, initial
 * and final states marked, one arrow per pair of states labelled with its events. ELK (the layout
 * engine Stately's own tools use) places everything; this module only turns its result into SVG.
 * Each state's group carries `data-state="running.callingModel"`, so a page can highlight the
 * state a thread is in without drawing again.
 */
import elkBundled from 'elkjs/lib/elk.bundled.js'
import type { ELK as ElkLayout, ElkExtendedEdge, ElkNode } from 'elkjs/lib/elk.bundled.js'
import type { AnyStateMachine } from 'xstate'
import type { NodeLike } from './machineShape.js'
import { transitionsOf } from './machineShape.js'

// A CommonJS module: its default import is the constructor, which its typings do not say.
const ELK = elkBundled as unknown as new () => ElkLayout

const FONT_PX = 13
/** Width of one character of the 13 px sans-serif labels, generous so no name overflows its box. */
const CHAR_PX = 7.6
const LABEL_CHAR_PX = 6.3
const LEAF_HEIGHT = 34

const esc = (text: string): string => text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)
const n = (value: number): string => (Math.round(value * 10) / 10).toString()

interface Drawn extends ElkNode {
  kind?: 'initial' | 'leaf' | 'final' | 'compound'
  path?: string
  title?: string
  children?: Drawn[]
}

/** The ELK graph of a machine: states as (nested) nodes, transitions grouped by source and target. */
function graphOf(machine: AnyStateMachine): { root: Drawn; edges: ElkExtendedEdge[] } {
  const rootNode = machine.root as unknown as NodeLike
  const prefix = `${rootNode.id}.`
  const elkId = (id: string): string => `s_${id.replace(/[^a-zA-Z0-9_]/g, '_')}`
  const grouped = new Map<string, { from: string; to: string; events: string[] }>()
  const connect = (from: string, to: string, event: string | null): void => {
    const key = `${from}->${to}`
    let edge = grouped.get(key)
    if (!edge) grouped.set(key, (edge = { from, to, events: [] }))
    if (event !== null && !edge.events.includes(event)) edge.events.push(event)
  }
  const build = (node: NodeLike): Drawn => {
    const id = elkId(node.id)
    for (const { event, target } of transitionsOf(node)) connect(id, elkId(target), event)
    const path = node.id.startsWith(prefix) ? node.id.slice(prefix.length) : node.key
    const children = Object.values(node.states)
    if (children.length === 0) {
      const final = node.type === 'final'
      return { id, kind: final ? 'final' : 'leaf', path, title: node.key, width: node.key.length * CHAR_PX + (final ? 34 : 28), height: LEAF_HEIGHT }
    }
    const drawn: Drawn[] = children.map(build)
    if (node.initial) {
      const start = `${id}__initial`
      drawn.unshift({ id: start, kind: 'initial', width: 12, height: 12 })
      connect(start, elkId(node.initial.target[0]!.id), null)
    }
    return {
      id,
      kind: 'compound',
      path,
      title: node.key,
      children: drawn,
      layoutOptions: { 'elk.padding': '[top=36,left=16,bottom=16,right=16]' },
    }
  }
  const top = build(rootNode)
  const edges = [...grouped.values()].map((edge, i): ElkExtendedEdge => {
    const text = edge.events.join(', ')
    return {
      id: `e${i}`,
      sources: [edge.from],
      targets: [edge.to],
      labels: text ? [{ text, width: text.length * LABEL_CHAR_PX + 6, height: 14 }] : [],
    }
  })
  // The machine's own root is the canvas, not a box: its children are drawn at the top level.
  return { root: { id: 'root', children: top.children ?? [top] }, edges }
}

/** The statechart of `machine` as a standalone SVG document. */
export async function statechartSvg(machine: AnyStateMachine): Promise<string> {
  const { root, edges } = graphOf(machine)
  const laidOut = (await new ELK().layout({
    ...root,
    edges,
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'DOWN',
      'elk.hierarchyHandling': 'INCLUDE_CHILDREN',
      'elk.edgeRouting': 'ORTHOGONAL',
      'elk.layered.spacing.nodeNodeBetweenLayers': '50',
      'elk.spacing.nodeNode': '40',
      'elk.edgeLabels.placement': 'CENTER',
      'elk.spacing.edgeLabel': '4',
      'elk.padding': '[top=20,left=20,bottom=20,right=20]',
    },
  })) as Drawn & { edges?: Array<ElkExtendedEdge & { container?: string }> }

  // ELK gives each node's position relative to its parent and each edge's relative to its container.
  const origin = new Map<string, { x: number; y: number }>([['root', { x: 0, y: 0 }]])
  const states: string[] = []
  const place = (node: Drawn, ox: number, oy: number): void => {
    const x = ox + (node.x ?? 0)
    const y = oy + (node.y ?? 0)
    origin.set(node.id, { x, y })
    const w = node.width ?? 0
    const h = node.height ?? 0
    if (node.kind === 'initial') {
      states.push(`<circle class="initial" cx="${n(x + w / 2)}" cy="${n(y + h / 2)}" r="${n(w / 2)}"/>`)
    } else if (node.kind === 'compound') {
      states.push(
        `<g class="state compound" data-state="${esc(node.path!)}"><rect x="${n(x)}" y="${n(y)}" width="${n(w)}" height="${n(h)}" rx="12"/>` +
          `<text class="title" x="${n(x + 14)}" y="${n(y + 23)}">${esc(node.title!)}</text></g>`,
      )
    } else if (node.kind) {
      const inner = node.kind === 'final' ? `<rect class="inner" x="${n(x + 4)}" y="${n(y + 4)}" width="${n(w - 8)}" height="${n(h - 8)}" rx="6"/>` : ''
      states.push(
        `<g class="state ${node.kind}" data-state="${esc(node.path!)}"><rect x="${n(x)}" y="${n(y)}" width="${n(w)}" height="${n(h)}" rx="9"/>${inner}` +
          `<text x="${n(x + w / 2)}" y="${n(y + h / 2 + FONT_PX * 0.35)}" text-anchor="middle">${esc(node.title!)}</text></g>`,
      )
    }
    for (const child of node.children ?? []) place(child, x, y)
  }
  place(laidOut, 0, 0)

  const arrows: string[] = []
  const labels: string[] = []
  for (const edge of laidOut.edges ?? []) {
    const o = origin.get(edge.container ?? 'root') ?? { x: 0, y: 0 }
    for (const section of edge.sections ?? []) {
      const points = [section.startPoint, ...(section.bendPoints ?? []), section.endPoint].map((p) => `${n(p.x + o.x)},${n(p.y + o.y)}`)
      arrows.push(`<polyline class="edge" points="${points.join(' ')}" marker-end="url(#arrow)"/>`)
    }
    for (const label of edge.labels ?? []) {
      labels.push(`<text class="label" x="${n((label.x ?? 0) + o.x + 3)}" y="${n((label.y ?? 0) + o.y + 11)}">${esc(label.text ?? '')}</text>`)
    }
  }
  const width = n(laidOut.width ?? 0)
  const height = n(laidOut.height ?? 0)
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" font-family="system-ui, sans-serif" font-size="${FONT_PX}">`,
    `<!-- Generated from machines/ by \`spindle viz\`; do not edit. -->`,
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    '<style>.state rect{fill:#f6f7fb;stroke:#8a8fa3;stroke-width:1.2}.compound>rect{fill:#fff;stroke:#a9adbf}.final .inner{fill:none}' +
      '.title{font-weight:600}.edge{fill:none;stroke:#7a7a7a;stroke-width:1.1}.label{font-size:10.5px;fill:#3d4466}.initial{fill:#333}' +
      '.current>rect{fill:#ffe066;stroke:#a67c00;stroke-width:2}.within>rect{fill:#fffbe6;stroke:#a67c00;stroke-width:2}</style>',
    ...states,
    ...arrows,
    ...labels,
    '</svg>',
    '',
  ].join('\n')
}
