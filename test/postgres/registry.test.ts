/**
 * The registry on PostgreSQL: the contract suites, then what they cannot see — other processes
 * on the same schema at the same moment (each a process of its own, with its own connection, as
 * runtimes on other hosts), and rows outliving the connection that wrote them. The processes run
 * the compiled stores: `npx tsc -p tsconfig.json` first.
 */
import { execFile } from 'node:child_process'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { eventsChannel } from '../../persistence/postgres/pgEventLog.js'
import { openPgRegistry } from '../../persistence/postgres/pgRegistry.js'
import type { StoredEvent } from '../../persistence/eventLog.js'
import type { RegisterThread } from '../../persistence/types.js'
import { registryContract } from '../contract/registry.contract.js'
import { freshDatabase, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

registryContract('postgres', () => {
  const d = freshDatabase()
  return { registry: openPgRegistry({ db: d.db }), destroy: d.destroy }
})

const root = path.resolve(import.meta.dirname, '../..')
const dist = (file: string) => pathToFileURL(path.join(root, 'dist', file)).href

/** What every process script starts with: a registry on the schema, its input, a start line. */
const PRELUDE = `
import { PgBridge } from '${dist('persistence/postgres/bridge.js')}'
import { openPgRegistry } from '${dist('persistence/postgres/pgRegistry.js')}'
const db = new PgBridge({ url: process.env.URL, schema: process.env.SCHEMA })
const registry = openPgRegistry({ db })
const input = JSON.parse(process.env.INPUT)
// Processes start together: each waits for the same wall-clock moment.
const startAt = (at) => { while (Date.now() < at) {} }
const spin = (ms) => { const until = Date.now() + ms; while (Date.now() < until) {} }
const done = (value) => { process.stdout.write(JSON.stringify(value)); db.close() }
`

/** Runs `script` in a process of its own on the schema; resolves with what it printed (JSON). */
function inProcess<T>(schema: string, script: string, input: unknown): Promise<T> {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      ['--input-type=module', '-e', PRELUDE + script],
      { env: { ...process.env, URL: testDatabaseUrl(), SCHEMA: schema, INPUT: JSON.stringify(input) }, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => (error ? reject(new Error(stderr || String(error))) : resolve(JSON.parse(stdout) as T)),
    ),
  )
}

function thread(id: string, createdAt = 1_000): RegisterThread {
  return { id, directiveName: 'd', directive: { prompt: 'p' }, nonce: `nonce-${id}`, createdAt }
}

/** Blocks the thread for `ms` (the registry is synchronous; so are these tests between awaits). */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms)
}

