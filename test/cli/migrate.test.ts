/**
 * Issue 25, item 5: `spindle migrate` moves every thread of a data directory into a PostgreSQL
 * schema and back, verifying every chain. Setup: a real runtime leaves a directory with threads in
 * every status (completed, error, running when it closed, suspended for a tool approval, a parent
 * and two children under budgets, a continuation); the CLI (a real process) copies it to a fresh
 * schema of the test server. What must hold: every thread, entry, checkpoint, budget account,
 * approval request and event arrives unchanged; a runtime on the database carries the running
 * thread on and approves the waiting one; the database copied back into a new directory passes
 * `spindle doctor` and a runtime there carries on. Refused, with nothing written: a source with a
 * damaged transcript, a source a live runtime holds, a target with other threads. Lines outside a
 * chain (a fenced-off writer's, a torn last one) are left out, the checkpoint still pointing at its
 * entry; a cancel left while no runtime ran reaches the database's runtime.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { ThreadHandle } from '../../src/index.js'
import { verifyReplay } from '../../src/operator/inspectThread.js'
import { cancelThread } from '../../src/operator/operatorActions.js'
import { openPostgresStores } from '../../src/runtime/openPostgresStores.js'
import { openStores } from '../../src/runtime/openStores.js'
import type { Stores } from '../../src/runtime/openStores.js'
import { migrateBackend, type MigrateSummary } from '../../src/operator/migrateBackend.js'
import { schemaHoldsSpindle } from '../../src/operator/databaseStores.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'
import { storedThreads } from '../helpers/pgThreads.js'
import { until } from '../helpers/threads.js'

function spindle(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function migrate(...args: string[]): { code: number | null; summary: MigrateSummary | null; stderr: string } {
  const run = spindle('migrate', ...args, '--json')
  return { code: run.code, summary: run.code === 0 ? (JSON.parse(run.stdout) as MigrateSummary) : null, stderr: run.stderr }
}

const schemas: string[] = []
afterAll(async () => {
  for (const schema of schemas.splice(0)) await dropSchema(testDatabaseUrl(), schema)
})

function schema(): string {
  const name = freshSchema()
  schemas.push(name)
  return name
}

const quiet = () => {}
const ports = { problem: quiet, folderInvalid: quiet }

/** Reads a store bundle and closes it. */
function withStores<T>(open: () => Stores, read: (stores: Stores) => T): T {
  const stores = open()
  try {
    return read(stores)
  } finally {
    stores.close()
  }
}

const onDatabase = (name: string) => () => openPostgresStores({ url: testDatabaseUrl(), schema: name }, ports)
const onDir = (dir: string) => () => openStores({ dir, durability: 'process' }, ports)

/** Every thread's row, transcript position and checkpoint, as a runtime would read them back. */
function threadsOf(stores: Stores) {
  return stores.registry.list().map((record) => {
    const entries = stores.transcripts.read(record.id).entries
    return { record, last: entries.at(-1)?.hash, entries: entries.length, checkpoint: stores.checkpoints.load(record.id), approvals: stores.inbox.approvals(record.id) }
  })
}

const tooLong = { faults: [{ fault: 'http' as const, status: 400, code: 'context_length_exceeded', message: "This model's maximum context length is 8192 tokens" }], reply: {} }
const hang = { faults: [{ fault: 'hang' as const }], reply: { text: '' } }

/** What every runtime of these tests runs: the deploy tool (needs approval) counts its runs. */
function setup(options: { hangOn: ReadonlySet<string> }) {
  const deployed: string[] = []
  const deploy = defineTool({
    name: 'deploy',
    description: 'Deploy to an environment',
    input: z.object({ env: z.string() }),
    needsApproval: true,
    execute: (input) => (deployed.push(input.env), `deployed to ${input.env}`),
  })
  const note = defineTool({ name: 'note', description: 'n', input: z.object({}), idempotent: true, execute: () => 'ok' })
  const model = scriptedModel((r) => {
    if (options.hangOn.has(r.directiveName)) return hang
    const usage = { inputTokens: 100, outputTokens: 10, cost: 0.05 }
    switch (r.directiveName) {
      case 'broken':
        return { faults: [{ fault: 'http', status: 401, message: 'bad key' }], reply: { text: 'never' } }
      case 'ship':
      case 'ship-later':
        return r.turn === 1 ? { toolCalls: [{ name: 'deploy', input: { env: r.directiveName } }] } : { text: 'shipped' }
      case 'long':
        if (r.messages[0]!.content.includes('Continued from thread')) return { text: 'carried over' }
        return r.turn === 1 ? { text: 'first', toolCalls: [{ name: 'note', input: {} }] } : tooLong
      default:
        return { text: `${r.directiveName} done`, usage }
    }
  })
  return { deployed, options: { model, tools: [deploy, note], userConfig: null, shutdownSignals: [] as never[] } }
}

