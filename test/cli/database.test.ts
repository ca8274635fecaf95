/**
 * Issue 25, item 1: the CLI's commands on a PostgreSQL database (`--db`, `--schema`,
 * SPINDLE_DATABASE_URL). The compiled CLI as a person runs it, in child processes, against fresh
 * schemas of the test server, with threads made and run by runtimes on those schemas; decisions
 * left by the CLI are acted on by a worker runtime in this process.
 */
import fs from 'node:fs'
import path from 'node:path'
import pg from 'pg'
import { z } from 'zod'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { askHuman, createRuntime, defineTool, scriptedModel } from '../../src/index.js'
import type { Runtime, RuntimeOptions } from '../../src/index.js'
import { openPostgresStores } from '../../src/runtime/openPostgresStores.js'
import { spindleAsync as spindle } from '../helpers/cliProcess.js'
import { tempDir } from '../helpers/dirs.js'
import { dropSchema, freshSchema, testDatabaseUrl } from '../helpers/postgres.js'

const schemas: string[] = []
const runtimes: Runtime[] = []

/** A fresh schema of the test server, and the flags that name it. */
function database(): { url: string; schema: string; flags: string[] } {
  const schema = freshSchema()
  schemas.push(schema)
  return { url: testDatabaseUrl(), schema, flags: ['--db', testDatabaseUrl(), '--schema', schema] }
}

async function open(db: { url: string; schema: string }, options: Omit<RuntimeOptions, 'dir' | 'database'>): Promise<Runtime> {
  const rt = await createRuntime({ database: { url: db.url, schema: db.schema }, userConfig: null, shutdownSignals: [], ...options })
  runtimes.push(rt)
  return rt
}

async function closeAll(): Promise<void> {
  for (const rt of runtimes.splice(0)) await rt.close()
}

async function until(check: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms
  while (!check()) {
    if (Date.now() > end) throw new Error('timed out')
    await new Promise((r) => setTimeout(r, 20))
  }
}

afterAll(async () => {
  await closeAll()
  for (const schema of schemas.splice(0)) await dropSchema(testDatabaseUrl(), schema)
})

