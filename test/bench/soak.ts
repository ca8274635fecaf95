/**
 * Soak: one runtime runs waves of threads of every kind, the way a host service does for days, and
 * prints after each wave (after a forced GC) what the process holds: heap, RSS, open file
 * descriptors, active handles and the sizes of the runtime's per-thread collections. Anything that
 * grows wave after wave is a leak. Then it opens and closes runtimes on one directory, many times.
 *
 *   npm run soak            (SOAK_WAVES=20 SOAK_THREADS=500 SOAK_REOPEN=60 SOAK_DURABILITY=fsync|process)
 *
 * Not part of `npm test`: it takes minutes and measures, it does not assert.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import v8 from 'node:v8'
import { z } from 'zod'
import { commandTool, createRuntime, defineTool, requestCancel, respondToApproval, scriptedModel } from '../../src/index.js'
import type { ModelAdapter, ModelRequest, Runtime, ScriptedTurn, ThreadHandle } from '../../src/index.js'

const WAVES = Number(process.env.SOAK_WAVES ?? 20)
const THREADS = Number(process.env.SOAK_THREADS ?? 500)
const REOPEN = Number(process.env.SOAK_REOPEN ?? 60)
const DURABILITY = (process.env.SOAK_DURABILITY ?? 'fsync') as 'fsync' | 'process'

const gc = (globalThis as { gc?: () => void }).gc
if (!gc) throw new Error('run with node --expose-gc')

const ALL_KINDS = [
  'completed', 'error', 'cancelled', 'approve', 'deny', 'cont', 'parent', 'budget', 'proc', 'retry', 'cancelfile', 'hooks',
  'contbudget', 'hostparent', 'cascade', 'resume', 'respond', 'crash',
] as const
type Kind = (typeof ALL_KINDS)[number]
/** SOAK_KINDS=cont,parent runs only those kinds (to find which one leaks). */
const KINDS: readonly Kind[] = process.env.SOAK_KINDS ? (process.env.SOAK_KINDS.split(',') as Kind[]) : ALL_KINDS
/** SOAK_HEAPSNAP=DIR writes a heap snapshot there after the second and the last wave. */
const HEAPSNAP = process.env.SOAK_HEAPSNAP

const echo = defineTool({ name: 'echo', description: 'echo', input: z.object({ n: z.number() }), idempotent: true, execute: ({ n }) => ({ n }) })
const proc = commandTool({ name: 'proc', description: 'runs true', input: z.object({}), idempotent: true, command: () => ({ command: 'true', args: [] }) })

// A tool whose input check throws: a crash, restarted by the supervisor until it gives up.
const crashy = defineTool({
  name: 'crashy',
  description: 'crashes',
  input: z.object({}).refine(() => {
    throw new Error('soak crash in the input check')
  }),
  execute: () => ({}),
})
/** Model calls per thread of the kinds whose script depends on more than the turn and attempt. */
const calls = new Map<string, number>()

function lastToolResult(request: ModelRequest): Record<string, unknown> {
  const last = [...request.messages].reverse().find((m) => m.role === 'tool')
  return last && last.role === 'tool' ? (JSON.parse(last.content) as Record<string, unknown>) : {}
}

