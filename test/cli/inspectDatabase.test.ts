/**
 * Issue 25, item 1: `spindle inspect` on a PostgreSQL database. The inspector over a real HTTP
 * server on 127.0.0.1, its stores on a fresh schema of the test server, with threads made and run
 * by runtimes on that schema in this process: what it shows, that Approve leaves the answer in the
 * database for a worker (the inspector claims nothing) and the open events channel shows the
 * worker end the thread, that what other processes announce (NOTIFY) is pushed without waiting for
 * the poll, and that a database which stops answering shows on the page and recovers (on a server
 * of this file's own).
 */
import { z } from 'zod'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { Runtime } from '../../src/index.js'
import { serveInspector } from '../../src/operator/inspector.js'
import type { Inspector } from '../../src/operator/inspector.js'
import { openPostgresStores } from '../../src/runtime/openPostgresStores.js'
import { cancelInDatabase } from '../../src/operator/databaseRequests.js'
import { databasePlace } from '../../src/operator/databaseStores.js'
import { spindleAsync } from '../helpers/cliProcess.js'
import { startEmbeddedPostgres } from '../helpers/embeddedPostgres.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

interface Database {
  url: string
  schema: string
}

const schemas: Array<{ url: string; schema: string }> = []
const runtimes: Runtime[] = []
let inspector: Inspector | null = null

afterEach(async () => {
  await inspector?.close()
  inspector = null
  for (const rt of runtimes.splice(0)) await rt.close()
})

afterAll(async () => {
  for (const { url, schema } of schemas.splice(0)) await dropSchema(url, schema).catch(() => {})
})

function database(url = testDatabaseUrl()): Database {
  const schema = freshSchema()
  schemas.push({ url, schema })
  return { url, schema }
}

/** A worker on the database whose `publish` tool needs a person's approval. */
async function worker(db: Database) {
  const published: unknown[] = []
  const publish = defineTool({
    name: 'publish',
    description: 'publishes',
    input: z.object({ title: z.string() }),
    needsApproval: true,
    execute: async (input) => {
      published.push(input)
      return { published: input.title }
    },
  })
  const model = scriptedModel((r) => {
    const tool = r.messages.find((m) => m.role === 'tool')
    return tool ? { text: `after ${tool.toolName}: ${tool.content}` } : { toolCalls: [{ name: 'publish', input: { title: 'draft' } }] }
  })
  const rt = await createRuntime({ database: db, userConfig: null, shutdownSignals: [], model, tools: [publish] })
  runtimes.push(rt)
  return { rt, published }
}

/** A thread suspended at its `publish` call, whose approval request is stored; no runtime is left running. */
async function suspendedAtApproval(db: Database): Promise<string> {
  const { rt } = await worker(db)
  const thread = await rt.spawn({ directive: { name: 'post', prompt: 'go' } })
  expect((await thread.done).status).toBe('suspended')
  // The request is stored once the suspension is durable, after `done` settled.
  const stores = openPostgresStores(db, { problem: () => {}, folderInvalid: () => {} })
  try {
    await until(() => stores.inbox.undecided(thread.id).length === 1)
  } finally {
    stores.close()
  }
  await rt.close()
  runtimes.splice(runtimes.indexOf(rt), 1)
  return thread.id
}

async function until(check: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 20))
  }
}

function api(served: Inspector) {
  const base = served.url.split('?')[0]!
  const headers = { 'x-spindle-token': served.token, 'content-type': 'application/json' }
  return {
    get: async (path: string) => {
      const response = await fetch(`${base}${path}`, { headers })
      return { status: response.status, body: (await response.json()) as any }
    },
    post: async (path: string, body: unknown) => {
      const response = await fetch(`${base}${path}`, { method: 'POST', headers, body: JSON.stringify(body) })
      return { status: response.status, body: (await response.json()) as any }
    },
  }
}