describe('spindle ls, show, logs, tree and doctor on a database', () => {
  let db: ReturnType<typeof database>
  let done: string
  let suspended: string
  let lead: string

  beforeAll(async () => {
    db = database()
    const rt = await open(db, {
      model: scriptedModel((r) => (r.directiveName === 'loop' ? { toolCalls: [{ name: 'nope', input: {} }] } : { text: `answer of ${r.directiveName}` })),
    })
    const a = await rt.spawn({ directive: { name: 'answer', prompt: 'p' } })
    const b = await rt.spawn({ directive: { name: 'loop', prompt: 'p' }, limits: { turns: 2 } })
    const top = await rt.spawn({ id: 'lead', directive: { name: 'lead', prompt: 'plan' }, limits: { spend: 1 } })
    const first = await rt.spawn({ id: 'first', directive: { name: 'first', prompt: 'a' }, parentId: top.id })
    await Promise.all([a.done, b.done, top.done, first.done])
    await closeAll()
    done = a.id
    suspended = b.id
    lead = top.id
  })

  it('should list the threads as the directory version does, as a table and as JSON', async () => {
    const text = await spindle(['ls', ...db.flags])
    expect(text.code, text.stderr).toBe(0)
    expect(text.stdout.split('\n')[0]).toMatch(/^ID +STATUS +TURNS +SPEND +UPDATED$/)
    expect(text.stdout).toMatch(new RegExp(`^${suspended} +suspended \\(limit\\) +2 +\\$0\\.\\d{5} +\\d{4}-`, 'm'))
    const rows = JSON.parse((await spindle(['ls', ...db.flags, '--json'])).stdout) as Array<{ id: string; status: string; nonce?: string }>
    expect(rows.map((r) => [r.id, r.status]).sort()).toEqual([[done, 'completed'], ['first', 'completed'], ['lead', 'completed'], [suspended, 'suspended']].sort())
    expect(rows.every((r) => r.nonce === undefined)).toBe(true)
    const only = JSON.parse((await spindle(['ls', ...db.flags, '--status', 'suspended', '--json'])).stdout) as Array<{ id: string }>
    expect(only.map((r) => r.id)).toEqual([suspended])
  })

  it('should show a thread suspended at its limit with its open request, and the command that answers it on this database', async () => {
    const report = JSON.parse((await spindle(['show', suspended, ...db.flags, '--json'])).stdout)
    expect(report.record.status).toBe('suspended')
    expect(report.state.context.limitHit).toMatchObject({ limit: 'turns', used: 2, max: 2, proposed: 4 })
    expect(report.transcript).toMatchObject({ torn: false })
    expect(report.transcript.entries).toBe(report.transcript.lastSeq)
    expect(report.approvals.open).toMatchObject({ kind: 'limit_escalation', threadId: suspended, limit: 'turns', proposed: 4, respond: { file: expect.stringContaining(suspended) } })
    expect(report.problems).toEqual([])
    const text = await spindle(['show', suspended, ...db.flags])
    expect(text.code).toBe(0)
    expect(text.stdout).toMatch(/^suspended   at its turns limit \(2 of 2\), waiting for a person$/m)
    expect(text.stdout).toContain(`next        spindle approve ${suspended} --turns 4 --db '${db.url.replace(':spindle@', ':***@')}' --schema ${db.schema}`)
    expect(text.stdout).toMatch(/^transcript  \d+ entries, chain verified$/m)
  })

  it('should print the verified transcript, as text and as JSON lines', async () => {
    const lines = (await spindle(['logs', done, ...db.flags, '--json'])).stdout.trim().split('\n').map((l) => JSON.parse(l))
    expect(lines.map((e) => e.seq)).toEqual(lines.map((_, i) => i + 1))
    expect(lines[0].type).toBe('thread_spawned')
    expect(lines.at(-1).type).toBe('MODEL_REPLIED')
    const after = (await spindle(['logs', done, ...db.flags, '--after', '1', '--json'])).stdout.trim().split('\n')
    expect(after).toHaveLength(lines.length - 1)
    const text = await spindle(['logs', done, ...db.flags])
    expect(text.stdout).toMatch(/^ {4}1 {2}\S+ {2}thread_spawned +\{/m)
    expect(text.stdout).toContain(`spindle logs ${done} --db`)
  })

  it('should end logs --follow of a thread that stopped after printing all of it', async () => {
    const followed = await spindle(['logs', done, ...db.flags, '--follow', '--json'])
    expect(followed.code).toBe(0)
    expect(followed.stdout.trim().split('\n').at(-1)).toContain('"MODEL_REPLIED"')
  })

  it('should print the tree with the child under its parent and the parent\'s budget', async () => {
    const trees = JSON.parse((await spindle(['tree', 'first', ...db.flags, '--json'])).stdout)
    expect(trees).toHaveLength(1)
    expect(trees[0]).toMatchObject({ id: lead, children: [{ id: 'first' }], budget: { limit: 1 } })
    const text = (await spindle(['tree', ...db.flags])).stdout
    expect(text).toMatch(new RegExp(`^lead  lead  completed  \\$0\\.\\d{5}  1 turn  budget \\$0\\.\\d{5} of \\$1\\.00000$`, 'm'))
    expect(text).toMatch(/^└─ first  first  completed/m)
  })

  it('should find no damage in threads a runtime left, each transcript verified and replaying to its checkpoint', async () => {
    const run = await spindle(['doctor', ...db.flags])
    expect(run.code, run.stdout).toBe(0)
    expect(run.stdout.trim()).toBe('4 threads checked: no damage.')
  })

  it('should refuse an unknown thread with exit 4', async () => {
    const run = await spindle(['show', 'nosuch', ...db.flags])
    expect(run.code).toBe(4)
    expect(run.stderr).toContain('[THREAD_NOT_FOUND]')
  })

  it('should refuse a --schema that holds no spindle tables with exit 4, naming the schemas that do, and create nothing', async () => {
    const typo = `${db.schema}x`
    const run = await spindle(['ls', '--db', db.url, '--schema', typo])
    expect(run.code).toBe(4)
    expect(run.stderr).toContain('[DATA_DIR_NOT_FOUND]')
    expect(run.stderr).toContain(`no spindle tables in schema ${typo}`)
    expect(run.stderr).toMatch(new RegExp(`Schemas with spindle tables there: [a-z0-9_, ]*\\b${db.schema}\\b`))
    const admin = new pg.Client({ connectionString: db.url })
    await admin.connect()
    try {
      expect((await admin.query('SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1', [typo])).rows[0].n).toBe(0)
    } finally {
      await admin.end()
    }
  })

  it('should take the database from SPINDLE_DATABASE_URL when neither --dir nor --db is given, and the directory when --dir is', async () => {
    const fromEnv = await spindle(['ls', '--schema', db.schema, '--json'], { SPINDLE_DATABASE_URL: db.url })
    expect(fromEnv.code, fromEnv.stderr).toBe(0)
    expect(JSON.parse(fromEnv.stdout)).toHaveLength(4)
    const dir = tempDir('spindle-db-env-dir')
    const fromDir = await spindle(['ls', '--dir', dir], { SPINDLE_DATABASE_URL: db.url })
    expect(fromDir.code).toBe(4)
    expect(fromDir.stderr).toContain('[DATA_DIR_NOT_FOUND]')
  })
})

describe('spindle doctor on a damaged database', () => {
  it('should report a transcript row changed in SQL as damage, naming the thread, and exit 5', async () => {
    const db = database()
    const rt = await open(db, { model: scriptedModel([{ text: 'first' }, { text: 'second' }]) })
    const [a, b] = await Promise.all([rt.spawn({ directive: { name: 'a', prompt: 'p' } }), rt.spawn({ directive: { name: 'b', prompt: 'p' } })])
    await Promise.all([a.done, b.done])
    await closeAll()
    const client = new pg.Client({ connectionString: db.url })
    await client.connect()
    try {
      const changed = await client.query(`UPDATE "${db.schema}".transcript_lines SET line = regexp_replace(line, '"ts":"[^"]+"', '"ts":"2000-01-01T00:00:00.000Z"') WHERE thread_id = $1 AND seq = 2`, [a.id])
      expect(changed.rowCount).toBe(1)
    } finally {
      await client.end()
    }
    const run = await spindle(['doctor', ...db.flags, '--json'])
    expect(run.code).toBe(5)
    const { threads, findings } = JSON.parse(run.stdout) as { threads: number; findings: Array<{ threadId: string; kind: string; code: string }> }
    expect(threads).toBe(2)
    expect(findings).toEqual([expect.objectContaining({ threadId: a.id, kind: 'damage', code: expect.stringMatching(/^TRANSCRIPT_(CHAIN_BROKEN|CORRUPT)$/) })])
    const text = await spindle(['doctor', ...db.flags])
    expect(text.code).toBe(5)
    expect(text.stdout).toContain('2 threads checked: 1 damaged.')
  })
})

describe('spindle cancel and locks on a database, with a worker running the thread', () => {
  afterEach(closeAll)

  it('should list the worker\'s live lease, and cancel its thread through the database', async () => {
    const db = database()
    const worker = await open(db, { model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]) })
    const thread = await worker.spawn({ directive: { name: 'stuck', prompt: 'wait' } })
    await until(() => worker.get(thread.id).status === 'running')

    const listed = JSON.parse((await spindle(['locks', ...db.flags, '--json'])).stdout) as { locks: Array<{ threadId: string; state: string; pid: number }> }
    expect(listed.locks).toEqual([expect.objectContaining({ threadId: thread.id, state: 'live', pid: process.pid })])
    const kept = JSON.parse((await spindle(['locks', ...db.flags, '--apply', '--json'])).stdout) as { reclaimed: unknown[]; kept: Array<{ threadId: string }> }
    expect(kept.reclaimed).toEqual([])
    expect(kept.kept.map((l) => l.threadId)).toEqual([thread.id])

    const cancel = await spindle(['cancel', thread.id, ...db.flags, '--reason', 'no longer needed'])
    expect(cancel.code, cancel.stderr).toBe(0)
    expect(cancel.stdout).toMatch(new RegExp(`^cancel: wrote .*${thread.id}.*\\n.*spindle show ${thread.id} --db`))
    const outcome = await thread.done
    expect(outcome.status).toBe('cancelled')
    const again = await spindle(['cancel', thread.id, ...db.flags])
    expect(again.code).toBe(6)
    expect(again.stderr).toContain('[THREAD_NOT_ACTIVE]')
  })
})

