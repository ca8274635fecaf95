/**
 * The XState actor a live thread hosts: its types, and how one is created from the machine the
 * runtime runs (under the thread's id, with the host's inspection). Apart from liveThread.ts, the
 * host, which only relays to it.
 */
import { createActor } from 'xstate'
import type { Actor, AnyStateMachine, InspectionEvent, SnapshotFrom } from 'xstate'
import type { threadMachine } from '../../machines/thread.machine.js'

export type ThreadActor = Actor<typeof threadMachine>
export type ThreadSnapshot = SnapshotFrom<typeof threadMachine>

/** A thread's actor, from its input (a new thread) or a snapshot (a restored one), under the thread's id. */
export function createActorFrom(machine: AnyStateMachine, options: { input: unknown } | { snapshot: unknown }, id: string, inspect: ((event: InspectionEvent) => void) | undefined) {
  // The thread id as the actor's id and system id: what the Stately inspector shows.
  const common = { id, systemId: id, ...(inspect ? { inspect } : {}) }
  if ('snapshot' in options) return createActor(machine, { ...common, snapshot: options.snapshot as never })
  return createActor(machine, { ...common, input: options.input })
}