/** The inspector's events channel, frame by frame. */
async function events(served: Inspector) {
  const response = await fetch(`${served.url.split('?')[0]!}events?token=${served.token}`)
  expect(response.status).toBe(200)
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let text = ''
  return {
    /** The next frame of `event` whose data passes `check`; the frames before it are passed over. */
    async next(event: 'overview' | 'problem', check: (data: any) => boolean = () => true): Promise<any> {
      for (;;) {
        for (let end = text.indexOf('\n\n'); end >= 0; end = text.indexOf('\n\n')) {
          const block = text.slice(0, end)
          text = text.slice(end + 2)
          const frame = /^event: (\w+)\ndata: (.*)$/s.exec(block)
          if (frame?.[1] === event && check(JSON.parse(frame[2]!))) return JSON.parse(frame[2]!)
        }
        const { value, done } = await reader.read()
        if (done) throw new Error('the events channel ended')
        text += decoder.decode(value, { stream: true })
      }
    },
    close: () => reader.cancel(),
  }
}

const threadIn = (view: { threads: Array<Record<string, any>> }, id: string) => view.threads.find((t) => t.id === id)

describe('spindle inspect on a database', () => {
  it('should list a thread suspended at a tool approval with its request, and name the database without its password', async () => {
    const db = database()
    const id = await suspendedAtApproval(db)
    inspector = await serveInspector({ database: db })
    const page = await (await fetch(inspector.url)).text()
    const password = new URL(db.url).password
    expect(page).toContain(`${db.url.replace(`:${password}@`, ':***@')}#${db.schema}</span>`)
    expect(page).not.toContain(`:${password}@`)
    const { status, body } = await api(inspector).get('api/overview')
    expect(status).toBe(200)
    expect(body.tree).toEqual([expect.objectContaining({ id, directive: 'post', status: 'suspended' })])
    expect(threadIn(body, id)).toMatchObject({
      status: 'suspended',
      suspendReason: 'tool_approval',
      statePaths: [['suspended']],
      usage: { turns: 1 },
      orphan: null,
      heldBy: null,
      resumable: false,
      requested: { cancel: false, resume: false },
      problems: [],
      approvals: [expect.objectContaining({ kind: 'tool_approval', tool: 'publish', input: { title: 'draft' }, threadId: id, answer: null })],
    })
  })

  it('should leave an approval given on the page for a worker, refuse a second as the CLI does, and push the thread completed once the worker ran it', async () => {
    const db = database()
    const id = await suspendedAtApproval(db)
    inspector = await serveInspector({ database: db })
    const page = api(inspector)
    const channel = await events(inspector)
    try {
      const first = await channel.next('overview')
      expect(threadIn(first, id)).toMatchObject({ status: 'suspended', approvals: [expect.objectContaining({ answer: null })] })

      const approved = await page.post(`api/threads/${id}/approve`, { input: { title: 'final' } })
      expect(approved.status).toBe(200)
      expect(approved.body).toMatchObject({ threadId: id, action: 'approve', file: expect.stringMatching(new RegExp(`^\\(postgres\\)/${id}/approvals/`)) })
      const again = await page.post(`api/threads/${id}/deny`, {})
      expect(again.body).toMatchObject({ error: 'APPROVAL_ALREADY_ANSWERED', message: expect.stringContaining('--replace') })
      // Left, not claimed: it waits for a worker, and the page shows it given.
      const left = await channel.next('overview', (v) => threadIn(v, id)?.approvals[0]?.answer !== null)
      expect(threadIn(left, id)!.approvals).toEqual([expect.objectContaining({ answer: { approved: true, by: 'spindle inspect', state: 'waiting' } })])
      expect(left.changed).toEqual([id])

      const { rt, published } = await worker(db)
      await until(() => rt.get(id).status === 'completed')
      expect(published).toEqual([{ title: 'final' }])
      const done = await channel.next('overview', (v) => threadIn(v, id)?.status === 'completed')
      expect(threadIn(done, id)).toMatchObject({ status: 'completed', approvals: [], resumable: false, result: expect.stringContaining('"published":"final"') })
    } finally {
      await channel.close()
    }
    const conversation = await page.get(`api/threads/${id}/conversation`)
    expect(conversation.body.items.filter((i: { kind: string }) => i.kind === 'tool_call' || i.kind === 'tool_result').map((i: { kind: string; tool: string }) => [i.kind, i.tool])).toEqual([
      ['tool_call', 'publish'],
      ['tool_result', 'publish'],
    ])
    const transcript = await page.get(`api/threads/${id}/transcript`)
    expect(transcript.body[0].type).toBe('thread_spawned')
    expect((await page.post(`api/threads/${id}/cancel`, {})).body).toMatchObject({ error: 'THREAD_NOT_ACTIVE' })
    expect((await page.post(`api/threads/${id}/resume`, {})).body).toMatchObject({ error: 'THREAD_NOT_SUSPENDED' })
    expect((await page.get('api/threads/nobody-aaaaaaaaaaaa/conversation')).status).toBe(404)
    expect(await page.get(`api/threads/${id}/rejected`)).toMatchObject({ status: 501, body: { error: 'NOT_KEPT' } })
  })

  it("should push what other processes announce at once, with the poll an hour away: a cancel left by the CLI, a thread spawned by a host", async () => {
    const db = database()
    const id = await suspendedAtApproval(db)
    inspector = await serveInspector({ database: db, pollMs: 3_600_000 })
    const channel = await events(inspector)
    try {
      expect(threadIn(await channel.next('overview'), id)).toMatchObject({ requested: { cancel: false } })
      // What `spindle cancel --db` does, on a connection of its own.
      cancelInDatabase(databasePlace(db), id, 'from the CLI', 'ada')
      expect(threadIn(await channel.next('overview', (v) => threadIn(v, id)?.requested.cancel === true), id)).toMatchObject({ status: 'suspended' })
      // A host that only spawns: the thread is registered (and announced) and nobody runs it.
      const host = await createRuntime({ database: db, userConfig: null, shutdownSignals: [], maxThreads: 0, model: scriptedModel([{ text: 'never' }]) })
      runtimes.push(host)
      const spawned = await host.spawn({ directive: { name: 'later', prompt: 'p' } })
      const pushed = await channel.next('overview', (v) => threadIn(v, spawned.id) !== undefined)
      expect(threadIn(pushed, spawned.id)).toMatchObject({ directive: 'later', status: 'created' })
      expect(pushed.changed).toContain(spawned.id)
    } finally {
      await channel.close()
    }
  })

  it('should cancel a thread from the page through the database, the request shown as waiting until a worker takes it', async () => {
    const db = database()
    const id = await suspendedAtApproval(db)
    inspector = await serveInspector({ database: db })
    const page = api(inspector)
    expect((await page.post(`api/threads/${id}/cancel`, { reason: 'not needed' })).body).toMatchObject({ threadId: id, action: 'cancel', file: `(postgres)/${id}/cancel` })
    expect(threadIn((await page.get('api/overview')).body, id)).toMatchObject({ status: 'suspended', requested: { cancel: true, resume: false } })
    const { rt } = await worker(db)
    await until(() => rt.get(id).status === 'cancelled')
    await until(async () => threadIn((await page.get('api/overview')).body, id)?.status === 'cancelled')
  })
})

