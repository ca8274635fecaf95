/**
 * The operator surfaces under attack: the inspector's HTTP server on 127.0.0.1 (a malformed request
 * line, DNS rebinding, another site's POST, an answer the runtime would reject), request files
 * planted in a thread's directory (a FIFO, a symlink out of the data directory, a symlink at the
 * temp name of an atomic write), thread text that would drive the operator's terminal, and
 * directive templates naming Object.prototype's keys. Real server, real files, real processes.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { loadDirectiveFile, renderDirective } from '../../src/operator/directiveFile.js'
import { pendingApprovals, respondToApproval } from '../../src/thread/requests.js'
import { startInspector } from '../../src/operator/inspector.js'
import type { Inspector } from '../../src/operator/inspector.js'
import { writeFileAtomicSync } from '../../persistence/atomicFile.js'
import { compiled, tempDir } from '../helpers/dirs.js'

let inspector: Inspector | null = null
afterEach(async () => {
  await inspector?.close()
  inspector = null
})

function host(dir: string, mode: 'limit' | 'run', timeout = 20_000) {
  return spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8', timeout })
}

function spindle(...args: string[]) {
  return spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8', timeout: 20_000 })
}

function spindleAsync(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('src/cli.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** A thread suspended at its turns limit with an open approval request. */
function suspended(label: string): { dir: string; id: string } {
  const dir = tempDir(label)
  const run = host(dir, 'limit')
  expect(run.status, run.stderr).toBe(0)
  return { dir, id: run.stdout.trim() }
}

/** One raw HTTP exchange: what the server answered, or 'no answer' when it closed or went silent. */
function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(text))
    let got = ''
    const timer = setTimeout(() => {
      socket.destroy()
      resolve(got || 'no answer')
    }, 2000)
    socket.on('data', (d: Buffer) => {
      got += d.toString()
      if (got.includes('\r\n\r\n')) {
        clearTimeout(timer)
        socket.destroy()
        resolve(got.split('\r\n')[0]!)
      }
    })
    socket.on('error', () => {})
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(got ? got.split('\r\n')[0]! : 'no answer')
    })
  })
}

/** A request with headers fetch would not let us set (Host). */
function request(url: string, options: { method?: string; headers: Record<string, string>; body?: string }): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: options.method ?? 'GET', headers: options.headers }, (res) => {
      let body = ''
      res.on('data', (d: Buffer) => (body += d.toString()))
      res.on('end', () => resolve({ status: res.statusCode!, body }))
    })
    req.on('error', reject)
    req.end(options.body)
  })
}

describe('spindle inspect under attack', () => {
  it('should answer a request line the URL parser refuses with 400 and keep serving', async () => {
    const dir = tempDir('spindle-hostile-url')
    // A data directory with nothing in it yet: the inspector refuses a directory without spindle data.
    await (await createRuntime({ dir, model: scriptedModel([]) })).close()
    inspector = await startInspector({ dir })
    const port = Number(new URL(inspector.url).port)
    // Before the fix this threw outside the handler's try: an unhandled rejection ended the process.
    expect(await raw(port, 'GET http://[ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')).toBe('HTTP/1.1 400 Bad Request')
    expect(await raw(port, 'GET //%zz/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')).toBe('HTTP/1.1 400 Bad Request')
    expect((await fetch(inspector.url)).status).toBe(200)
  })

  it('should refuse another Host (DNS rebinding) and a POST from another origin, even with the token', async () => {
    const { dir, id } = suspended('spindle-hostile-origin')
    inspector = await startInspector({ dir })
    const base = inspector.url.split('?')[0]!
    const port = new URL(inspector.url).port
    const token = { 'x-spindle-token': inspector.token }
    expect((await request(`${base}api/overview`, { headers: { ...token, host: `attacker.example:${port}` } })).status).toBe(403)
    expect((await request(`${base}api/overview`, { headers: { ...token, host: `localhost:${port}` } })).status).toBe(200)

    const approvals = path.join(dir, 'threads', id, 'approvals')
    const post = (origin: string) => request(`${base}api/threads/${id}/approve`, { method: 'POST', headers: { ...token, origin, 'content-type': 'application/json' }, body: '{}' })
    expect((await post('http://attacker.example')).status).toBe(403)
    expect((await post('http://127.0.0.1:1')).status).toBe(403)
    expect(fs.readdirSync(approvals).filter((n) => n.endsWith('.response.json'))).toEqual([])
    // The inspector's own page sends its own origin.
    expect((await post(`http://127.0.0.1:${port}`)).status).toBe(200)
  })

  it('should refuse an approval the runtime would reject instead of writing it and answering 200', async () => {
    const { dir, id } = suspended('spindle-hostile-answer')
    inspector = await startInspector({ dir })
    const base = inspector.url.split('?')[0]!
    const headers = { 'x-spindle-token': inspector.token, 'content-type': 'application/json' }
    for (const body of ['{"limits":{"turns":"many"}}', '{"limits":{"turns":5,"__proto__":{"x":1}}}', '{"message":{"html":"<b>"}}', '{"limits":{"turns":-1}}']) {
      const answered = await fetch(`${base}api/threads/${id}/approve`, { method: 'POST', headers, body })
      expect(answered.status).toBe(400)
      expect(await answered.json()).toMatchObject({ error: 'INVALID_OPTIONS' })
    }
    // The CLI too: a message past the 10,000 characters the runtime accepts is refused here (exit 3).
    const long = spindle('approve', id, '--message', 'm'.repeat(12_000), '--dir', dir)
    expect(long.status, long.stderr).toBe(3)
    expect(fs.readdirSync(path.join(dir, 'threads', id, 'approvals')).filter((n) => n.includes('.response'))).toEqual([])
    const good = await fetch(`${base}api/threads/${id}/approve`, { method: 'POST', headers, body: JSON.stringify({ limits: { turns: 6 } }) })
    expect(good.status).toBe(200)
  })
})

