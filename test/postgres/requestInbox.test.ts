import { execFile } from 'node:child_process'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { requestsChannel, createPgRequestInbox } from '../../persistence/postgres/pgRequestInbox.js'
import type { PgRequestInboxOptions } from '../../persistence/postgres/pgRequestInbox.js'
import { requestInboxContract } from '../contract/requestInbox.contract.js'
import { freshDatabase } from '../helpers/postgres.js'

const fail = (error: unknown): never => {
  throw error
}

requestInboxContract('postgres', () => {
  const d = freshDatabase()
  // Requests are left from another connection, as the CLI or another worker leaves them.
  const writer = new PgBridge({ url: d.url, schema: d.schema })
  const outside = createPgRequestInbox({ db: writer, onProblem: fail })
  return {
    inbox: createPgRequestInbox({ db: d.db, onProblem: fail }),
    addThread: () => {},
    leave: (threadId, kind, body, requestId) => void outside.leaveRequest(threadId, kind, body, requestId),
    destroy: () => {
      writer.close()
      d.destroy()
    },
  }
})

const A = 'a-aaaaaaaaaaaa'
const B = 'b-aaaaaaaaaaaa'
const TTL = 60_000

const root = path.resolve(import.meta.dirname, '../..')
const dist = (file: string): string => pathToFileURL(path.join(root, 'dist', file)).href

/**
 * Runs `body` in a new node process (compiled modules: `npx tsc -p tsconfig.json` first) with `db`,
 * a bridge to the test's schema, and `createPgRequestInbox` in scope. Resolves with what it wrote
 * on stdout and the signal that ended it, if one did.
 */