describe('openPgRegistry', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup()
  })
  const fresh = () => {
    const d = freshDatabase()
    cleanups.push(d.destroy)
    return { ...d, registry: openPgRegistry({ db: d.db }) }
  }

  describe('two processes claiming the same threads at once', () => {
    const CLAIMER = `
      const { ids, rounds, p, at } = input
      const violations = []
      const offers = []
      for (let r = 1; r <= rounds; r++) {
        startAt(at + r * 300)
        // Each thread gets a different token from each process; which one is larger alternates.
        const batch = ids.map((id, i) => ({ id, token: 10 * r + 1 + ((i + r + p) % 2) }))
        const order = p === 0 ? batch : [...batch].reverse()
        if (r % 2 === 0) registry.claim(order)
        else for (const offer of order) registry.claim([offer])
        for (const { id, token } of batch) {
          const now = registry.leaseToken(id)
          if (now === null || now < token) violations.push({ id, token, now })
        }
        offers.push(...batch)
      }
      done({ violations, offers })`

    it('should keep the larger token of every thread, whichever process claims first, in single and batch claims', async () => {
      const { registry, schema } = fresh()
      // Half registered (their claim rows exist), half not yet (the claim makes the row).
      const ids = Array.from({ length: 60 }, (_, i) => `race-${String(i).padStart(3, '0')}`)
      for (const id of ids.slice(0, 30)) registry.register(thread(id))
      const at = Date.now() + 1_500
      const results = await Promise.all([0, 1].map((p) => inProcess<{ violations: unknown[]; offers: Array<{ id: string; token: number }> }>(schema, CLAIMER, { ids, rounds: 8, p, at })))
      // No claim ever lowered a token: each process read at least its own offer back.
      expect(results.flatMap((r) => r.violations)).toEqual([])
      const largest = new Map<string, number>()
      for (const { id, token } of results.flatMap((r) => r.offers)) largest.set(id, Math.max(token, largest.get(id) ?? 0))
      expect(Object.fromEntries(ids.map((id) => [id, registry.leaseToken(id)]))).toEqual(Object.fromEntries(largest))
    })

    it('should let no write of a publisher that read its token land after a takeover claim has returned', async () => {
      const { registry, schema } = fresh()
      const ids = Array.from({ length: 40 }, (_, i) => `fence-${String(i).padStart(3, '0')}`)
      for (const id of ids) registry.register(thread(id))
      const at = Date.now() + 1_500
      // The stale owner (token 1): checks the token, stalls, then writes, until every thread refuses it.
      const publisher = inProcess<{ writes: number }>(
        schema,
        `startAt(input.at)
         const refused = new Set()
         let stamp = 0
         let writes = 0
         while (refused.size < input.ids.length) {
           for (const id of input.ids) {
             if (refused.has(id)) continue
             registry.transaction(() => {
               const token = registry.leaseToken(id)
               if (token !== null && token > 1) return void refused.add(id)
               spin(2)
               registry.updateStatus(id, 'running', 10_000 + ++stamp)
               writes++
             })
           }
         }
         done({ writes })`,
        { ids, at },
      )
      // The successor: claims each thread with token 2, then reads what the thread's row says.
      const successor = inProcess<Record<string, number>>(
        schema,
        `startAt(input.at)
         const seen = {}
         for (const id of input.ids) {
           registry.claim([{ id, token: 2 }])
           seen[id] = registry.get(id).updatedAt
           spin(3)
         }
         done(seen)`,
        { ids, at },
      )
      const [{ writes }, seen] = await Promise.all([publisher, successor])
      expect(writes).toBeGreaterThan(0)
      // What the successor read right after its claim is what stays: nothing of the stale owner came later.
      expect(Object.fromEntries(ids.map((id) => [id, registry.get(id)!.updatedAt]))).toEqual(seen)
    })
  })

  describe('the event log shared by processes', () => {
    const WRITER = `
      const { p, count, at } = input
      startAt(at)
      const event = (i, k) => ({ threadId: 'w' + p, type: 'test.step', at: i, data: { p, i, k } })
      for (let i = 0; i < count; i++) {
        if (i % 3 === 0) registry.events.append([event(i, 0)])
        else
          registry.transaction(() => {
            registry.events.append([event(i, 0)])
            registry.register({ id: 'w' + p + '-' + i, directiveName: 'd', directive: {}, nonce: 'n', createdAt: i })
            registry.events.append([event(i, 1), event(i, 2)])
          })
      }
      // Committed after every event of this writer: a reader that sees it has nothing more to wait for.
      registry.register({ id: 'finished-' + p, directiveName: 'd', directive: {}, nonce: 'n', createdAt: 0 })
      done({ appended: count + 2 * (count - Math.ceil(count / 3)) })`

    it('should give a reader following its cursor every event of two writing processes once, in id order, none skipped', async () => {
      const { registry, schema } = fresh()
      const at = Date.now() + 1_500
      const count = 150
      const writers = [0, 1].map((p) => inProcess<{ appended: number }>(schema, WRITER, { p, count, at }))
      const total = 2 * (count + 2 * (count - Math.ceil(count / 3)))
      // Read while they write, a page at a time from the last id read, as rt.events does on another host.
      const read: StoredEvent[] = []
      for (let finished = false; ; ) {
        const page = registry.events.after(read.at(-1)?.id ?? 0, 7)
        read.push(...page)
        if (page.length > 0) continue
        // One more pass after both writers finished: whatever they appended is committed by then.
        if (finished) break
        finished = registry.get('finished-0') !== null && registry.get('finished-1') !== null
        if (!finished) pause(1)
      }
      expect((await Promise.all(writers)).reduce((sum, w) => sum + w.appended, 0)).toBe(total)
      expect(read).toEqual(registry.events.after(0, total + 1))
      expect(read).toHaveLength(total)
      for (const p of [0, 1]) {
        const own = read.filter((e) => e.data['p'] === p).map((e) => [e.data['i'], e.data['k']])
        expect(own).toEqual([...own].sort((a, b) => (a[0] as number) - (b[0] as number) || (a[1] as number) - (b[1] as number)))
      }
    })

    it('should notify spindle_events_<schema> with the new last id when an append commits, and not for one rolled back', async () => {
      const { registry, db } = fresh()
      const EVENTS_CHANNEL = eventsChannel(db.schema!)
      const heard: string[] = []
      const listener = new PgBridge({ url: db.url, schema: db.schema, onNotify: (channel, payload) => heard.push(`${channel}:${payload}`) })
      cleanups.push(() => listener.close())
      listener.listenSync(EVENTS_CHANNEL)
      expect(() =>
        registry.transaction(() => {
          registry.events.append([{ threadId: 't', type: 'gone', at: 1, data: {} }])
          throw new Error('rolled back')
        }),
      ).toThrow('rolled back')
      registry.transaction(() => registry.events.append([{ threadId: 't', type: 'kept', at: 2, data: {} }, { threadId: 't', type: 'kept', at: 3, data: {} }]))
      for (let i = 0; i < 100 && heard.length === 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
      expect(heard[0]).toBe(`${EVENTS_CHANNEL}:${registry.events.lastId()}`)
    })

    it('should let a transaction read its own events, and keep those of the outer transaction when a nested one rolls back after reading', () => {
      const { registry } = fresh()
      registry.transaction(() => {
        registry.events.append([{ threadId: 't', type: 'outer', at: 1, data: {} }])
        expect(() =>
          registry.transaction(() => {
            registry.events.append([{ threadId: 't', type: 'inner', at: 2, data: {} }])
            expect(registry.events.after(0, 10).map((e) => e.type)).toEqual(['outer', 'inner'])
            throw new Error('inner')
          }),
        ).toThrow('inner')
        registry.events.append([{ threadId: 't', type: 'after', at: 3, data: {} }])
      })
      expect(registry.events.after(0, 10).map((e) => [e.id, e.type])).toEqual([
        [1, 'outer'],
        [2, 'after'],
      ])
    })
  })

  it('should keep threads, tokens, recovery counts and events across closing the connection and opening another', () => {
    const first = { ...freshDatabase(), registry: null as unknown as ReturnType<typeof openPgRegistry> }
    first.registry = openPgRegistry({ db: first.db })
    first.registry.register(thread('keep-aaaaaaaaaaaa'))
    first.registry.updateStatus('keep-aaaaaaaaaaaa', 'suspended', 2_000, 'budget')
    first.registry.setResult('keep-aaaaaaaaaaaa', { result: { answer: 42 } })
    first.registry.claim([{ id: 'keep-aaaaaaaaaaaa', token: 4 }])
    first.registry.setRecoveryCounts([{ id: 'keep-aaaaaaaaaaaa', count: 2, seq: 9 }])
    first.registry.events.append([{ threadId: 'keep-aaaaaaaaaaaa', type: 'thread.suspended', at: 2_000, data: { reason: 'budget' } }])
    const before = { record: first.registry.get('keep-aaaaaaaaaaaa'), events: first.registry.events.after(0, 10) }
    first.registry.close()
    first.db.close()
    const db = new PgBridge({ url: first.url, schema: first.schema })
    cleanups.push(() => {
      db.execSync(`DROP SCHEMA IF EXISTS "${first.schema}" CASCADE`)
      db.close()
    })
    const again = openPgRegistry({ db })
    expect(again.get('keep-aaaaaaaaaaaa')).toEqual(before.record)
    expect(before.record).toMatchObject({ status: 'suspended', suspendReason: 'budget', result: { answer: 42 } })
    expect(again.leaseToken('keep-aaaaaaaaaaaa')).toBe(4)
    expect(again.recoveryCount('keep-aaaaaaaaaaaa')).toEqual({ count: 2, seq: 9 })
    expect(again.events.after(0, 10)).toEqual(before.events)
    expect(again.events.lastId()).toBe(1)
  })

  it('should refuse a time that is not an integer inside a transaction with REGISTRY_FAILED, and commit the rest of it', () => {
    const { registry } = fresh()
    registry.transaction(() => {
      registry.register(thread('a-aaaaaaaaaaaa'))
      expect(() => registry.updateStatus('a-aaaaaaaaaaaa', 'running', 1.5)).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
      expect(() => registry.events.append([{ threadId: 'a-aaaaaaaaaaaa', type: 'x', at: 0.5, data: {} }])).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED' }))
      registry.updateStatus('a-aaaaaaaaaaaa', 'running', 2)
    })
    expect(registry.get('a-aaaaaaaaaaaa')).toMatchObject({ status: 'running', updatedAt: 2 })
    expect(registry.events.lastId()).toBe(0)
  })

  it('should say REGISTRY_FAILED, naming the schema and what to do, on a schema that was never migrated', () => {
    const schema = freshSchema()
    const db = new PgBridge({ url: testDatabaseUrl(), schema })
    cleanups.push(() => {
      db.execSync(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      db.close()
    })
    expect(() => openPgRegistry({ db }).get('a-aaaaaaaaaaaa')).toThrow(
      expect.objectContaining({ code: 'REGISTRY_FAILED', message: expect.stringMatching(new RegExp(`schema ${schema}.*migrat`)), details: expect.objectContaining({ pgCode: '42P01' }) }),
    )
  })
})