function turnFor(request: ModelRequest): ScriptedTurn {
  const kind = request.directiveName as Kind | 'kid' | 'hangkid'
  const t = request.turn
  switch (kind) {
    case 'completed':
    case 'budget':
    case 'hooks':
      return t === 1 ? { toolCalls: [{ name: 'echo', input: { n: 1 } }] } : { text: 'done' }
    case 'error':
      return { faults: [{ fault: 'http', status: 400, message: 'bad request' }], reply: { text: 'never' } }
    case 'cancelled':
    case 'cancelfile':
      return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
    case 'approve':
    case 'deny':
      return t === 1 ? { toolCalls: [{ name: 'echo', input: { n: 1 } }] } : { text: 'approved and done' }
    case 'cont':
      // The first thread of the chain fills the context window; its successor finishes.
      if (request.messages[0]?.content === 'soak-cont' && t === 1) {
        return { toolCalls: [{ name: 'echo', input: { n: 1 } }], usage: { inputTokens: 950, outputTokens: 10, cost: 0.001 } }
      }
      return { text: 'continued and done', usage: { inputTokens: 10, outputTokens: 10, cost: 0.001 } }
    case 'parent':
      if (t === 1) return { toolCalls: [{ name: 'spawn_thread', input: { name: 'kid', prompt: 'kid' } }] }
      if (t === 2) return { toolCalls: [{ name: 'wait_threads', input: { threadIds: [lastToolResult(request).threadId] } }] }
      return { text: 'children done' }
    case 'kid':
      return { text: 'kid done' }
    case 'contbudget':
      if (request.messages[0]?.content === 'soak-cont' && t === 1) {
        return { toolCalls: [{ name: 'echo', input: { n: 1 } }], usage: { inputTokens: 950, outputTokens: 10, cost: 0.001 } }
      }
      return t < 4 ? { toolCalls: [{ name: 'echo', input: { n: t } }], usage: { inputTokens: 10, outputTokens: 10, cost: 0.001 } } : { text: 'done', usage: { inputTokens: 10, outputTokens: 10, cost: 0.001 } }
    case 'hostparent':
    case 'cascade':
    case 'hangkid':
      return { faults: [{ fault: 'hang' }], reply: { text: 'never' } }
    case 'resume': {
      // Every call fails until the retries are spent (the thread suspends), then the resumed one succeeds.
      const n = (calls.get(request.threadId) ?? 0) + 1
      calls.set(request.threadId, n)
      if (n <= 4) return { faults: [{ fault: 'http', status: 503 }, { fault: 'http', status: 503 }, { fault: 'http', status: 503 }, { fault: 'http', status: 503 }], reply: { text: 'x' } }
      calls.delete(request.threadId)
      return { text: 'resumed and done' }
    }
    case 'respond':
      return t === 1 ? { toolCalls: [{ name: 'echo', input: { n: 1 } }] } : { text: 'approved by file' }
    case 'crash':
      return t === 1 ? { toolCalls: [{ name: 'crashy', input: {} }] } : { text: 'x' }
    case 'proc':
      return t === 1 ? { toolCalls: [{ name: 'proc', input: {} }] } : { text: 'ran' }
    case 'retry':
      return t === 1 ? { faults: [{ fault: 'http', status: 429, headers: { 'retry-after-ms': '1' } }], reply: { text: 'after 429' } } : { text: 'x' }
  }
  return { text: 'unknown kind' }
}

const model: ModelAdapter = { ...scriptedModel(turnFor), contextWindow: 1000 }

/**
 * Timers alive now, unref'd ones included (process.getActiveResourcesInfo() lists only the ones
 * that keep the process alive, and the runtime unrefs its own).
 */
const liveTimers = new Set<unknown>()
{
  const { setTimeout: st, setInterval: si, clearTimeout: ct, clearInterval: ci } = globalThis
  globalThis.setTimeout = ((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const handle: unknown = st((...a: unknown[]) => {
      liveTimers.delete(handle)
      fn(...a)
    }, ms, ...args)
    liveTimers.add(handle)
    return handle
  }) as typeof setTimeout
  globalThis.setInterval = ((fn: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const handle = si(fn, ms, ...args)
    liveTimers.add(handle)
    return handle
  }) as typeof setInterval
  globalThis.clearTimeout = ((h: Parameters<typeof clearTimeout>[0]) => {
    liveTimers.delete(h)
    ct(h)
  }) as typeof clearTimeout
  globalThis.clearInterval = ((h: Parameters<typeof clearInterval>[0]) => {
    liveTimers.delete(h)
    ci(h)
  }) as typeof clearInterval
}

function fdCount(): number {
  return fs.readdirSync('/proc/self/fd').length
}

function resources(): string {
  const counts = new Map<string, number>()
  for (const r of process.getActiveResourcesInfo()) counts.set(r, (counts.get(r) ?? 0) + 1)
  return [...counts].map(([k, v]) => `${k}:${v}`).join(' ')
}