async function waitFor(check: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** Waits until the thread waits at its tool call and its approval request is written. */
async function requestStored(dir: string, thread: ThreadHandle): Promise<void> {
  await until(thread, (v) => v.suspendReason === 'tool_approval' && v.pendingCall !== null)
  const folder = path.join(dir, 'threads', thread.id, 'approvals')
  await waitFor(() => fs.existsSync(folder) && fs.readdirSync(folder).some((name) => name.endsWith('.request.json')))
}

/** A directory a runtime left with threads in every status; returns their ids by name. */
async function directoryInEveryStatus(dir: string): Promise<Record<string, string>> {
  const { options } = setup({ hangOn: new Set(['left']) })
  const rt = await createRuntime({ dir, ...options })
  const ids: Record<string, string> = {}
  const done = await rt.spawn({ directive: { name: 'done', prompt: 'p' } })
  const broken = await rt.spawn({ directive: { name: 'broken', prompt: 'p' } })
  const ship = await rt.spawn({ directive: { name: 'ship', prompt: 'p' } })
  const later = await rt.spawn({ directive: { name: 'ship-later', prompt: 'p' } })
  const lead = await rt.spawn({ directive: { name: 'lead', prompt: 'plan' }, limits: { spend: 1 } })
  const first = await rt.spawn({ directive: { name: 'first', prompt: 'a' }, parentId: lead.id, limits: { spend: 0.3 } })
  const second = await rt.spawn({ directive: { name: 'second', prompt: 'b' }, parentId: lead.id, limits: { spend: 0.2 } })
  const long = await rt.spawn({ directive: { name: 'long', prompt: 'p' } })
  const left = await rt.spawn({ directive: { name: 'left', prompt: 'p' } })
  await Promise.all([done.done, broken.done, lead.done, first.done, second.done, long.done])
  await requestStored(dir, ship)
  await requestStored(dir, later)
  await until(left, (v) => v.status === 'running')
  const successor = rt.chain(long.id)[1]!
  await rt.get(successor.id).done
  Object.assign(ids, { done: done.id, broken: broken.id, ship: ship.id, later: later.id, lead: lead.id, first: first.id, second: second.id, long: long.id, successor: successor.id, left: left.id })
  await rt.close()
  // A second runtime takes the running thread on (its lease token 2, claimed in the registry) and closes too.
  const again = await createRuntime({ dir, ...options })
  expect(again.lastRecovery.resumed).toEqual([left.id])
  await until(again.get(left.id), (v) => v.status === 'running')
  await again.close()
  return ids
}

describe('spindle migrate, from a data directory into a database and back', () => {
  const dir = tempDir('spindle-migrate')
  const database = schema()
  let ids: Record<string, string>
  let copied: ReturnType<typeof migrate>

  beforeAll(async () => {
    ids = await directoryInEveryStatus(dir)
    copied = migrate('--from', dir, '--to', testDatabaseUrl(), '--schema', database)
  })

  it('should leave the directory with threads in every status (the setup)', () => {
    const statuses = withStores(onDir(dir), (stores) => Object.fromEntries(Object.entries(ids).map(([name, id]) => [name, stores.registry.get(id)?.status])))
    expect(statuses).toEqual({
      done: 'completed',
      broken: 'error',
      ship: 'suspended',
      later: 'suspended',
      lead: 'completed',
      first: 'completed',
      second: 'completed',
      long: 'continued',
      successor: 'completed',
      left: 'running',
    })
  })

  it('should copy every thread, entry, checkpoint, budget account, approval request and event unchanged, and say how much', () => {
    expect(copied.code, copied.stderr).toBe(0)
    const before = withStores(onDir(dir), (stores) => ({ threads: threadsOf(stores), accounts: stores.ledger.accounts(), events: stores.registry.events.after(0, 1000), lastId: stores.registry.events.lastId() }))
    const after = withStores(onDatabase(database), (stores) => ({ threads: threadsOf(stores), accounts: stores.ledger.accounts(), events: stores.registry.events.after(0, 1000), lastId: stores.registry.events.lastId() }))
    expect(after).toEqual(before)
    expect(before.accounts.map((a) => a.threadId).sort()).toEqual([ids.lead, ids.first, ids.second].sort())
    expect(before.threads.find((t) => t.record.id === ids.ship)!.approvals).toHaveLength(1)
    expect(copied.summary).toMatchObject({
      outcome: 'copied',
      threads: 10,
      entries: before.threads.reduce((n, t) => n + t.entries, 0),
      checkpoints: 10,
      events: before.events.length,
      accounts: 3,
      approvals: 2,
      to: expect.stringContaining(`#${database}`),
    })
    const claimed = withStores(onDir(dir), (stores) => stores.registry.leaseToken(ids.left!))
    expect(claimed).toBeGreaterThanOrEqual(2)
    expect(withStores(onDatabase(database), (stores) => stores.registry.leaseToken(ids.left!))).toBe(claimed)
    expect(copied.summary!.bytes).toBe(Object.values(ids).reduce((n, id) => n + fs.statSync(path.join(dir, 'threads', id, 'transcript.jsonl')).size, 0))
    for (const thread of storedThreads(testDatabaseUrl(), database)) expect(thread.replays, thread.record.id).toBe(true)
  })

  it('should say it is done, and write nothing, when run again onto the same copy', () => {
    const again = migrate('--from', dir, '--to', testDatabaseUrl(), '--schema', database)
    expect(again.code, again.stderr).toBe(0)
    expect(again.summary).toMatchObject({ outcome: 'done already', threads: 10 })
  })

  it('should let a runtime on the database carry the running thread on and approve the waiting one, each tool run once', async () => {
    const { deployed, options } = setup({ hangOn: new Set(['pg-born']) })
    const rt = await createRuntime({ database: { url: testDatabaseUrl(), schema: database }, ...options })
    try {
      expect(rt.lastRecovery.resumed).toEqual([ids.left])
      expect(await rt.get(ids.left!).done).toMatchObject({ status: 'completed', result: 'left done' })
      const approved = await rt.approve(ids.ship!, { by: 'ops' })
      expect(await approved.done).toMatchObject({ status: 'completed', result: 'shipped' })
      expect(deployed).toEqual(['ship'])
      // Left for the way back: a thread born on the database, running when its runtime closes.
      const born = await rt.spawn({ directive: { name: 'pg-born', prompt: 'p' } })
      await until(born, (v) => v.status === 'running')
      ids.born = born.id
    } finally {
      await rt.close()
    }
    for (const thread of storedThreads(testDatabaseUrl(), database)) expect(thread.replays, thread.record.id).toBe(true)
    // Fencing went on past the directory's tokens: the database's runtime wrote with a larger one.
    const before = withStores(onDir(dir), (stores) => stores.registry.leaseToken(ids.left!))!
    expect(withStores(onDatabase(database), (stores) => stores.registry.leaseToken(ids.left!))).toBeGreaterThan(before)
  })

  it('should copy the database back into a new directory where doctor finds no damage and a runtime carries on', async () => {
    const back = tempDir('spindle-migrate-back')
    const returned = migrate('--from', testDatabaseUrl(), '--schema', database, '--to', back)
    expect(returned.code, returned.stderr).toBe(0)
    expect(returned.summary).toMatchObject({ outcome: 'copied', threads: 11 })
    const doctor = spindle('doctor', '--dir', back, '--json')
    const report = JSON.parse(doctor.stdout) as { threads: number; findings: Array<{ kind: string }> }
    expect(report.findings.filter((f) => f.kind === 'damage')).toEqual([])
    expect(doctor.code).toBe(0)
    expect(report.threads).toBe(11)

    const { deployed, options } = setup({ hangOn: new Set() })
    const rt = await createRuntime({ dir: back, ...options })
    try {
      expect(rt.lastRecovery.resumed).toEqual([ids.born])
      expect(await rt.get(ids.born!).done).toMatchObject({ status: 'completed', result: 'pg-born done' })
      const approved = await rt.approve(ids.later!)
      expect(await approved.done).toMatchObject({ status: 'completed', result: 'shipped' })
      expect(deployed).toEqual(['ship-later'])
      for (const id of Object.values(ids)) expect(verifyReplay(back, id).matches, id).toBe(true)
    } finally {
      await rt.close()
    }
  })
})

/** A directory with two completed threads; returns their ids. */
async function twoCompleted(dir: string): Promise<string[]> {
  const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'done' }]), userConfig: null, shutdownSignals: [] })
  const threads = await Promise.all(['a', 'b'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))
  await Promise.all(threads.map((t) => t.done))
  await rt.close()
  return threads.map((t) => t.id)
}

