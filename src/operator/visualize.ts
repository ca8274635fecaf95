/**
 * Diagrams generated from the machines (Mermaid, Stately Studio source, SVG), so `visualizations/`
 * never drifts from the code. Eventless transitions, guards and actions are drawn too: they carry the decisions.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { AnyStateMachine } from 'xstate'
import { orchestratorMachine } from '../../machines/orchestrator.machine.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { NodeLike, TransitionLike } from './machineShape.js'
import { guardExpression, guardSource, guardTree, transitionsOf } from './machineShape.js'
import { statechartSvg } from './statechartSvg.js'

/** The single word Mermaid names a state by. */
export function mermaidId(id: string): string {
  return id.replace(/[^a-zA-Z0-9_]/g, '_')
}

function actionText(action: unknown): string {
  if (typeof action === 'string') return action
  if (typeof action === 'object' && action !== null && 'type' in action) return String((action as { type: unknown }).type)
  return 'action'
}

function label(t: TransitionLike, event: string): string {
  const guard = guardTree(t.guard)
  const actions = t.actions.map(actionText).filter((a) => a !== 'action')
  return [event, guard ? `[${guardExpression(guard)}]` : '', actions.length ? `/ ${actions.join(', ')}` : ''].filter(Boolean).join(' ')
}

/**
 * Declares `node`'s children, nested as the machine nests them. Mermaid names a composite state by
 * a single word (`state thread_running {`), so its title is declared first (`state "running" as
 * thread_running`), as every leaf's is.
 */
function declareStates(node: NodeLike, indent: string, lines: string[]): void {
  const children = Object.values(node.states)
  if (node.initial && children.length > 0) lines.push(`${indent}[*] --> ${mermaidId(node.initial.target[0]!.id)}`)
  for (const child of children) {
    const id = mermaidId(child.id)
    // The machine invokes no actors: a state whose description names an effect is where the runtime runs it.
    const effect = /^Effect (\w+):/.exec((child as { description?: string }).description ?? '')?.[1]
    lines.push(`${indent}state "${child.key}${effect ? ` (runs ${effect})` : ''}" as ${id}`)
    if (Object.keys(child.states).length > 0) {
      lines.push(`${indent}state ${id} {`)
      declareStates(child, `${indent}  `, lines)
      lines.push(`${indent}}`)
    }
    if (child.type === 'final') lines.push(`${indent}${id} --> [*]`)
  }
}

function drawTransitions(node: NodeLike, lines: string[]): void {
  for (const child of Object.values(node.states)) {
    const from = mermaidId(child.id)
    for (const { event, transition, target } of transitionsOf(child)) lines.push(`  ${from} --> ${mermaidId(target)}: ${label(transition, event)}`)
    drawTransitions(child, lines)
  }
}

/**
 * A Mermaid `stateDiagram-v2` of a machine. Every state is declared before any transition, and the
 * transitions are written at the top level: Mermaid creates a state where it is first named, so a
 * transition written inside a composite's block to a state outside it would draw that state inside.
 */
export function toMermaid(machine: AnyStateMachine): string {
  const root = machine.root as unknown as NodeLike
  const lines = [`%% Generated from machines/ by \`spindle viz\`; do not edit.`, 'stateDiagram-v2']
  declareStates(root, '  ', lines)
  drawTransitions(root, lines)
  return `${lines.join('\n')}\n`
}

/**
 * The machine as source Stately Studio imports ("Import from code"): XState v5's
 * `setup({ guards, actions }).createMachine(config)`, with `and`/`or`/`not` guards as calls.
 * Guards and actions are named in `setup` with empty bodies (the real ones, in machines/, read the
 * context the runtime builds); functions in the config (context, input, output) are left out.
 * Studio draws the states, transitions, guards and actions, and shows each state's description
 * (which names the effect the runtime runs there), which is what this file is for.
 */
export function toStatelySource(machine: AnyStateMachine): string {
  const guardCalls: string[] = []
  const used = new Set<string>()
  const config = JSON.stringify(
    machine.config,
    (key, value: unknown) => {
      if (key === 'context' || key === 'output' || key === 'schemas' || key === 'input') return undefined
      if (key === 'guard') {
        const tree = guardTree(value)
        if (!tree || 'name' in tree) return value
        const source = guardSource(tree)
        for (const op of source.matchAll(/\b(and|or|not)\(/g)) used.add(op[1]!)
        guardCalls.push(source)
        // A placeholder JSON keeps as a string, swapped for the call below.
        return `\u0000guard${guardCalls.length - 1}\u0000`
      }
      if (typeof value === 'function') return undefined
      return value
    },
    2,
  ).replace(/"\\u0000guard(\d+)\\u0000"/g, (_, i: string) => guardCalls[Number(i)]!)
  const implementations = machine.implementations as { guards: Record<string, unknown>; actions: Record<string, unknown> }
  const key = (name: string): string => (/^[A-Za-z_$][\w$]*$/.test(name) ? name : JSON.stringify(name))
  const named = (names: string[], body: string): string[] => names.map((name) => `    ${key(name)}: ${body},`)
  return [
    `// Generated from machines/ by \`spindle viz\`; do not edit. Paste into Stately Studio (Import from code).`,
    `// Guards and actions are named here; what they do is in machines/${machine.id}.machine.ts.`,
    `import { ${[...used, 'setup'].sort().join(', ')} } from 'xstate'`,
    '',
    'export const machine = setup({',
    '  guards: {',
    ...named(Object.keys(implementations.guards), '() => false'),
    '  },',
    '  actions: {',
    ...named(Object.keys(implementations.actions), '() => {}'),
    '  },',
    `}).createMachine(${config})`,
    '',
  ].join('\n')
}

/** What `visualizations/` holds, by file name: each machine as Mermaid and as Stately Studio source. */
export function visualizations(): Record<string, string> {
  return {
    'thread.machine.mmd': toMermaid(threadMachine),
    'thread.machine.stately.js': toStatelySource(threadMachine),
    'orchestrator.machine.mmd': toMermaid(orchestratorMachine),
    'orchestrator.machine.stately.js': toStatelySource(orchestratorMachine),
  }
}

/** Each machine drawn as an SVG statechart (laid out by ELK, so it takes a moment). */
export async function svgVisualizations(): Promise<Record<string, string>> {
  return {
    'thread.machine.svg': await statechartSvg(threadMachine),
    'orchestrator.machine.svg': await statechartSvg(orchestratorMachine),
  }
}

/** Writes the diagrams, or with `check` only lists the files that are missing or out of date. */
export async function writeVisualizations(dir: string, options: { check?: boolean } = {}): Promise<string[]> {
  const stale: string[] = []
  if (!options.check) fs.mkdirSync(dir, { recursive: true })
  for (const [name, text] of Object.entries({ ...visualizations(), ...(await svgVisualizations()) })) {
    const file = path.join(dir, name)
    const current = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : null
    if (current === text) continue
    stale.push(file)
    if (!options.check) fs.writeFileSync(file, text)
  }
  return stale
}