function inProcess(d: { url: string; schema: string }, body: string, env: Record<string, string> = {}): Promise<{ stdout: string; signal: NodeJS.Signals | null }> {
  const script = `
    import { PgBridge } from '${dist('persistence/postgres/bridge.js')}'
    import { createPgRequestInbox } from '${dist('persistence/postgres/pgRequestInbox.js')}'
    const db = new PgBridge({ url: process.env.URL, schema: process.env.SCHEMA })
    ${body}`
  return new Promise((resolve, reject) =>
    execFile(process.execPath, ['--input-type=module', '-e', script], { env: { ...process.env, URL: d.url, SCHEMA: d.schema, ...env } }, (error, stdout, stderr) => {
      if (error && !error.signal) reject(new Error(stderr || String(error)))
      else resolve({ stdout, signal: error?.signal ?? null })
    }),
  )
}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('the PostgreSQL request inbox', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => {
    for (const cleanup of cleanups.splice(0).reverse()) cleanup()
  })
  const database = () => {
    const d = freshDatabase()
    cleanups.push(d.destroy)
    return d
  }
  /** Another connection to the same schema: another process, as the database sees it. */
  const connection = (d: { url: string; schema: string }, onNotify?: (channel: string, payload: string) => void) => {
    const db = new PgBridge({ url: d.url, schema: d.schema, ...(onNotify ? { onNotify } : {}) })
    cleanups.push(() => db.close())
    return db
  }
  const inboxOn = (db: PgBridge, options: Partial<PgRequestInboxOptions> = {}) => createPgRequestInbox({ db, onProblem: fail, ...options })

  it('should hand each request to exactly one of four processes claiming them all at the same moment', async () => {
    const d = database()
    const ids = Array.from({ length: 40 }, (_, n) => `t-${String(n).padStart(3, '0')}`)
    const writer = inboxOn(d.db)
    for (const id of ids) writer.leaveRequest(id, 'cancel', { nonce: `n-${id}` })
    // The start line: the processes queue for a lock this connection holds, and run when it lets go.
    const key = 424_242
    d.db.querySync('SELECT pg_advisory_lock($1)', [key])
    const racers = [0, 1, 2, 3].map((n) =>
      inProcess(
        d,
        `const inbox = createPgRequestInbox({ db, owner: 'racer-${n}', onProblem: (e) => { throw e } })
         db.querySync('SELECT pg_advisory_lock_shared($1)', [${key}])
         db.querySync('SELECT pg_advisory_unlock_shared($1)', [${key}])
         const got = []
         for (const id of ${JSON.stringify(ids)}) {
           const claimed = inbox.claim(id, 'cancel')
           if (claimed) got.push([id, claimed.body.value.nonce])
         }
         process.stdout.write(JSON.stringify(got))
         db.close()`,
      ),
    )
    const waitingAtLine = () => Number(d.db.querySync(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted`, [key])[0]!.n)
    while (waitingAtLine() < 4) await pause(20)
    d.db.querySync('SELECT pg_advisory_unlock($1)', [key])
    const results = (await Promise.all(racers)).map((r) => JSON.parse(r.stdout) as Array<[string, string]>)

    const claims = results.flat()
    expect(claims.map(([id]) => id).sort()).toEqual(ids)
    for (const [id, nonce] of claims) expect(nonce).toBe(`n-${id}`)
    const owners = d.db.querySync('SELECT thread_id, claimed_by FROM inbox_requests ORDER BY thread_id')
    expect(owners).toEqual(ids.map((id) => ({ thread_id: id, claimed_by: `racer-${results.findIndex((got) => got.some(([claimed]) => claimed === id))}` })))
  })

  it('should hand the cancel a killed process claimed to another once its heartbeat is a claim TTL old, not before', async () => {
    const d = database()
    inboxOn(d.db).leaveRequest(A, 'cancel', { nonce: 'n-1', reason: 'enough' })
    const killed = await inProcess(
      d,
      `const inbox = createPgRequestInbox({ db, owner: 'doomed', claimTtlMs: ${TTL}, now: () => 1000, onProblem: (e) => { throw e } })
       process.stdout.write(inbox.claim('${A}', 'cancel') ? 'claimed' : 'none')
       process.kill(process.pid, 'SIGKILL')`,
    )
    expect(killed).toEqual({ stdout: 'claimed', signal: 'SIGKILL' })
    let now = 1000 + TTL - 1
    const survivor = inboxOn(d.db, { claimTtlMs: TTL, now: () => now })
    expect(survivor.waiting(A, 'cancel')).toBe(false)
    expect(survivor.abandoned()).toEqual([])
    now = 1000 + TTL + 1
    const taken = survivor.abandoned()
    expect(taken).toHaveLength(1)
    expect(taken[0]).toMatchObject({ kind: 'cancel', threadId: A, ref: expect.stringContaining(A), body: { ok: true, value: { nonce: 'n-1', reason: 'enough' } } })
    expect(survivor.abandoned()).toEqual([])
    survivor.honour(taken[0]!)
    expect(d.db.querySync('SELECT count(*)::int AS n FROM inbox_requests')[0]!.n).toBe(0)
  })

  it('should not take over the claim of a process that still beats, however old the claim', () => {
    const d = database()
    let now = 1000
    const holder = inboxOn(connection(d), { owner: 'holder', claimTtlMs: TTL, now: () => now })
    const other = inboxOn(d.db, { owner: 'other', claimTtlMs: TTL, now: () => now })
    holder.leaveRequest(A, 'resume', { nonce: 'n-1' })
    expect(holder.claim(A, 'resume')).not.toBeNull()
    // Its poll goes on while it acts: each beats, a third of a TTL apart.
    for (now = 1000; now <= 1000 + 3 * TTL; now += TTL / 3) holder.changed()
    expect(other.abandoned()).toEqual([])
  })

  it('should leave a claim taken over from a stalled process to its new owner when the stalled one wakes and honours it', () => {
    const d = database()
    let now = 1000
    const stalled = inboxOn(connection(d), { owner: 'stalled', claimTtlMs: TTL, now: () => now })
    const successor = inboxOn(d.db, { owner: 'successor', claimTtlMs: TTL, now: () => now })
    stalled.leaveRequest(A, 'cancel', { nonce: 'n-1' })
    const first = stalled.claim(A, 'cancel')!
    now += TTL + 1
    const second = successor.abandoned()
    expect(second.map((c) => c.threadId)).toEqual([A])
    stalled.honour(first)
    expect(d.db.querySync('SELECT claimed_by FROM inbox_requests')).toEqual([{ claimed_by: 'successor' }])
    expect(stalled.refuse(first)).toBeNull()
    successor.honour(second[0]!)
    expect(d.db.querySync('SELECT count(*)::int AS n FROM inbox_requests')[0]!.n).toBe(0)
  })

  it('should name in changed() the thread of a request another process left, once, and never say it missed one', async () => {
    const d = database()
    const inbox = inboxOn(d.db)
    expect(inbox.changed()).toEqual({ ids: new Set(), missed: false })
    await inProcess(d, `createPgRequestInbox({ db, onProblem: (e) => { throw e } }).leaveRequest('${B}', 'resume', { nonce: 'n-b' }); db.close()`)
    expect(inbox.changed()).toEqual({ ids: new Set([B]), missed: false })
    expect(inbox.changed()).toEqual({ ids: new Set(), missed: false })
  })

  it('should name on its first look every thread with a request waiting, and not one whose request was claimed', () => {
    const d = database()
    const writer = inboxOn(connection(d))
    writer.leaveRequest(A, 'cancel', { nonce: 'n-a' })
    writer.leaveRequest(B, 'resume', { nonce: 'n-b' })
    writer.leaveRequest('c-aaaaaaaaaaaa', 'cancel', { nonce: 'n-c' })
    writer.claim('c-aaaaaaaaaaaa', 'cancel')
    expect(inboxOn(d.db).changed()).toEqual({ ids: new Set([A, B]), missed: false })
  })

  it('should not miss a request whose writer commits after a later writer has left one', async () => {
    const d = database()
    const reader = inboxOn(d.db)
    reader.changed()
    const slow = connection(d)
    const watcher = connection(d)
    let late: Promise<unknown> | null = null
    const seen = new Set<string>()
    slow.transactionSync(() => {
      inboxOn(slow).leaveRequest(A, 'cancel', { nonce: 'n-a' })
      // A second writer (another process) leaves B while A's transaction is open; the reader looks
      // once B is in (had it not waited its turn) or queued behind A (as it must): A's id came first.
      late = inProcess(d, `createPgRequestInbox({ db, onProblem: (e) => { throw e } }).leaveRequest('${B}', 'cancel', { nonce: 'n-b' }); db.close()`)
      const gate = new Int32Array(new SharedArrayBuffer(4))
      const queuedOrIn = `SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid::bigint = (hashtext('spindle.inbox:' || $1)::bigint & 4294967295))
                               + (SELECT count(*) FROM inbox_requests WHERE thread_id = $2) AS n`
      while (Number(watcher.querySync(queuedOrIn, [d.schema, B])[0]!.n) === 0) Atomics.wait(gate, 0, 0, 20)
      for (const id of reader.changed().ids) seen.add(id)
    })
    await late
    for (const id of reader.changed().ids) seen.add(id)
    expect(seen).toEqual(new Set([A, B]))
  })

  it('should announce a request left on spindle_requests_<schema>, with the thread id', async () => {
    const d = database()
    const REQUESTS_CHANNEL = requestsChannel(d.schema)
    const heard: string[] = []
    const listener = connection(d, (channel, payload) => heard.push(`${channel}:${payload}`))
    listener.listenSync(REQUESTS_CHANNEL)
    inboxOn(d.db).leaveRequest(A, 'approval', { approved: true }, 'turns-3-x')
    for (let i = 0; i < 100 && !heard.includes(`${REQUESTS_CHANNEL}:${A}`); i++) await pause(20)
    expect(heard).toContain(`${REQUESTS_CHANNEL}:${A}`)
  })

  it('should keep requests, approvals, decisions and the log across a close and a reopen', () => {
    const d = database()
    const first = connection(d)
    const before = inboxOn(first)
    before.putApprovalRequest(A, 'turns-3-x', { id: 'turns-3-x', message: 'more turns?' })
    before.putApprovalRequest(A, 'turns-6-y', { id: 'turns-6-y' })
    before.putDecision(A, 'turns-3-x', { decision: 'approved' })
    before.leaveRequest(A, 'approval', { approved: true }, 'turns-6-y')
    before.putEscalation(A, { threadId: A, kind: 'recovery_escalation' })
    expect(before.log({ at: new Date(5).toISOString(), kind: 'cancel', threadId: A, file: 'x', outcome: 'refused', reason: 'no' })).toBeNull()
    first.close()

    const after = inboxOn(d.db)
    expect(after.hasApproval(A, 'turns-3-x')).toBe(true)
    expect(after.undecided(A)).toEqual(['turns-6-y'])
    expect(after.changed().ids).toEqual(new Set([A]))
    expect(after.claim(A, 'approval', 'turns-6-y')?.body).toEqual({ ok: true, value: { approved: true } })
    expect(d.db.querySync('SELECT escalation FROM inbox_escalations')).toEqual([{ escalation: { threadId: A, kind: 'recovery_escalation' } }])
    expect(d.db.querySync('SELECT at, outcome, reason FROM inbox_log')).toEqual([{ at: 5, outcome: 'refused', reason: 'no' }])
  })

  it('should refuse an approval answer without the request it answers, and a request for no thread id', () => {
    const d = database()
    const inbox = inboxOn(d.db)
    expect(() => inbox.leaveRequest(A, 'approval', { approved: true })).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }))
    expect(() => inbox.leaveRequest(A, 'approval', { approved: true }, '../x')).toThrow(expect.objectContaining({ code: 'INVALID_OPTIONS' }))
    expect(() => inbox.leaveRequest('../etc', 'cancel', { nonce: 'n' })).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
    expect(d.db.querySync('SELECT count(*)::int AS n FROM inbox_requests')[0]!.n).toBe(0)
  })
})