describe('request files planted in a thread directory', () => {
  it('should refuse a cancel request that is a FIFO instead of blocking the runtime forever', () => {
    const { dir, id } = suspended('spindle-hostile-fifo')
    const fifo = path.join(dir, 'threads', id, 'cancel.requested')
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0)
    // Before the fix the runtime's poll blocked in readFileSync on the FIFO: this timed out.
    const run = host(dir, 'run', 8000)
    expect(run.error, 'the host process hung on the FIFO').toBeUndefined()
    expect(run.status, run.stderr).toBe(0)
    expect(JSON.parse(run.stdout)).toEqual([expect.objectContaining({ id, status: 'suspended' })])
    const log = fs.readFileSync(path.join(dir, 'requests.log.jsonl'), 'utf8')
    expect(log).toContain('not a regular file')
  })

  it('should not hang `spindle approve` or the inspector on an approval request that is a FIFO', async () => {
    const { dir, id } = suspended('spindle-hostile-fifo-approval')
    expect(spawnSync('mkfifo', [path.join(dir, 'threads', id, 'approvals', 'zz-fifo.request.json')]).status).toBe(0)
    const approved = spindle('approve', id, '--dir', dir, '--json')
    expect(approved.error, 'spindle approve hung on the FIFO').toBeUndefined()
    expect(approved.status, approved.stderr).toBe(0)
    inspector = await startInspector({ dir })
    const overview = await fetch(`${inspector.url.split('?')[0]}api/overview`, { headers: { 'x-spindle-token': inspector.token }, signal: AbortSignal.timeout(3000) })
    expect(overview.status).toBe(200)
  })

  it('should list the real approval request past a malformed one or one whose id is not its file name', () => {
    const { dir, id } = suspended('spindle-hostile-bad-request')
    const approvals = path.join(dir, 'threads', id, 'approvals')
    const [real] = fs.readdirSync(approvals)
    fs.writeFileSync(path.join(approvals, 'aaa.request.json'), '{}')
    fs.writeFileSync(path.join(approvals, 'not an id!.request.json'), JSON.stringify({ id: 'not an id!', createdAt: '9998' }))
    fs.writeFileSync(path.join(approvals, 'zzz.request.json'), JSON.stringify({ id: 'phantom', createdAt: '9999' }))
    // Before the fix `{}` threw a TypeError (exit 1 from `spindle approve`, a 400 for the inspector's
    // whole overview), and the phantom, newest, was the one answered.
    expect(pendingApprovals(dir, id).map((r) => `${r.id}.request.json`)).toEqual([real])
    expect(respondToApproval(dir, id, { approved: true })).toBe(path.join(approvals, real!.replace('.request.json', '.response.json')))
  })

  it('should not read a cancel request through a symlink to a file outside the data directory', () => {
    const { dir, id } = suspended('spindle-hostile-symlink')
    const secret = path.join(tempDir('spindle-hostile-secret'), 'private.txt')
    fs.writeFileSync(secret, 'TOPSECRET-0123456789 not json')
    fs.symlinkSync(secret, path.join(dir, 'threads', id, 'cancel.requested'))
    const run = host(dir, 'run')
    expect(run.status, run.stderr).toBe(0)
    const log = fs.readFileSync(path.join(dir, 'requests.log.jsonl'), 'utf8')
    // Before the fix the JSON parse error quoted the file: "TOPSECRET-0"... in the log and the transcript.
    expect(log).not.toContain('TOPSECRET')
    expect(log).toContain('symbolic link')
    expect(fs.readFileSync(secret, 'utf8')).toBe('TOPSECRET-0123456789 not json')
  })

  it('should not write through a symlink planted at the temp name of an atomic write', () => {
    const dir = tempDir('spindle-hostile-temp')
    const victim = path.join(dir, 'victim.txt')
    fs.writeFileSync(victim, 'keep me')
    const file = path.join(dir, 'cancel.requested')
    // The old temp names were `<file>.tmp-<pid>-<n>`: a counter from 1, so easily planted.
    for (let n = 1; n <= 2000; n++) fs.symlinkSync(victim, `${file}.tmp-${process.pid}-${n}`)
    writeFileAtomicSync(file, '{"nonce":"x"}\n', { fsync: false })
    expect(fs.readFileSync(victim, 'utf8')).toBe('keep me')
    expect(fs.readFileSync(file, 'utf8')).toBe('{"nonce":"x"}\n')
  })
})

