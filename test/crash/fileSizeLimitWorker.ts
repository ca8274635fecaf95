/**
 * Child process of fileSizeLimit.test.ts. `limited`: started under `ulimit -f` (RLIMIT_FSIZE), so
 * every write that would grow a file past the limit fails with EFBIG, as on a full disk; spawns the
 * threads, runs until they have all stopped or some have been parked for a while, then closes the
 * runtime. `free`: started without the limit, recovers what the limited run left and runs every
 * thread to its end. Prints one JSON line.
 *
 *   fileSizeLimitWorker.js <limited|free> <dir> <chargeLog> <threads> <turns>
 */
import fs from 'node:fs'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { LifecycleEvent, ThreadOutcome } from '../../src/index.js'

const [mode, dir, chargeLog, threadsArg, turnsArg] = process.argv.slice(2)
const threads = Number(threadsArg)
const turns = Number(turnsArg)
const pad = 'x'.repeat(3000)
const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n, pad }) })
const charge = defineTool({
  name: 'charge',
  description: 'not idempotent',
  input: z.object({ n: z.number() }),
  execute: ({ n }, { idempotencyKey }) => {
    fs.appendFileSync(chargeLog!, `${idempotencyKey}\n`)
    return { charged: n }
  },
})
const model = scriptedModel((r) => (r.turn < turns ? { toolCalls: [{ name: r.turn % 3 === 2 ? 'charge' : 'echo', input: { n: r.turn } }] } : { text: 'done' }))

const events: LifecycleEvent[] = []
let storageFailedAt: number | null = null
const problems: string[] = []
const rt = await createRuntime({
  dir: dir!,
  model,
  tools: [echo, charge],
  durability: 'fsync',
  userConfig: null,
  onLifecycle: (e) => events.push(e),
  onProblem: (p) => {
    problems.push(p.code)
    if (p.code === 'STORAGE_FAILED') storageFailedAt ??= Date.now()
  },
})
const outcomes: Array<ThreadOutcome | { status: 'rejected'; code: string }> = []
let spawnFailures = 0
let handles = rt.active()
if (mode === 'limited') {
  handles = []
  for (let i = 0; i < threads; i++) {
    try {
      handles.push(await rt.spawn({ directive: { name: `fsize${i}`, prompt: 'go' } }))
    } catch {
      spawnFailures++
    }
  }
}
const all = Promise.all(handles.map((h) => h.done.then((o) => void outcomes.push(o), (e: { code?: string }) => void outcomes.push({ status: 'rejected', code: String(e.code) }))))
if (mode === 'limited') {
  // Until every thread stopped, or two seconds after writes began to fail: threads parked, or
  // finished ones whose last checkpoint waits for the disk (their `done` waits with it).
  let timer: NodeJS.Timeout | undefined
  await Promise.race([
    all,
    new Promise<void>((resolve) => {
      timer = setInterval(() => {
        if (storageFailedAt !== null && Date.now() - storageFailedAt > 2000) resolve()
      }, 50)
    }),
  ])
  clearInterval(timer)
} else {
  await all
}
const count = (values: string[]): Record<string, number> => values.reduce<Record<string, number>>((a, v) => ((a[v] = (a[v] ?? 0) + 1), a), {})
const statuses = count(rt.list().map((r) => r.status))
let closeError: string | null = null
try {
  await rt.close()
} catch (error) {
  closeError = String((error as { code?: string }).code)
}
await new Promise((resolve) => setTimeout(resolve, 50))
process.stdout.write(
  JSON.stringify({
    // The registry's word on every thread (read before close): threads recovery carried on may
    // have ended before the first look at `rt.active()`.
    statuses,
    spawned: handles.length,
    spawnFailures,
    parked: events.filter((e) => e.type === 'thread_parked').length,
    outcomes: count(outcomes.map((o) => ('code' in o ? `${o.status}:${o.code}` : o.status))),
    problems: count(problems),
    closeError,
  }) + '\n',
)
