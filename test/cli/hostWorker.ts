/**
 * A host program for the CLI decision tests: sets threads up in the states the operator commands
 * act on, or opens the directory again (honouring request files) and runs what was decided.
 *
 * budget: a parent under a $1 spend budget with two children, one whose model fails twice (503)
 * before it answers; every reply costs what it says. Prints the parent's id once all three ended.
 *
 * argv: <dir> limit|error|tree|hang|budget|run, or <dir> approve <id> <turns>: `rt.approve` with that turns
 * limit, printing the error it throws as JSON ({ code, message }) or {} when it throws none.
 *
 * hang: spawns a thread that takes two turns and then waits for a model call that never answers;
 * prints its id and waits to be killed.
 */
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'

const [dir, mode, approveId, approveTurns] = process.argv.slice(2)
if (!dir || !mode) throw new Error('usage: hostWorker <dir> limit|error|tree|hang|run')
const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })
const model = scriptedModel((r) => {
  if (mode === 'budget') {
    const unavailable = { fault: 'http' as const, status: 503, message: 'overloaded' }
    if (r.directiveName === 'retried') return { faults: [unavailable, unavailable], reply: { text: 'ok', usage: { inputTokens: 50, outputTokens: 5, cost: 0.03 } } }
    return { text: 'done', usage: { inputTokens: 100, outputTokens: 10, cost: 0.05 } }
  }
  if (mode === 'hang') return r.turn < 3 ? { toolCalls: [{ name: 'noop', input: {} }] } : { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
  if (mode === 'error' && r.directiveName === 'flaky' && r.attempt <= 4 && r.turn === 1 && !r.messages.some((m) => m.role === 'assistant')) {
    return { faults: [{ fault: 'http', status: 503 }, { fault: 'http', status: 503 }, { fault: 'http', status: 503 }, { fault: 'http', status: 503 }], reply: { text: 'recovered' } }
  }
  if (r.directiveName === 'parent' && r.turn === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'k' } }] }
  return r.turn < 4 ? { text: `turn ${r.turn}`, toolCalls: [{ name: 'noop', input: {} }] } : { text: `${r.directiveName} done` }
})
const rt = await createRuntime({ dir, model, tools: [noop], retry: { baseMs: 1, capMs: 2, maxRetries: 3 } })
if (mode === 'limit') {
  const t = await rt.spawn({ directive: { name: 'capped', prompt: 'p' }, limits: { turns: 2 } })
  await t.done
  // The approval request is written once the suspension is durable.
  await new Promise((r) => setTimeout(r, 200))
  process.stdout.write(`${t.id}\n`)
} else if (mode === 'error') {
  const t = await rt.spawn({ directive: { name: 'flaky', prompt: 'p' } })
  await t.done
  process.stdout.write(`${t.id}\n`)
} else if (mode === 'tree') {
  const t = await rt.spawn({ directive: { name: 'parent', prompt: 'p' } })
  await t.done
  while (rt.active().length > 0) await Promise.all(rt.active().map((a) => a.done.catch(() => null)))
  process.stdout.write(`${t.id}\n`)
} else if (mode === 'budget') {
  const lead = await rt.spawn({ id: 'lead', directive: { name: 'lead', prompt: 'plan' }, limits: { spend: 1 } })
  const first = await rt.spawn({ id: 'first', directive: { name: 'retried', prompt: 'a' }, parentId: lead.id, limits: { spend: 0.3 } })
  const second = await rt.spawn({ id: 'second', directive: { name: 'second', prompt: 'b' }, parentId: lead.id, limits: { spend: 0.2 } })
  await Promise.all([lead.done, first.done, second.done])
  process.stdout.write(`${lead.id}\n`)
} else if (mode === 'approve') {
  try {
    await rt.approve(approveId!, { limits: { turns: Number(approveTurns) } })
    process.stdout.write('{}\n')
  } catch (error) {
    process.stdout.write(`${JSON.stringify({ code: (error as { code?: string }).code, message: (error as Error).message })}\n`)
  }
} else if (mode === 'hang') {
  const t = await rt.spawn({ directive: { name: 'stuck', prompt: 'p' } })
  process.stdout.write(`${t.id}\n`)
  // Until the test kills it (SIGKILL): a crash, for the next host to recover from.
  await new Promise(() => setInterval(() => {}, 60_000))
} else {
  while (rt.active().length > 0) await Promise.all(rt.active().map((a) => a.done.catch(() => null)))
  process.stdout.write(`${JSON.stringify(rt.list().map((r) => ({ id: r.id, status: r.status, result: r.result, error: r.error })))}\n`)
}
await rt.close()
