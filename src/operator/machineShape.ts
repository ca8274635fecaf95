/**
 * The parts of an XState machine's state nodes that the diagrams read (`spindle viz`, the
 * inspector's statechart): keys, children, initial states and transitions with their guards.
 */

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