describe("a thread's own files replaced by a FIFO", () => {
  // 3 threads: each store reads its files itself; 300: the recovery's read-ahead worker reads them first.
  for (const count of [3, 300]) {
    it(`should fail or rebuild that thread instead of blocking recovery forever (${count} threads left by a kill)`, () => {
      const dir = tempDir('spindle-hostile-fifo-files')
      spawnSync(process.execPath, [compiled('test/bench/workload.js'), 'leave', dir, String(count)], { encoding: 'utf8', timeout: 60_000 })
      const ids = fs.readdirSync(path.join(dir, 'threads')).sort()
      expect(ids).toHaveLength(count)
      const [stateFifo, transcriptFifo] = ids as [string, string]
      for (const [id, file] of [[stateFifo, 'state.json'], [transcriptFifo, 'transcript.jsonl']] as const) {
        fs.renameSync(path.join(dir, 'threads', id, file), path.join(dir, 'threads', id, `${file}.moved`))
        expect(spawnSync('mkfifo', [path.join(dir, 'threads', id, file)]).status).toBe(0)
      }
      // Before the fix, opening (or reading) the FIFO blocked the recovering process for good.
      const run = host(dir, 'run', 30_000)
      expect(run.error, 'the host process hung on a FIFO').toBeUndefined()
      expect(run.status, run.stderr).toBe(0)
      const rows = new Map((JSON.parse(run.stdout) as Array<{ id: string; status: string; error: { message: string } | null }>).map((r) => [r.id, r]))
      // The state.json FIFO is damaged state: rebuilt from the transcript, and the thread carries on.
      expect(rows.get(stateFifo)).toMatchObject({ status: 'completed' })
      expect(fs.statSync(path.join(dir, 'threads', stateFifo, 'state.json')).isFile()).toBe(true)
      // Without its transcript the thread cannot go on: it fails, naming the file; nothing else does.
      expect(rows.get(transcriptFifo)).toMatchObject({
        status: 'error',
        error: { message: expect.stringMatching(/transcript\.jsonl is a FIFO, socket or device, not a file/) },
      })
      expect([...rows.values()].filter((r) => r.status !== 'completed').map((r) => r.id)).toEqual([transcriptFifo])
    })
  }
})

describe('thread text printed to a terminal', () => {
  it('should print control characters from a result or a directive name escaped, in show, tree and logs', async () => {
    const dir = tempDir('spindle-hostile-ansi')
    const evil = 'done\u001b]52;c;ZWNobyBwd25lZA==\u0007\u001b[2J\u009b31m\roverwritten'
    const rt = await createRuntime({ dir, model: scriptedModel(() => ({ text: evil })) })
    const thread = await rt.spawn({ directive: { name: 'evil\u001b]0;title\u0007', prompt: 'p' } })
    await thread.done
    await rt.close()
    const commands = [['show', thread.id], ['tree'], ['logs', thread.id], ['logs', thread.id, '--json'], ['show', thread.id, '--json']]
    const runs = await Promise.all(commands.map((args) => spindleAsync(...args, '--dir', dir)))
    runs.forEach((run, i) => {
      expect(run.code, run.stderr).toBe(0)
      // eslint-disable-next-line no-control-regex
      expect(run.stdout, commands[i]!.join(' ')).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/)
    })
    expect(runs[0]!.stdout).toContain('done\\u001b]52;c;')
    // JSON stays JSON, with the same text in it.
    expect(JSON.parse(runs[4]!.stdout).state.context.result).toBe(evil)
  })
})

describe('directive templates', () => {
  it("should refuse {{constructor}} and an input named after Object.prototype's keys as undeclared", () => {
    const dir = tempDir('spindle-hostile-directive')
    const file = path.join(dir, 'proto.md')
    fs.writeFileSync(file, '---\nname: proto\ninput:\n  topic: { type: string }\n---\nAbout {{topic}}: {{constructor}}\n')
    expect(() => loadDirectiveFile(file)).toThrow(/\{\{constructor\}\}, which is not declared/)
    fs.writeFileSync(file, '---\nname: proto\ninput:\n  topic: { type: string }\n---\nAbout {{topic}}\n')
    const directive = loadDirectiveFile(file)
    expect(() => renderDirective(directive, { topic: 'otters', toString: 'x' })).toThrow(/unknown input "toString"/)
    const run = spindle('run', file, '--input', 'topic=otters', '--input', '__proto__=x', '--dir', dir)
    expect(run.status).toBe(3)
    expect(run.stderr).toContain('unknown input "__proto__"')
  })
})
