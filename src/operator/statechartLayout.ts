/**
 * A machine laid out as a statechart by ELK (the layout engine Stately's own tools use): compound
 * states as boxes around their children, initial and final states marked, one edge per pair of
 * states with its events as one label. Everything comes back in one coordinate system, the
 * canvas's, so the drawing (statechartSvg.ts) only paints it.
 */
import elkBundled from 'elkjs/lib/elk.bundled.js'
import type { ELK as ElkLayout, ElkExtendedEdge, ElkNode } from 'elkjs/lib/elk.bundled.js'
import type { AnyStateMachine } from 'xstate'
import type { NodeLike } from './machineShape.js'
import { transitionsOf } from './machineShape.js'

// A CommonJS module: its default import is the constructor, which its typings do not say.
const ELK = elkBundled as unknown as new () => ElkLayout

export const STATE_FONT_PX = 13
export const LABEL_FONT_PX = 10.5
const LEAF_HEIGHT = 34
const LABEL_PAD_X = 4
const LABEL_HEIGHT = 15

export interface Box {
  x: number
  y: number
  width: number
  height: number
}

export interface LaidOutState extends Box {
  kind: 'initial' | 'leaf' | 'final' | 'compound'
  /** The state's path below the machine (`running.callingModel`); '' for an initial marker. */
  path: string
  title: string
}

export interface LaidOutEdge {
  id: string
  /** The state paths it joins; an initial marker's edge starts at `<parent>.[*]`. */
  from: string
  to: string
  /** Each section of the route as its points, start to end. */
  sections: Array<Array<{ x: number; y: number }>>
  label: (Box & { text: string }) | null
}

export interface StatechartLayout {
  width: number
  height: number
  states: LaidOutState[]
  edges: LaidOutEdge[]
}

/**
 * Widths of Helvetica's (and Arial's) glyphs in thousandths of an em, which the SVG asks for; the
 * 12 % margin below covers wider faces a viewer may draw with instead, such as DejaVu Sans on Linux.
 * A label's box must hold its text in whichever font draws it, or the box misstates where it is.
 */
const GLYPH_EM: Record<string, number> = {
  A: 667, B: 667, C: 722, D: 722, E: 667, F: 611, G: 778, H: 722, I: 278, J: 500, K: 667, L: 556, M: 833,
  N: 722, O: 778, P: 667, Q: 778, R: 722, S: 667, T: 611, U: 722, V: 667, W: 944, X: 667, Y: 667, Z: 611,
  _: 556, ',': 278, ' ': 278, '.': 278, '-': 333, '*': 389, '[': 278, ']': 278,
  f: 278, i: 222, j: 222, l: 222, r: 333, t: 278, m: 833, w: 722,
}

/** The drawn width of `text` at `px`, erring wide. */
function textWidth(text: string, px: number): number {
  let em = 0
  for (const c of text) em += GLYPH_EM[c] ?? 556
  return (em / 1000) * px * 1.12
}

interface Drawn extends ElkNode {
  kind?: LaidOutState['kind']
  path?: string
  title?: string
  children?: Drawn[]
}

