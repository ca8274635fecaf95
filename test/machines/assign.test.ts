/**
 * machines/assign.ts replaces only the resolve step of XState's assign action (to keep contexts
 * fast objects). Whatever XState version is installed, a machine using it must reach exactly the
 * snapshots the same machine reaches with XState's own assign: this test fails on an upgrade that
 * changes how assign actions are resolved.
 */
import { assign as xstateAssign, createActor, setup } from 'xstate'
import { describe, expect, it } from 'vitest'
import { assign } from '../../machines/assign.js'

type Ctx = { [field: `f${number}`]: number; log: string[]; total: number }
type Ev = { type: 'ADD'; n: number } | { type: 'NOTE'; text: string } | { type: 'RESET' }

function machineWith(assignAction: typeof xstateAssign) {
  const initial = Object.fromEntries(Array.from({ length: 24 }, (_, i) => [`f${i}`, i])) as unknown as Ctx
  return setup({
    types: { context: {} as Ctx, events: {} as Ev },
    actions: {
      add: assignAction(({ context, event }) => ({ total: context.total + (event as { n: number }).n, f3: (context.f3 ?? 0) + 1 })),
      note: assignAction({ log: ({ context, event }) => [...context.log, (event as { text: string }).text], f7: 70 }),
      reset: assignAction(({ context }, params: { to: number }) => ({ total: params.to, log: context.log.slice(0, 1) })),
    },
  }).createMachine({
    id: 'm',
    context: { ...initial, log: [], total: 0 },
    initial: 'idle',
    states: {
      idle: { on: { ADD: { target: 'busy', actions: 'add' }, NOTE: { actions: 'note' } } },
      busy: { on: { ADD: { actions: 'add' }, NOTE: { actions: 'note' }, RESET: { target: 'idle', actions: { type: 'reset', params: { to: -1 } } } } },
    },
  })
}

describe("the thread machine's assign", () => {
  it("should reach the same snapshots as XState's own assign, step by step and after a JSON restore", () => {
    const events: Ev[] = [{ type: 'NOTE', text: 'a' }, { type: 'ADD', n: 2 }, { type: 'ADD', n: 5 }, { type: 'NOTE', text: 'b' }, { type: 'RESET' }, { type: 'ADD', n: 1 }]
    const ours = createActor(machineWith(assign)).start()
    const theirs = createActor(machineWith(xstateAssign)).start()
    for (const event of events) {
      ours.send(event)
      theirs.send(event)
      expect(ours.getSnapshot().value).toEqual(theirs.getSnapshot().value)
      expect(ours.getSnapshot().context).toEqual(theirs.getSnapshot().context)
      expect(ours.getSnapshot().matches(theirs.getSnapshot().value as 'idle')).toBe(true)
      expect(JSON.parse(JSON.stringify(ours.getPersistedSnapshot()))).toEqual(JSON.parse(JSON.stringify(theirs.getPersistedSnapshot())))
    }
    const restored = createActor(machineWith(assign), { snapshot: JSON.parse(JSON.stringify(ours.getPersistedSnapshot())) }).start()
    restored.send({ type: 'ADD', n: 10 })
    theirs.send({ type: 'ADD', n: 10 })
    expect(restored.getSnapshot().context).toEqual(theirs.getSnapshot().context)
    // The point of it: the next context is an ordinary object with every field, not a copy XState made.
    expect(Object.keys(ours.getSnapshot().context)).toHaveLength(26)
  })
})
