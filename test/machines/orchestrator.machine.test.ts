/**
 * The orchestrator's supervision decisions, driven through the pure machine: what each crash
 * leads to under each strategy and restart type, and where restart intensity stops it.
 */
import { createActor } from 'xstate'
import { describe, expect, it } from 'vitest'
import { orchestratorMachine } from '../../machines/orchestrator.machine.js'
import type { OrchestratorEmitted, RestartType, SupervisedThread, SupervisionStrategy } from '../../machines/orchestrator.machine.js'

/** A supervisor and a stand-in for the runtime's view of its live threads. */
function supervisor(strategy: SupervisionStrategy = 'one_for_one', intensity = { maxRestarts: 3, withinMs: 5000 }) {
  const actor = createActor(orchestratorMachine, { input: { defaultStrategy: strategy, intensity } })
  const emitted: OrchestratorEmitted[] = []
  actor.on('*', (e) => emitted.push(e as OrchestratorEmitted))
  actor.start()
  const live = new Map<string, SupervisedThread>()
  const strategies = new Map<string, SupervisionStrategy>()
  let seq = 0
  const add = (id: string, restart: RestartType, parentId: string | null = 'p') => live.set(id, { id, group: parentId ?? 'root', restart, seq: ++seq })
  const crash = (id: string, at = 1000) => {
    emitted.length = 0
    const thread = live.get(id)
    const siblings = thread ? [...live.values()].filter((t) => t.group === thread.group && t.id !== id) : []
    const groupStrategy = thread ? strategies.get(thread.group) : undefined
    actor.send({ type: 'THREAD_CRASHED', id, at, error: { code: 'THREAD_CRASHED', message: 'boom' }, thread, siblings, ...(groupStrategy ? { strategy: groupStrategy } : {}) })
    return emitted.filter((e) => e.type !== 'crashed')
  }
  return { actor, add, crash, live, strategies }
}

describe('orchestrator machine', () => {
  it('should restart only the crashed thread under one_for_one', () => {
    const s = supervisor('one_for_one')
    s.add('a', 'permanent')
    s.add('b', 'permanent')
    expect(s.crash('a')).toEqual([{ type: 'restart', ids: ['a'], crashed: 'a', group: 'p', restartsInWindow: 1 }])
  })

  it('should restart permanent siblings, stop temporary ones and leave transient ones under one_for_all', () => {
    const s = supervisor('one_for_all')
    s.add('a', 'transient')
    s.add('perm', 'permanent')
    s.add('trans', 'transient')
    s.add('temp', 'temporary')
    s.add('elsewhere', 'permanent', 'other-parent')
    const decided = s.crash('a')
    expect(decided).toEqual([
      expect.objectContaining({ type: 'stop', ids: ['temp'], crashed: 'a' }),
      expect.objectContaining({ type: 'restart', ids: ['a', 'perm'] }),
    ])
  })

  it('should sweep only the siblings started after the crashed one under rest_for_one', () => {
    const s = supervisor('rest_for_one')
    s.add('first', 'permanent')
    s.add('crashy', 'permanent')
    s.add('later', 'permanent')
    expect(s.crash('crashy')).toEqual([expect.objectContaining({ type: 'restart', ids: ['crashy', 'later'] })])
  })

  it('should count a thread\'s own restarts under one_for_one and give up on it alone, and forget restarts outside the window', () => {
    const s = supervisor('one_for_one', { maxRestarts: 2, withinMs: 5000 })
    s.add('a', 'permanent')
    s.add('b', 'permanent')
    expect(s.crash('a', 1000)[0]!.type).toBe('restart')
    expect(s.crash('a', 2000)[0]!.type).toBe('restart')
    // A sibling's crash is not charged with a's restarts: it is independent of a.
    expect(s.crash('b', 2500)).toEqual([expect.objectContaining({ type: 'restart', ids: ['b'], restartsInWindow: 1 })])
    const gaveUp = s.crash('a', 3000)
    expect(gaveUp).toEqual([expect.objectContaining({ type: 'give_up', ids: ['a'], group: 'p' })])
    expect((gaveUp[0] as { report: string }).report).toContain('2 restart(s) of it within 5000 ms')
    // Ten seconds later the window is empty again.
    expect(s.crash('a', 13_000)[0]!.type).toBe('restart')
  })

  it('should forget the restarts of threads whose window has passed, however many crashed', () => {
    const s = supervisor('one_for_one', { maxRestarts: 3, withinMs: 5000 })
    for (let i = 0; i < 100; i++) {
      s.add(`t${i}`, 'transient')
      s.crash(`t${i}`, i * 1000)
    }
    // Only the crashes of the last five seconds are still counted.
    expect(Object.keys(s.actor.getSnapshot().context.restarts)).toHaveLength(5)
  })

  it('should count the group\'s restarts under one_for_all and give up on the whole group', () => {
    const s = supervisor('one_for_all', { maxRestarts: 2, withinMs: 5000 })
    s.add('a', 'permanent')
    s.add('b', 'permanent')
    expect(s.crash('a', 1000)[0]!.type).toBe('restart')
    expect(s.crash('b', 2000)[0]!.type).toBe('restart')
    const gaveUp = s.crash('a', 3000)
    expect(gaveUp).toEqual([expect.objectContaining({ type: 'give_up', ids: ['a', 'b'], group: 'p' })])
    expect((gaveUp[0] as { report: string }).report).toContain('2 restart(s) of the children of p within 5000 ms')
  })

  it('should give up on the crashed thread and those started after it under rest_for_one', () => {
    const s = supervisor('rest_for_one', { maxRestarts: 1, withinMs: 5000 })
    s.add('first', 'permanent')
    s.add('crashy', 'permanent')
    s.add('later', 'transient')
    expect(s.crash('crashy', 1000)[0]!.type).toBe('restart')
    expect(s.crash('crashy', 2000)).toEqual([expect.objectContaining({ type: 'give_up', ids: ['crashy', 'later'] })])
  })

  it('should not restart a temporary thread, nor one it does not supervise', () => {
    const s = supervisor()
    s.add('t', 'temporary')
    expect(s.crash('t')).toEqual([expect.objectContaining({ type: 'give_up', ids: ['t'] })])
    expect(s.crash('stranger')).toEqual([expect.objectContaining({ type: 'give_up', ids: ['stranger'] })])
  })

  it('should use the strategy a parent set for its own children', () => {
    const s = supervisor('one_for_one')
    s.strategies.set('p', 'one_for_all')
    s.add('x', 'permanent')
    s.add('y', 'permanent')
    expect(s.crash('x')).toEqual([expect.objectContaining({ type: 'restart', ids: ['x', 'y'] })])
    s.live.delete('y')
    expect(s.crash('x')).toEqual([expect.objectContaining({ type: 'restart', ids: ['x'] })])
  })
})