describe('spindle migrate refusals', () => {
  it('should refuse a source with a damaged transcript, naming the thread and the seq, and create nothing on the target', async () => {
    const dir = tempDir('spindle-migrate-damaged')
    const [, damaged] = await twoCompleted(dir)
    const file = path.join(dir, 'threads', damaged!, 'transcript.jsonl')
    const lines = fs.readFileSync(file, 'utf8').split('\n')
    lines[1] = lines[1]!.replace('"data":{', '"data":{"edited":true,')
    fs.writeFileSync(file, lines.join('\n'))
    const target = schema()
    const refused = migrate('--from', dir, '--to', testDatabaseUrl(), '--schema', target)
    expect(refused.code).toBe(5)
    expect(refused.stderr).toContain('"code":"TRANSCRIPT_CHAIN_BROKEN"')
    expect(refused.stderr).toContain(`Thread ${damaged} cannot be copied, so nothing was written`)
    expect(refused.stderr).toContain('damaged at seq 2')
    expect(schemaHoldsSpindle({ url: testDatabaseUrl(), schema: target })).toBe(false)
  })

  it('should refuse a source a live runtime holds a lease on, naming the thread and its owner, and create nothing', async () => {
    const dir = tempDir('spindle-migrate-leased')
    const rt = await createRuntime({ dir, model: scriptedModel([hang]), userConfig: null, shutdownSignals: [] })
    try {
      const running = await rt.spawn({ directive: { name: 'busy', prompt: 'p' } })
      await until(running, (v) => v.status === 'running')
      const target = schema()
      const refused = migrate('--from', dir, '--to', testDatabaseUrl(), '--schema', target)
      expect(refused.code).toBe(9)
      expect(refused.stderr).toContain('"code":"THREAD_LEASED"')
      expect(refused.stderr).toMatch(new RegExp(`${running.id} \\([^)]*, pid ${process.pid} on `))
      expect(schemaHoldsSpindle({ url: testDatabaseUrl(), schema: target })).toBe(false)
    } finally {
      await rt.close()
    }
  })

  it('should refuse a target that holds other threads, leaving them as they were', async () => {
    const first = tempDir('spindle-migrate-first')
    const second = tempDir('spindle-migrate-second')
    const kept = await twoCompleted(first)
    await twoCompleted(second)
    const target = schema()
    expect(migrate('--from', first, '--to', testDatabaseUrl(), '--schema', target).code).toBe(0)
    const refused = migrate('--from', second, '--to', testDatabaseUrl(), '--schema', target)
    expect(refused.code).toBe(6)
    expect(refused.stderr).toContain('"code":"MIGRATION_TARGET_NOT_EMPTY"')
    expect(withStores(onDatabase(target), (stores) => stores.registry.list().map((r) => r.id).sort())).toEqual([...kept].sort())
  })

  it('should check and count with --dry-run, and create nothing', async () => {
    const dir = tempDir('spindle-migrate-dry')
    await twoCompleted(dir)
    const target = schema()
    const checked = migrate('--from', dir, '--to', testDatabaseUrl(), '--schema', target, '--dry-run')
    expect(checked.code, checked.stderr).toBe(0)
    expect(checked.summary).toMatchObject({ outcome: 'checked', threads: 2, checkpoints: 2 })
    expect(checked.summary!.entries).toBeGreaterThan(0)
    const text = spindle('migrate', '--from', dir, '--to', testDatabaseUrl(), '--schema', target, '--dry-run')
    expect(text.stdout).toContain(`Checked 2 threads (${checked.summary!.entries} transcript entries`)
    expect(text.stdout).toContain('Dry run: nothing was written')
    expect(schemaHoldsSpindle({ url: testDatabaseUrl(), schema: target })).toBe(false)
  })
})

