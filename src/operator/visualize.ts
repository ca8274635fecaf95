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
import { transitionsOf } from './machineShape.js'
import { statechartSvg } from './statechartSvg.js'

function mermaidId(id: string): string {
  return id.replace(/[^a-zA-Z0-9_]/g, '_')
}

function guardText(guard: unknown): string {
  if (!guard) return ''
  if (typeof guard === 'string') return guard
  // and([...]) / or([...]) are functions carrying their operands in `guards`.
  const operands = (guard as { guards?: unknown[] }).guards
  if (Array.isArray(operands)) return operands.map(guardText).join(' && ')
  const type = (guard as { type?: unknown }).type
  return typeof type === 'string' ? type : 'guard'
}

function actionText(action: unknown): string {
  if (typeof action === 'string') return action
  if (typeof action === 'object' && action !== null && 'type' in action) return String((action as { type: unknown }).type)
  return 'action'
}

function label(t: TransitionLike, event: string): string {
  const guard = guardText(t.guard)
  const actions = t.actions.map(actionText).filter((a) => a !== 'action')
  return [event, guard ? `[${guard}]` : '', actions.length ? `/ ${actions.join(', ')}` : ''].filter(Boolean).join(' ')
}

function renderNode(node: NodeLike, indent: string, lines: string[]): void {
  const children = Object.values(node.states)
  if (node.initial && children.length > 0) lines.push(`${indent}[*] --> ${mermaidId(node.initial.target[0]!.id)}`)
  for (const child of children) {
    const id = mermaidId(child.id)
    if (Object.keys(child.states).length > 0) {
      lines.push(`${indent}state ${child.key} as ${id} {`)
      renderNode(child, `${indent}  `, lines)
      lines.push(`${indent}}`)
    } else {
      // The machine invokes no actors: a state whose description names an effect is where the runtime runs it.
      const effect = /^Effect (\w+):/.exec((child as { description?: string }).description ?? '')?.[1]
      lines.push(`${indent}state "${child.key}${effect ? ` (runs ${effect})` : ''}" as ${id}`)
    }
    if (child.type === 'final') lines.push(`${indent}${id} --> [*]`)
  }
  for (const child of children) {
    const from = mermaidId(child.id)
    for (const { event, transition, target } of transitionsOf(child)) lines.push(`${indent}${from} --> ${mermaidId(target)}: ${label(transition, event)}`)
  }
}

/** A Mermaid `stateDiagram-v2` of a machine. */
export function toMermaid(machine: AnyStateMachine): string {
  const root = machine.root as unknown as NodeLike
  const lines = [`%% Generated from machines/ by \`spindle viz\`; do not edit.`, 'stateDiagram-v2']
  renderNode(root, '  ', lines)
  return `${lines.join('\n')}\n`
}

/**
 * The machine as source Stately Studio imports ("Import from code"): its config with every
 * implementation by name. Functions (context, inputs, output) are left out: Studio draws the
 * states, transitions, guards and actions, and shows each state's description (which names the
 * effect the runtime runs there), which is what they are for.
 */
export function toStatelySource(machine: AnyStateMachine): string {
  const config = JSON.stringify(
    machine.config,
    (key, value: unknown) => {
      if (key === 'context' || key === 'output' || key === 'schemas' || key === 'input') return undefined
      if (typeof value === 'function') return key === 'guard' ? guardText(value) : undefined
      return value
    },
    2,
  )
  return [
    `// Generated from machines/ by \`spindle viz\`; do not edit. Paste into Stately Studio (Import from code).`,
    `import { createMachine } from 'xstate'`,
    '',
    `export const machine = createMachine(${config})`,
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