describe('spindle approve, deny and answer on a database, with a worker watching the thread', () => {
  afterEach(closeAll)

  /** A worker whose `publish` needs a person's approval and whose `ask` threads ask one. */
  async function worker(db: { url: string; schema: string }) {
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
      if (tool) return { text: `after ${tool.toolName}: ${tool.content}` }
      if (r.directiveName === 'ask') return { toolCalls: [{ name: 'ask_human', input: { question: 'Which one?', choices: ['Etna', 'Fuji'] } }] }
      return { toolCalls: [{ name: 'publish', input: { title: 'draft' } }] }
    })
    const rt = await open(db, { model, tools: [publish, askHuman()] })
    return { rt, published }
  }

  async function suspendedAt(rt: Runtime, name: string): Promise<string> {
    const thread = await rt.spawn({ directive: { name, prompt: 'go' } })
    expect((await thread.done).status).toBe('suspended')
    return thread.id
  }

  async function completed(rt: Runtime, id: string): Promise<string> {
    await until(() => rt.get(id).status !== 'suspended')
    const outcome = await rt.get(id).done
    expect(outcome.status).toBe('completed')
    return outcome.result as string
  }

  it('should approve a tool call with edited input, which the worker runs', async () => {
    const db = database()
    const { rt, published } = await worker(db)
    const id = await suspendedAt(rt, 'post')
    const shown = JSON.parse((await spindle(['show', id, ...db.flags, '--json'])).stdout)
    expect(shown.approvals.open).toMatchObject({ kind: 'tool_approval', tool: 'publish', input: { title: 'draft' } })
    const run = await spindle(['approve', id, ...db.flags, '--input', '{"title":"final"}', '--json'])
    expect(run.code, run.stderr).toBe(0)
    expect(JSON.parse(run.stdout)).toMatchObject({ threadId: id, action: 'approve' })
    expect(await completed(rt, id)).toContain('"published":"final"')
    expect(published).toEqual([{ title: 'final' }])
  })

  it('should deny a tool call: the tool does not run and the model reads the reason', async () => {
    const db = database()
    const { rt, published } = await worker(db)
    const id = await suspendedAt(rt, 'post')
    const run = await spindle(['deny', id, ...db.flags, '--reason', 'not today'])
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(/^deny: wrote /)
    expect(await completed(rt, id)).toContain('not today')
    expect(published).toEqual([])
  })

  it('should answer a question, which becomes the call\'s result, and refuse an approval or a second answer there', async () => {
    const db = database()
    const { rt } = await worker(db)
    const id = await suspendedAt(rt, 'ask')
    const approval = await spindle(['approve', id, ...db.flags])
    expect(approval.code).toBe(6)
    expect(approval.stderr).toContain(`answer it (spindle answer ${id} <answer> --db`)
    const resume = await spindle(['resume', id, ...db.flags])
    expect(resume.code).toBe(6)
    expect(resume.stderr).toContain('[NO_PENDING_APPROVAL]')
    const run = await spindle(['answer', id, 'Etna', ...db.flags])
    expect(run.code, run.stderr).toBe(0)
    expect(await completed(rt, id)).toContain('Etna')
    const late = await spindle(['answer', id, 'Fuji', ...db.flags])
    expect(late.code).toBe(6)
    expect(late.stderr).toContain('[THREAD_NOT_SUSPENDED]')
  })
})