/** The ELK graph of a machine: states as (nested) nodes, transitions grouped by source and target. */
function graphOf(machine: AnyStateMachine): { root: Drawn; edges: ElkExtendedEdge[]; ends: Map<string, { from: string; to: string }> } {
  const rootNode = machine.root as unknown as NodeLike
  const prefix = `${rootNode.id}.`
  const elkId = (id: string): string => `s_${id.replace(/[^a-zA-Z0-9_]/g, '_')}`
  const pathOf = (id: string): string => (id.startsWith(prefix) ? id.slice(prefix.length) : id)
  const grouped = new Map<string, { from: string; to: string; ends: { from: string; to: string }; events: string[] }>()
  const connect = (from: string, to: string, ends: { from: string; to: string }, event: string | null): void => {
    const key = `${from}->${to}`
    let edge = grouped.get(key)
    if (!edge) grouped.set(key, (edge = { from, to, ends, events: [] }))
    if (event !== null && !edge.events.includes(event)) edge.events.push(event)
  }
  const build = (node: NodeLike): Drawn => {
    const id = elkId(node.id)
    const path = pathOf(node.id)
    for (const { event, target } of transitionsOf(node)) connect(id, elkId(target), { from: path, to: pathOf(target) }, event)
    const children = Object.values(node.states)
    if (children.length === 0) {
      const final = node.type === 'final'
      const width = Math.ceil(textWidth(node.key, STATE_FONT_PX)) + (final ? 30 : 24)
      return { id, kind: final ? 'final' : 'leaf', path, title: node.key, width, height: LEAF_HEIGHT }
    }
    const drawn: Drawn[] = children.map(build)
    if (node.initial) {
      const start = `${id}__initial`
      drawn.unshift({ id: start, kind: 'initial', path: '', title: '', width: 12, height: 12 })
      const target = node.initial.target[0]!.id
      connect(start, elkId(target), { from: node === rootNode ? '[*]' : `${path}.[*]`, to: pathOf(target) }, null)
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
  const ends = new Map<string, { from: string; to: string }>()
  const edges = [...grouped.values()].map((edge, i): ElkExtendedEdge => {
    const id = `e${i}`
    ends.set(id, edge.ends)
    const text = edge.events.join(', ')
    const width = Math.ceil(textWidth(text, LABEL_FONT_PX)) + 2 * LABEL_PAD_X
    // Inline: ELK sets the label on its edge, which runs through it. Set beside the edge (ELK's
    // default), a wide label reached as near another edge as its own, and read as that one's.
    const labels = text ? [{ id: `${id}_label`, text, width, height: LABEL_HEIGHT, layoutOptions: { 'elk.edgeLabels.inline': 'true' } }] : []
    return { id, sources: [edge.from], targets: [edge.to], labels }
  })
  // The machine's own root is the canvas, not a box: its children are laid out at the top level.
  return { root: { id: 'root', children: top.children ?? [top] }, edges, ends }
}

/** The statechart of `machine`, laid out. */
export async function layoutStatechart(machine: AnyStateMachine): Promise<StatechartLayout> {
  const { root, edges, ends } = graphOf(machine)
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
      'elk.spacing.edgeEdge': '14',
      'elk.layered.spacing.edgeEdgeBetweenLayers': '14',
      'elk.edgeLabels.placement': 'CENTER',
      'elk.spacing.edgeLabel': '4',
      'elk.padding': '[top=20,left=20,bottom=20,right=20]',
    },
  })) as Drawn & { edges?: Array<ElkExtendedEdge & { container?: string }> }

  // ELK gives each node's position relative to its parent and each edge's relative to its container.
  const origin = new Map<string, { x: number; y: number }>([['root', { x: 0, y: 0 }]])
  const states: LaidOutState[] = []
  const place = (node: Drawn, ox: number, oy: number): void => {
    const x = ox + (node.x ?? 0)
    const y = oy + (node.y ?? 0)
    origin.set(node.id, { x, y })
    if (node.kind) states.push({ kind: node.kind, path: node.path!, title: node.title!, x, y, width: node.width ?? 0, height: node.height ?? 0 })
    for (const child of node.children ?? []) place(child, x, y)
  }
  place(laidOut, 0, 0)

  const laidOutEdges = (laidOut.edges ?? []).map((edge): LaidOutEdge => {
    const o = origin.get(edge.container ?? 'root') ?? { x: 0, y: 0 }
    const label = edge.labels?.[0]
    const drawn: LaidOutEdge = {
      id: edge.id,
      ...ends.get(edge.id)!,
      sections: (edge.sections ?? []).map((s) => [s.startPoint, ...(s.bendPoints ?? []), s.endPoint].map((p) => ({ x: p.x + o.x, y: p.y + o.y }))),
      label: label
        ? { text: label.text ?? '', x: (label.x ?? 0) + o.x, y: (label.y ?? 0) + o.y, width: label.width ?? 0, height: label.height ?? 0 }
        : null,
    }
    const state = drawn.from === drawn.to ? states.find((s) => s.path === drawn.from) : undefined
    return state ? loopThroughLabel(drawn, state) : drawn
  })
  return { width: laidOut.width ?? 0, height: laidOut.height ?? 0, states, edges: laidOutEdges }
}

/**
 * ELK sets a self-loop's label beside the loop rather than on it: the loop is drawn out to its
 * label's middle and back instead, so that label too sits on its own arrow. The space between the
 * state and the label is the loop's, which ELK kept free.
 */
function loopThroughLabel(edge: LaidOutEdge, state: LaidOutState): LaidOutEdge {
  const route = edge.sections.length === 1 ? edge.sections[0]! : null
  if (!edge.label || !route || route.length < 2) return edge
  const start = route[0]!
  const end = route.at(-1)!
  const cx = edge.label.x + edge.label.width / 2
  const cy = edge.label.y + edge.label.height / 2
  const left = start.x <= state.x + 0.5 && end.x <= state.x + 0.5 && cx < state.x
  const right = start.x >= state.x + state.width - 0.5 && end.x >= state.x + state.width - 0.5 && cx > state.x + state.width
  const top = start.y <= state.y + 0.5 && end.y <= state.y + 0.5 && cy < state.y
  const bottom = start.y >= state.y + state.height - 0.5 && end.y >= state.y + state.height - 0.5 && cy > state.y + state.height
  if (left || right) return { ...edge, sections: [[start, { x: cx, y: start.y }, { x: cx, y: end.y }, end]] }
  if (top || bottom) return { ...edge, sections: [[start, { x: start.x, y: cy }, { x: end.x, y: cy }, end]] }
  return edge
}