/** The runtime's own collections, by reflection (they are private): only what is reachable. */
function collections(rt: Runtime): Record<string, number> {
  const inner = rt as unknown as Record<string, unknown>
  const out: Record<string, number> = {}
  const size = (v: unknown): number | null => (v instanceof Map || v instanceof Set ? v.size : Array.isArray(v) ? v.length : null)
  for (const [key, value] of Object.entries(inner)) {
    const s = size(value)
    if (s !== null && key !== 'lastRecovery') out[key] = s
  }
  const commit = inner.commit as Record<string, unknown> | undefined
  if (commit) {
    for (const [key, value] of Object.entries(commit)) {
      const s = size(value)
      if (s !== null) out[`commit.${key}`] = s
    }
  }
  const listeners = inner.lifecycleListeners as Map<string, Set<unknown>> | undefined
  if (listeners) out['lifecycleListeners(total)'] = [...listeners.values()].reduce((n, s) => n + s.size, 0)
  return out
}

function mb(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1)
}

async function settle(rt: Runtime): Promise<void> {
  // Let the checkpoint rounds after the last thread run (stopped threads keep their transcript
  // open until one has fdatasynced it), then collect.
  const commit = (rt as unknown as { commit: { whenDurable(): Promise<void> } }).commit
  for (let i = 0; i < 3; i++) {
    await commit.whenDurable()
    await new Promise((r) => setTimeout(r, 600))
  }
  gc!()
  await new Promise((r) => setImmediate(r))
  gc!()
}

function line(label: string, rt: Runtime | null, extra = ''): void {
  const m = process.memoryUsage()
  const cols = rt ? Object.entries(collections(rt)).filter(([, n]) => n > 0).map(([k, n]) => `${k}=${n}`).join(' ') : ''
  console.log(`${label}  heap ${mb(m.heapUsed)} MB  rss ${mb(m.rss)} MB  fds ${fdCount()}  timers ${liveTimers.size}  [${resources()}]  ${extra}${cols ? `  {${cols}}` : ''}`)
}