describe('spindle approve on a database with no worker running', () => {
  it('should refuse limits the thread has used, leave one answer, and refuse a second without --replace', async () => {
    const db = database()
    const rt = await open(db, { model: scriptedModel(() => ({ toolCalls: [{ name: 'nope', input: {} }] })) })
    const thread = await rt.spawn({ directive: { name: 'loop', prompt: 'p' }, limits: { turns: 2 } })
    await thread.done
    // The request is stored once the suspension is durable, after `done` settled: not closed before.
    const stores = openPostgresStores(db, { problem: () => {}, folderInvalid: () => {} })
    try {
      await until(() => stores.inbox.undecided(thread.id).length === 1)
    } finally {
      stores.close()
    }
    await closeAll()
    const used = await spindle(['approve', thread.id, ...db.flags, '--turns', '2'])
    expect(used.code).toBe(6)
    expect(used.stderr).toContain('[LIMIT_STILL_EXCEEDED]')
    expect((await spindle(['deny', thread.id, ...db.flags])).code).toBe(0)
    const second = await spindle(['approve', thread.id, ...db.flags, '--turns', '10'])
    expect(second.code).toBe(6)
    expect(second.stderr).toContain('[APPROVAL_ALREADY_ANSWERED]')
    expect(second.stderr).toContain('--replace')
    expect((await spindle(['approve', thread.id, ...db.flags, '--turns', '10', '--replace'])).code).toBe(0)

    // The next runtime on the database acts on the answer left last.
    const next = await open(db, { model: scriptedModel((r) => (r.turn < 4 ? { toolCalls: [{ name: 'nope', input: {} }] } : { text: 'done at last' })) })
    await until(() => next.get(thread.id).status === 'completed')
    expect((await next.get(thread.id).done).cost.turns).toBe(4)
    await closeAll()
  })
})

