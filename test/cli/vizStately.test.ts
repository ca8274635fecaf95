/**
 * The Stately Studio source in visualizations/ is XState v5 code: xstate builds it into a machine
 * with the same states, transitions, guards (`and([...])` as the helper, not a string) and actions
 * as the machine it was generated from, and given that machine's guards and actions it takes the
 * same step at every step of every path.
 */
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { describe, expect, it } from 'vitest'
import type { AnyStateMachine } from 'xstate'
import { createActor } from 'xstate'
import { getShortestPaths } from 'xstate/graph'
import { orchestratorMachine } from '../../machines/orchestrator.machine.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { NodeLike } from '../../src/operator/machineShape.js'
import { guardTree, transitionsOf } from '../../src/operator/machineShape.js'
import { toStatelySource } from '../../src/operator/visualize.js'
import { tempDir } from '../helpers/dirs.js'
import { input, traversal } from '../helpers/threadMachineWalk.js'

const projectModules = path.resolve(import.meta.dirname, '../../node_modules')

/** Evaluates generated source as the module it is; its `import … from 'xstate'` finds this project's xstate. */
async function build(name: string, source: string): Promise<AnyStateMachine> {
  const dir = tempDir('spindle-stately')
  fs.symlinkSync(projectModules, path.join(dir, 'node_modules'))
  const file = path.join(dir, `${name}.machine.stately.mjs`)
  fs.writeFileSync(file, source)
  return ((await import(pathToFileURL(file).href)) as { machine: AnyStateMachine }).machine
}

/** What a machine is made of, read from the state nodes xstate built (not from any text). */
function structure(node: NodeLike): unknown {
  return {
    key: node.key,
    type: node.type,
    initial: node.initial?.target.map((t) => t.id) ?? null,
    transitions: [...transitionsOf(node)].map(({ event, transition, target }) => ({
      event,
      target,
      guard: guardTree(transition.guard),
      actions: transition.actions.map((a) => (typeof a === 'string' ? a : ((a as { type?: string }).type ?? 'inline'))),
      reenter: transition.reenter ?? false,
    })),
    states: Object.values(node.states).map(structure),
  }
}

const implementations = (machine: AnyStateMachine) => machine.implementations as { guards: Record<string, unknown>; actions: Record<string, unknown> }

describe('Stately Studio source (visualizations/*.stately.js)', () => {
  for (const [name, machine] of [['thread', threadMachine], ['orchestrator', orchestratorMachine]] as const) {
    it(`should build, with xstate, the ${name} machine's states, transitions, guards and actions`, async () => {
      const built = await build(name, toStatelySource(machine))
      expect(structure(built.root as unknown as NodeLike)).toEqual(structure(machine.root as unknown as NodeLike))
      // setup() names every guard and action the machine implements, so Studio lists them all.
      expect(Object.keys(implementations(built).guards)).toEqual(Object.keys(implementations(machine).guards))
      expect(Object.keys(implementations(built).actions)).toEqual(Object.keys(implementations(machine).actions))
    })
  }

  it('should write combined guards as xstate guard helpers that xstate evaluates', async () => {
    const built = await build('thread', toStatelySource(threadMachine))
    const callingModel = (built.root as unknown as NodeLike).states.running!.states.callingModel!
    const toTools = [...transitionsOf(callingModel)].find((t) => t.target === 'thread.running.runningTools')!
    expect(guardTree(toTools.transition.guard)).toEqual({ op: 'and', of: [{ name: 'isCurrentReply' }, { name: 'replyHasToolCalls' }] })
  })

  it('should take the same step as the thread machine at every step of every shortest path, given its guards and actions', async () => {
    const built = (await build('thread', toStatelySource(threadMachine))).provide({
      guards: implementations(threadMachine).guards,
      actions: implementations(threadMachine).actions,
    } as never)
    const paths = getShortestPaths(threadMachine, traversal as never)
    const reached = new Set<string>()
    for (const { steps } of paths) {
      const original = createActor(threadMachine, { input }).start()
      // The generated source has no context function (Studio does not need one): it starts from the original's snapshot.
      const copy = createActor(built, { snapshot: original.getPersistedSnapshot() } as never).start()
      for (const { event } of steps as ReadonlyArray<{ event: { type: string } }>) {
        if (event.type === 'xstate.init') continue
        original.send(event as never)
        copy.send(event as never)
        expect(copy.getSnapshot().value, `${event.type} from a path of ${steps.length} steps`).toEqual(original.getSnapshot().value)
        expect(copy.getSnapshot().context).toEqual(original.getSnapshot().context)
        reached.add(JSON.stringify(copy.getSnapshot().value))
      }
      original.stop()
      copy.stop()
    }
    // The transitions guarded by and([...]) lead into these: the walk went through them.
    expect(reached).toContain('{"running":"runningTools"}')
    expect(reached).toContain('{"running":"waitingToRetry"}')
    expect(reached).toContain('{"running":"limitReached"}')
  })
})