async function runWave(rt: Runtime, dir: string, wave: number): Promise<Record<string, number>> {
  const tally: Record<string, number> = {}
  const handles: Array<{ kind: Kind; h: ThreadHandle }> = []
  for (let i = 0; i < THREADS; i++) {
    const kind = KINDS[i % KINDS.length]!
    const h = await rt.spawn({
      directive: {
        name: kind,
        prompt: kind === 'cont' ? 'soak-cont' : `soak ${wave}/${i}`,
        ...(kind === 'parent' ? { tools: ['spawn_thread', 'wait_threads'] } : {}),
        ...(kind === 'contbudget' ? { prompt: 'soak-cont' } : {}),
      },
      ...(kind === 'approve' || kind === 'deny' || kind === 'respond' ? { limits: { turns: 1 } } : {}),
      ...(kind === 'budget' || kind === 'parent' || kind === 'contbudget' || kind === 'hostparent' ? { limits: { spend: 1, tokens: 1_000_000 } } : {}),
      ...(kind === 'hooks' ? { hooks: [{ id: `h${i}`, event: 'after_step' as const, when: 'thread.turn > 100', action: 'fail' as const }] } : {}),
    })
    handles.push({ kind, h })
  }
  const outcomes = handles.map(async ({ kind, h }) => {
    const hangs = kind === 'hostparent' || kind === 'cascade'
    let outcome = hangs ? { status: 'running' } : await h.done.catch((e: unknown) => ({ status: `rejected:${(e as Error).message}` }) as { status: string })
    if (hangs) {
      // Children spawned by host code, waited for (hostparent) or cancelled with their parent (cascade).
      const kid = await rt.spawn({ directive: { name: kind === 'cascade' ? 'hangkid' : 'kid', prompt: 'kid' }, parentId: h.id })
      if (kind === 'hostparent') await rt.waitThreads([kid.id])
      await rt.cancel(h.id, 'host parent done')
      await kid.done
      outcome = await h.done
    } else if (outcome.status === 'suspended' && kind === 'resume') {
      outcome = await (await rt.resume(h.id)).done
    } else if (outcome.status === 'suspended' && kind === 'respond') {
      // The request file is written once the suspension is durable: answer it when it is there.
      for (let tries = 0; ; tries++) {
        try {
          respondToApproval(dir, h.id, { approved: true, limits: { turns: 5 } })
          break
        } catch (error) {
          if (tries > 200) throw error
          await new Promise((r) => setTimeout(r, 10))
        }
      }
      await rt.checkRequests()
      outcome = await rt.get(h.id).done
    } else if (outcome.status === 'suspended' && kind === 'approve') {
      outcome = await (await rt.approve(h.id, { limits: { turns: 5 } })).done
    } else if (outcome.status === 'suspended' && kind === 'deny') {
      outcome = await rt.deny(h.id, 'soak says no')
    }
    const key = `${kind}:${outcome.status}`
    tally[key] = (tally[key] ?? 0) + 1
  })
  // Hanging threads: cancel them in the two ways a host does.
  await new Promise((r) => setTimeout(r, 50))
  for (const { kind, h } of handles) {
    if (kind === 'cancelled') await rt.cancel(h.id, 'soak cancel')
    if (kind === 'cancelfile') requestCancel(dir, h.id, { reason: 'soak cancel file' })
  }
  await rt.checkRequests()
  await Promise.all(outcomes)
  return tally
}

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-soak-'))
try {
  console.log(`soak: ${WAVES} waves × ${THREADS} threads (${KINDS.join(', ')}), durability ${DURABILITY}; node ${process.version}`)
  gc()
  line('start          ', null)
  const dir = path.join(root, 'waves')
  const rt = await createRuntime({ dir, model, tools: [echo, proc], durability: DURABILITY, userConfig: null, retry: { baseMs: 1, capMs: 5 } })
  await settle(rt)
  line('opened         ', rt)
  for (let wave = 1; wave <= WAVES; wave++) {
    const started = performance.now()
    const tally = await runWave(rt, dir, wave)
    const ms = performance.now() - started
    await settle(rt)
    const kinds = Object.entries(tally).sort().map(([k, n]) => `${k}=${n}`).join(' ')
    line(`wave ${String(wave).padStart(3)} ${(ms / 1000).toFixed(1).padStart(5)}s`, rt, wave === 1 ? `(${kinds})` : '')
    if (HEAPSNAP && (wave === 2 || wave === WAVES)) v8.writeHeapSnapshot(path.join(HEAPSNAP, `wave-${wave}.heapsnapshot`))
  }
  await rt.close()
  gc()
  line('closed         ', null)

  // A host that closes its runtime and opens another, again and again, in one process.
  const again = path.join(root, 'reopen')
  const fdsBefore = fdCount()
  for (let i = 1; i <= REOPEN; i++) {
    const r = await createRuntime({ dir: again, model, tools: [echo, proc], durability: DURABILITY, userConfig: null, retry: { baseMs: 1, capMs: 5 } })
    const hs = await Promise.all(Array.from({ length: 10 }, (_, j) => r.spawn({ directive: { name: ALL_KINDS[j % 2]!, prompt: 'again' } })))
    await Promise.all(hs.map((h) => h.done))
    // One left suspended across the close, to be opened by the next runtime.
    const s = await r.spawn({ directive: { name: 'approve', prompt: 'again' }, limits: { turns: 1, spend: 1 } })
    await s.done
    await (r as unknown as { commit: { whenDurable(): Promise<void> } }).commit.whenDurable()
    // What the runtime holds just before it closes, with every thread of it stopped.
    const held = Object.entries(collections(r)).filter(([k, n]) => n > 0 && k !== 'toolNames').map(([k, n]) => `${k}=${n}`).join(' ')
    await r.close()
    if (i % Math.max(1, Math.floor(REOPEN / 6)) === 0 || i === REOPEN) {
      await new Promise((res) => setTimeout(res, 100))
      gc()
      line(`reopen ${String(i).padStart(4)}    `, null, `fds Δ ${fdCount() - fdsBefore}${held ? `  before close {${held}}` : ''}`)
    }
  }
} finally {
  fs.rmSync(root, { recursive: true, force: true })
}