describe('spindle run and demo on a database', () => {
  it('should run a directive into the database, where ls finds it', async () => {
    const db = database()
    const dir = tempDir('spindle-db-run')
    const file = path.join(dir, 'summarise.md')
    fs.writeFileSync(file, '---\nname: summarise\nlimits: { turns: 3 }\n---\nSummarise it.\n')
    const run = await spindle(['run', file, ...db.flags, '--json'])
    expect(run.code, run.stderr).toBe(0)
    const outcome = JSON.parse(run.stdout)
    expect(outcome).toMatchObject({ status: 'completed', result: expect.stringContaining('Summarise it.') })
    const rows = JSON.parse((await spindle(['ls', ...db.flags, '--json'])).stdout)
    expect(rows).toEqual([expect.objectContaining({ id: outcome.threadId, directiveName: 'summarise', status: 'completed' })])
  })

  it('should run the demo with its threads in the database and print commands that name it', async () => {
    const db = database()
    const dir = tempDir('spindle-db-demo')
    const run = await spindle(['demo', ...db.flags, '--dir', dir, '--latency', '0'])
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toMatch(new RegExp(`spindle answer demo-volcanoes-\\w+ Etna --db '[^']+' --schema ${db.schema}, then run the demo again\\.`))
    const rows = JSON.parse((await spindle(['ls', ...db.flags, '--json'])).stdout) as Array<{ status: string }>
    expect(rows.map((r) => r.status).sort()).toEqual(['completed', 'completed', 'completed', 'suspended', 'suspended', 'suspended'])
  })
})

describe('spindle --db options', () => {
  it('should refuse a --db that is no PostgreSQL URL with exit 3, naming the flag', async () => {
    const run = await spindle(['ls', '--db', 'mysql://localhost/x'])
    expect(run.code).toBe(3)
    expect(run.stderr).toContain('--db must be a PostgreSQL URL')
    expect(run.stderr).toContain('[INVALID_OPTIONS]')
  })

  it('should refuse --dir and --db together, and --schema without a database, with exit 3', async () => {
    const both = await spindle(['ls', '--dir', tempDir('spindle-db-both'), '--db', testDatabaseUrl()])
    expect(both.code).toBe(3)
    expect(both.stderr).toContain('--dir and --db')
    const schema = await spindle(['show', 'x', '--schema', 'spindle'])
    expect(schema.code).toBe(3)
    expect(schema.stderr).toContain('--schema')
  })

  it('should fail with DATABASE_UNAVAILABLE and exit 9 when the database cannot be reached, without printing its password', async () => {
    const run = await spindle(['ls', '--db', 'postgres://spindle:secret@127.0.0.1:1/nowhere', '--json'])
    expect(run.code).toBe(9)
    const { error } = JSON.parse(run.stderr) as { error: { code: string; message: string } }
    expect(error.code).toBe('DATABASE_UNAVAILABLE')
    expect(error.message).toContain('--db')
    expect(error.message).not.toContain('secret')
  })
})
