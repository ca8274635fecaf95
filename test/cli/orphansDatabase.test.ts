/**
 * `spindle orphans` on a database: threads left by runtimes that are gone, found and decided by
 * hand through the database, while a live worker's thread is left alone.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel } from '../../src/index.js'
import type { Runtime } from '../../src/index.js'
import { openPostgresStores } from '../../src/runtime/openPostgresStores.js'
import { spindleAsync as spindle } from '../helpers/cliProcess.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

const schema = freshSchema()
const url = testDatabaseUrl()
const flags = ['--db', url, '--schema', schema]
const runtimes: Runtime[] = []
afterAll(async () => {
  for (const rt of runtimes.splice(0)) await rt.close()
  await dropSchema(url, schema)
})

async function until(check: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 20))
  }
}

describe('spindle orphans on a database', () => {
  it('should list threads no live worker holds, free an expired lease, end one by hand, and refuse a live worker\'s thread', async () => {
    // Setup: three threads left running by a runtime that closed (their leases went with it), one
    // of them then held by a process on another host whose lease has expired; and a live worker
    // running a thread of its own.
    const hang = () => scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }])
    const left = await createRuntime({ database: { url, schema }, model: hang(), userConfig: null, shutdownSignals: [] })
    const [a, b, c] = await Promise.all(['left-a', 'left-b', 'left-c'].map((name) => left.spawn({ directive: { name, prompt: 'wait' } })))
    await until(() => [a, b, c].every((t) => left.get(t!.id).status === 'running'))
    await left.close()
    const stores = openPostgresStores({ url, schema }, { problem: () => {}, folderInvalid: () => {} })
    try {
      expect(stores.leases.acquire(b!.id, { id: 'gone-host:7:x', pid: 7, host: 'gone-host' }, 1_000, Date.now() - 60_000).acquired).toBe(true)
    } finally {
      stores.close()
    }
    // It takes no orphan over while the test decides them by hand.
    const live = await createRuntime({ database: { url, schema }, model: hang(), userConfig: null, shutdownSignals: [], recover: false, config: { orphans: { autoTakeover: false } } })
    runtimes.push(live)
    const held = await live.spawn({ directive: { name: 'held', prompt: 'wait' } })
    await until(() => live.get(held.id).status === 'running')

    const scan = await spindle(['orphans', ...flags, '--json'])
    expect(scan.code, scan.stderr).toBe(0)
    const found = JSON.parse(scan.stdout) as Array<{ id: string; why: string; owner: string | null }>
    expect(found.map((f) => [f.id, f.why, f.owner]).sort()).toEqual(
      [
        [a!.id, 'no_lease', null],
        [b!.id, 'expired', 'gone-host:7:x'],
        [c!.id, 'no_lease', null],
      ].sort(),
    )
    const text = await spindle(['orphans', ...flags])
    expect(text.stdout).toContain('3 orphans. The workers on this database take them over by themselves')
    expect(text.stdout).toContain(`--schema ${schema}`)

    // resume: the expired lease goes, so the next worker's heartbeat takes the thread.
    const resumed = await spindle(['orphans', 'recover', b!.id, '--action', 'resume', ...flags, '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(JSON.parse(resumed.stdout)).toMatchObject({ threadId: b!.id, action: 'resume', leaseFreed: true })

    // mark_cancelled: ended here without running, recorded in its transcript.
    const marked = await spindle(['orphans', 'recover', c!.id, '--action', 'mark_cancelled', '--reason', 'not needed', ...flags, '--json'])
    expect(marked.code, marked.stderr).toBe(0)
    expect(JSON.parse(marked.stdout)).toMatchObject({ threadId: c!.id, status: 'cancelled' })
    const shown = await spindle(['show', c!.id, ...flags, '--json'])
    expect(JSON.parse(shown.stdout).record.status).toBe('cancelled')

    // The live worker's thread is no orphan.
    const refused = await spindle(['orphans', 'recover', held.id, '--action', 'mark_error', ...flags])
    expect(refused.code).toBe(6)
    expect(refused.stderr).toContain('[THREAD_NOT_ACTIVE]')

    const after = await spindle(['orphans', 'auto', ...flags, '--json'])
    const auto = JSON.parse(after.stdout) as { orphans: string[]; leasesFreed: string[] }
    expect([auto.orphans.sort(), auto.leasesFreed]).toEqual([[a!.id, b!.id].sort(), []])
  }, 120_000)
})
