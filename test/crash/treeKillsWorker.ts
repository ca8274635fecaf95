/**
 * Child process of the tree crash tests (treeKills.test.ts). Each run opens a runtime on the data
 * directory (recovering what a killed predecessor left), acts, and may kill itself with SIGKILL at
 * a precise moment, so each test is deterministic.
 *
 * argv: <dir> <scenario> <step>
 *   unborn   setup | spawn-kill | respawn   a host spawn killed between reservation and registry row
 *   rerun    kill-at-spawn | kill-in-tool | finish   spawn_thread re-run after kills before its row
 *   failfast kill-at-failure | finish      a fail-fast wave whose failure lands just before a kill
 * Prints one JSON line on stdout when it finishes.
 */
import type { InspectionEvent } from 'xstate'
import { z } from 'zod'
import type { Message } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, scenario, step] = process.argv.slice(2)
if (!dir || !scenario || !step) throw new Error('usage: treeKillsWorker <dir> <scenario> <step>')

const kill = (): never => {
  process.kill(process.pid, 'SIGKILL')
  throw new Error('unreachable')
}
const usage = { inputTokens: 10, outputTokens: 5, cost: 0.001 }
const spawned = (messages: readonly Message[]): string[] =>
  messages.filter((m): m is Extract<Message, { role: 'tool' }> => m.role === 'tool' && m.toolName === 'spawn_thread').map((m) => JSON.parse(m.content).threadId as string)
const waited = (messages: readonly Message[]): string => [...messages].reverse().find((m) => m.role === 'tool' && m.toolName === 'wait_threads')?.content ?? 'null'

if (scenario === 'unborn') {
  // The lead stays in its model call: a running parent.
  const model = scriptedModel((r) => (r.directiveName === 'lead' ? { faults: [{ fault: 'hang' }], reply: { text: 'never' } } : { text: 'kid done', usage }))
  const rt = await createRuntime({ dir, model, defaultLimits: { turns: null } })
  if (step === 'setup') {
    await rt.spawn({ directive: { name: 'lead', prompt: 'lead' }, limits: { spend: 1 } })
    process.stdout.write('{"setup":true}\n')
  } else {
    const lead = rt.list().find((r) => r.directiveName === 'lead')!
    const spawning = rt.spawn({ directive: { name: 'kid', prompt: 'kid' }, limits: { spend: 0.6 }, parentId: lead.id })
    // spawn() has reserved the kid's budget and written its files; its registry row is not committed.
    if (step === 'spawn-kill') kill()
    let outcome: unknown
    try {
      const kid = await spawning
      outcome = { spawned: kid.id, status: (await kid.done).status }
    } catch (error) {
      outcome = { error: (error as { code?: string }).code, message: (error as Error).message }
    }
    process.stdout.write(`${JSON.stringify(outcome)}\n`)
  }
  await rt.close()
} else if (scenario === 'rerun') {
  // spawn_thread's child is killed as its actor starts (files written, no registry row), twice;
  // then it runs, and is killed in a tool so the next process rebuilds its history.
  const pause = defineTool({
    name: 'pause',
    description: 'pause',
    input: z.object({}),
    idempotent: true,
    execute: () => (step === 'kill-in-tool' ? kill() : { paused: true }),
  })
  const model = scriptedModel((r) => {
    if (r.directiveName === 'lead') {
      if (r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'part0', prompt: 'do part 0' } }], usage }
      if (r.turn === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawned(r.messages) } }], usage }
      return { text: 'lead done', usage }
    }
    if (r.turn === 1) return { toolCalls: [{ name: 'pause', input: {} }], usage }
    // What the model was shown: a recovered thread's history is rebuilt from its transcript.
    return { text: `user messages: ${r.messages.filter((m) => m.role === 'user').length}`, usage }
  })
  const inspect = (event: InspectionEvent): void => {
    if (step === 'kill-at-spawn' && event.type === '@xstate.actor' && (event.actorRef as { id?: string }).id?.startsWith('part0-') === true) kill()
  }
  // The share a child without limits reserves changes after the first run (a configuration edited
  // between runs): the re-run spawn reserves anew, with other limits than the spawn that never returned.
  const config = { children: { budgetShare: step === 'kill-at-spawn' ? 0.5 : 0.25 } }
  const rt = await createRuntime({ dir, model, tools: [pause], inspect, config, defaultLimits: { turns: null, spend: 1 } })
  if (rt.list().length === 0) await rt.spawn({ directive: { name: 'lead', prompt: 'lead' } })
  while (rt.active().length > 0) await Promise.all(rt.active().map((t) => t.done.catch(() => undefined)))
  await rt.close()
  process.stdout.write('{"stopped":true}\n')
} else if (scenario === 'failfast') {
  // part1 fails at once; its siblings would run forever. Remote polls are off the table (10 min):
  // a wait must learn of the failure from this runtime itself.
  const model = scriptedModel((r) => {
    if (r.directiveName === 'lead') {
      if (r.turn === 1) return { toolCalls: ['part0', 'part1', 'part2'].map((name) => ({ name: 'spawn_thread', input: { name, prompt: name } })), usage }
      if (r.turn === 2) {
        return { toolCalls: [{ name: 'wait_threads', input: { threadIds: spawned(r.messages), failFast: true, cancelSiblingsOnFailure: true, timeoutSeconds: 4 } }], usage }
      }
      return { text: waited(r.messages), usage }
    }
    // part1 fails once the lead is waiting (its first turn outlasts the lead's two).
    if (r.directiveName === 'part1') return r.turn === 1 ? { toolCalls: [{ name: 'nap', input: {} }], usage } : { faults: [{ fault: 'http', status: 400 }], reply: { text: 'never' } }
    return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
  })
  const nap = defineTool({ name: 'nap', description: 'nap', input: z.object({}), idempotent: true, execute: () => new Promise((resolve) => setTimeout(() => resolve({ napped: true }), 300)) })
  const rt = await createRuntime({
    dir,
    model,
    tools: [nap],
    config: { waits: { remotePollMs: 600_000 } },
    defaultLimits: { turns: null },
    // Killed the moment part1's failure is recorded, before the registry has its status.
    onLifecycle: (event) => {
      if (step === 'kill-at-failure' && event.type === 'child_thread_failed') kill()
    },
  })
  if (rt.list().length === 0) await rt.spawn({ directive: { name: 'lead', prompt: 'lead' } })
  const lead = rt.list().find((r) => r.directiveName === 'lead')!
  await rt.waitThreads([lead.id], { timeoutMs: 20_000 })
  // Whatever the wait left running (nothing, once it has cancelled the siblings).
  const left = rt.active().map((t) => t.id)
  await Promise.all(left.map((id) => rt.cancel(id, 'test over').catch(() => undefined)))
  await rt.close()
  process.stdout.write(`${JSON.stringify({ left })}\n`)
}