describe('spindle inspect on a database that stops answering', () => {
  it('should show DATABASE_UNAVAILABLE on the page while the server is down, and the threads again once it is back', async () => {
    const server = await startEmbeddedPostgres()
    try {
      const db = database(server.url)
      const id = await suspendedAtApproval(db)
      inspector = await serveInspector({ database: db, pollMs: 100 })
      const channel = await events(inspector)
      try {
        expect(threadIn(await channel.next('overview'), id)).toMatchObject({ status: 'suspended' })
        await server.halt()
        expect(await channel.next('problem')).toMatchObject({ code: 'DATABASE_UNAVAILABLE' })
        expect(await api(inspector).get('api/overview')).toMatchObject({ status: 503, body: { error: 'DATABASE_UNAVAILABLE' } })
        await server.start()
        // Nothing changed meanwhile: the overview is pushed all the same, to take the problem off the page.
        expect(threadIn(await channel.next('overview'), id)).toMatchObject({ status: 'suspended', approvals: [expect.objectContaining({ kind: 'tool_approval' })] })
      } finally {
        await channel.close()
      }
      await inspector.close()
      inspector = null
    } finally {
      await server.stop()
    }
  })
})

describe('spindle inspect --db', () => {
  it('should refuse a --schema that holds no spindle tables with DATA_DIR_NOT_FOUND, exit 4, as the other commands do', async () => {
    const db = database()
    await suspendedAtApproval(db)
    const { code, stderr } = await spindleAsync(['inspect', '--db', db.url, '--schema', `${db.schema}x`])
    expect(code).toBe(4)
    expect(stderr).toContain('[DATA_DIR_NOT_FOUND]')
    expect(stderr).toContain(`no spindle tables in schema ${db.schema}x`)
  })
})
