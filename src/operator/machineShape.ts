/**
 * The parts of an XState machine's state nodes that the diagrams read (`spindle viz`, the
 * inspector's statechart): keys, children, initial states and transitions with their guards.
 */
import { and, not, or } from 'xstate'

export interface NodeLike {
  key: string
  id: string
  type: string
  initial?: { target: ReadonlyArray<{ id: string }> }
  states: Record<string, NodeLike>
  transitions: Map<string, ReadonlyArray<TransitionLike>>
  always?: ReadonlyArray<TransitionLike>
}

export interface TransitionLike {
  eventType: string
  target?: ReadonlyArray<{ id: string }>
  guard?: unknown
  actions: ReadonlyArray<unknown>
  reenter?: boolean
}

/** Each transition of a state node with its event (`always` for eventless ones) and target ids. */
export function* transitionsOf(node: NodeLike): Generator<{ event: string; transition: TransitionLike; target: string }> {
  for (const transition of node.always ?? []) for (const target of transition.target ?? []) yield { event: 'always', transition, target: target.id }
  for (const [event, transitions] of node.transitions) {
    for (const transition of transitions) for (const target of transition.target ?? []) yield { event, transition, target: target.id }
  }
}

/** xstate's `and`, `or` and `not` are functions that carry their operands in `guards` and mark which they are by `check`. */
const checkOf = (guard: unknown): unknown => (guard as { check?: unknown }).check
const COMBINATORS = new Map<unknown, 'and' | 'or' | 'not'>([
  [checkOf(and([])), 'and'],
  [checkOf(or([])), 'or'],
  [checkOf(not('_')), 'not'],
])

/** A guard as its parts: a named guard, a `{ type, params }` object, or and/or/not over guards. */
export type GuardTree = { name: string; params?: unknown } | { op: 'and' | 'or' | 'not'; of: GuardTree[] }

/** The structure of a transition's guard, or null; an inline function (the machines have none) is named `inline`. */
export function guardTree(guard: unknown): GuardTree | null {
  if (guard === undefined || guard === null) return null
  if (typeof guard === 'string') return { name: guard }
  const op = COMBINATORS.get(checkOf(guard))
  const operands = (guard as { guards?: unknown[] }).guards
  if (op && Array.isArray(operands)) return { op, of: operands.map((g) => guardTree(g) ?? { name: 'inline' }) }
  const type = (guard as { type?: unknown }).type
  if (typeof type === 'string') {
    const params = (guard as { params?: unknown }).params
    return params === undefined ? { name: type } : { name: type, params }
  }
  return { name: 'inline' }
}

/** A guard written as a condition for a diagram's label: `isCurrentFailure && canRetry`. */
export function guardExpression(tree: GuardTree, nested = false): string {
  if ('name' in tree) return tree.name
  if (tree.op === 'not') return `!${guardExpression(tree.of[0]!, true)}`
  const text = tree.of.map((g) => guardExpression(g, true)).join(tree.op === 'and' ? ' && ' : ' || ')
  return nested && tree.of.length > 1 ? `(${text})` : text
}

/** A guard as XState v5 source: `and(['isCurrentFailure', 'canRetry'])`. */
export function guardSource(tree: GuardTree): string {
  if ('name' in tree) return tree.params === undefined ? JSON.stringify(tree.name) : JSON.stringify({ type: tree.name, params: tree.params })
  if (tree.op === 'not') return `not(${guardSource(tree.of[0]!)})`
  return `${tree.op}([${tree.of.map(guardSource).join(', ')}])`
}