describe('spindle migrate, transcripts holding lines outside their chain', () => {
  it('should leave out a fenced-off writer\'s line between the entries and point the checkpoint at the same entry of the copy', async () => {
    const dir = tempDir('spindle-migrate-stale')
    const [id] = await twoCompleted(dir)
    const file = path.join(dir, 'threads', id!, 'transcript.jsonl')
    const original = fs.readFileSync(file, 'utf8')
    const lines = original.split('\n')
    // What a process that lost the thread while stopped leaves: its own line for seq 2, between the owner's.
    lines.splice(2, 0, lines[1]!.replace('"ts":"', '"ts":"1').replace(/"hash":"[0-9a-f]+"/, `"hash":"${'0'.repeat(64)}"`))
    fs.writeFileSync(file, lines.join('\n'))
    const state = path.join(dir, 'threads', id!, 'state.json')
    const envelope = JSON.parse(fs.readFileSync(state, 'utf8'))
    envelope.transcript.bytes = fs.statSync(file).size
    fs.writeFileSync(state, JSON.stringify(envelope))
    expect(verifyReplay(dir, id!).matches).toBe(true)

    const target = schema()
    const summary = await migrateBackend({ from: dir, to: testDatabaseUrl(), schema: target })
    expect(summary.outcome).toBe('copied')
    expect(summary.notes).toEqual([expect.stringContaining(`${id}: 1 line(s) of a fenced-off writer`)])
    const copied = withStores(onDatabase(target), (stores) => ({ bytes: stores.folders.transcriptBytes(id!), checkpoint: stores.checkpoints.load(id!) }))
    expect(copied.bytes).toBe(Buffer.byteLength(original))
    expect(copied.checkpoint!.transcript).toEqual({ ...envelope.transcript, bytes: Buffer.byteLength(original) })

    const back = tempDir('spindle-migrate-stale-back')
    await migrateBackend({ from: testDatabaseUrl(), schema: target, to: back })
    expect(fs.readFileSync(path.join(back, 'threads', id!, 'transcript.jsonl'), 'utf8')).toBe(original)
    expect(verifyReplay(back, id!).matches).toBe(true)
  })

  it('should leave out a torn last line and say so', async () => {
    const dir = tempDir('spindle-migrate-torn')
    const [id] = await twoCompleted(dir)
    const file = path.join(dir, 'threads', id!, 'transcript.jsonl')
    const whole = fs.readFileSync(file, 'utf8')
    fs.appendFileSync(file, '{"seq":99,"ts":"2025-')
    const target = schema()
    const summary = await migrateBackend({ from: dir, to: testDatabaseUrl(), schema: target })
    expect(summary.notes).toEqual([expect.stringContaining(`${id}: a torn last line (21 bytes`)])
    expect(withStores(onDatabase(target), (stores) => stores.folders.transcriptBytes(id!))).toBe(Buffer.byteLength(whole))
  })
})

describe('spindle migrate, requests no runtime has acted on yet', () => {
  it('should carry a cancel left for a thread while no runtime ran to the database, where the next runtime acts on it', async () => {
    const dir = tempDir('spindle-migrate-cancel')
    const first = await createRuntime({ dir, model: scriptedModel([hang]), userConfig: null, shutdownSignals: [] })
    const thread = await first.spawn({ directive: { name: 'unwanted', prompt: 'p' } })
    await until(thread, (v) => v.status === 'running')
    await first.close()
    cancelThread(dir, thread.id, 'no longer needed', 'ops')

    const target = schema()
    const summary = await migrateBackend({ from: dir, to: testDatabaseUrl(), schema: target })
    expect(summary).toMatchObject({ outcome: 'copied', requests: 1 })
    const rt = await createRuntime({ database: { url: testDatabaseUrl(), schema: target }, model: scriptedModel([hang]), userConfig: null, shutdownSignals: [] })
    try {
      expect(await rt.get(thread.id).done).toMatchObject({ status: 'cancelled', error: { message: expect.stringContaining('no longer needed') } })
    } finally {
      await rt.close()
    }
  })
})
