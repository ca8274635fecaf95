/**
 * The operator commands as a person runs them: real child processes on a real data directory.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel, verifyReplay } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

let dir: string
let done: string
let suspended: string

beforeAll(async () => {
  dir = tempDir('spindle-cli')
  const rt = await createRuntime({
    dir,
    model: scriptedModel((r) => (r.directiveName === 'loop' ? { toolCalls: [{ name: 'nope', input: {} }] } : { text: 'answer' })),
  })
  const a = await rt.spawn({ directive: { name: 'answer', prompt: 'p' } })
  const b = await rt.spawn({ directive: { name: 'loop', prompt: 'p', permissions: { network: false } }, limits: { turns: 2 } })
  await Promise.all([a.done, b.done])
  await rt.close()
  done = a.id
  suspended = b.id
})

describe('spindle ls', () => {
  it('should write all of a listing larger than a pipe holds (64 KiB) before it exits', async () => {
    const many = tempDir('spindle-cli-many')
    const rt = await createRuntime({ dir: many, model: scriptedModel((r) => ({ text: `answer of ${r.threadId}`.repeat(4) })), durability: 'process' })
    await Promise.all((await Promise.all(Array.from({ length: 300 }, (_, i) => rt.spawn({ directive: { name: `t${i}`, prompt: 'p' } })))).map((t) => t.done))
    await rt.close()
    const run = spindle('ls', '--dir', many, '--json')
    expect(run.code).toBe(0)
    expect(run.stdout.length).toBeGreaterThan(65_536)
    expect(JSON.parse(run.stdout)).toHaveLength(300)
  })

  it('should list every thread as JSON', () => {
    const run = spindle('ls', '--dir', dir, '--json')
    expect(run.code).toBe(0)
    const rows = JSON.parse(run.stdout) as Array<{ id: string; status: string }>
    expect(rows.map((r) => [r.id, r.status]).sort()).toEqual([[done, 'completed'], [suspended, 'suspended']].sort())
  })

  it('should filter by status', () => {
    const rows = JSON.parse(spindle('ls', '--dir', dir, '--status', 'suspended', '--json').stdout) as Array<{ id: string }>
    expect(rows.map((r) => r.id)).toEqual([suspended])
  })

  it('should refuse an unknown status with exit code 3', () => {
    const run = spindle('ls', '--dir', dir, '--status', 'sleeping')
    expect(run.code).toBe(3)
    expect(run.stderr).toContain('"sleeping" is not a thread status')
  })
})

describe('spindle show and logs', () => {
  it('should show a suspended thread with its limit', () => {
    const report = JSON.parse(spindle('show', suspended, '--dir', dir, '--json').stdout)
    expect(report.record.status).toBe('suspended')
    expect(report.state.context.limitHit).toMatchObject({ limit: 'turns', used: 2, max: 2, proposed: 4 })
    expect(report.problems).toEqual([])
    const text = spindle('show', suspended, '--dir', dir).stdout
    expect(text).toMatch(/^suspended   at its turns limit \(2 of 2\), waiting for a person$/m)
    expect(text).toMatch(/^permissions network: false$/m)
  })

  it('should print the verified transcript as JSON lines', () => {
    const lines = spindle('logs', done, '--dir', dir, '--json').stdout.trim().split('\n').map((l) => JSON.parse(l))
    expect(lines.map((e) => e.seq)).toEqual(lines.map((_, i) => i + 1))
    expect(lines[0].type).toBe('thread_spawned')
    expect(lines.at(-1).type).toBe('MODEL_REPLIED')
  })

  it('should mark a line it cuts at 120 characters and say once how to see every entry whole', () => {
    // Issue 22: lines were cut without a mark.
    const run = spindle('logs', done, '--dir', dir)
    expect(run.code).toBe(0)
    const lines = run.stdout.trimEnd().split('\n')
    const entries = lines.filter((l) => /^ +\d+  /.test(l))
    const cut = entries.filter((l) => l.endsWith('…'))
    // The spawn entry carries the whole directive: always longer than a line.
    expect(cut.length).toBeGreaterThan(0)
    for (const line of cut) expect(/^ *\d+ {2}\S+ {2}\S+ +(\S.*)$/.exec(line)![1]).toHaveLength(120)
    expect(lines.filter((l) => l.includes('prints every entry whole'))).toEqual([
      `(lines ending in … are cut at 120 characters: \`spindle logs ${done} --dir ${dir} --json\` prints every entry whole)`,
    ])
  })

  it('should exit 4 for an unknown thread and 3 for an id that is not an id', () => {
    expect(spindle('show', 'ghost-aaaaaaaaaaaa', '--dir', dir).code).toBe(4)
    expect(spindle('logs', '../../etc/passwd', '--dir', dir).code).toBe(3)
  })

  it('should exit 2 for an unknown command', () => {
    expect(spindle('frobnicate').code).toBe(2)
  })

  it('should exit 2 for a usage error inside a command: a missing argument, an unknown option, a missing required option', () => {
    // Before the fix commander exited 1 (an unexpected failure) for each of these.
    expect(spindle('show').code).toBe(2)
    expect(spindle('ls', '--dir', dir, '--frobnicate').code).toBe(2)
    expect(spindle('orphans', 'recover', done, '--dir', dir).code).toBe(2)
    expect(spindle('show', '--help').code).toBe(0)
  })

  it('should exit 3 for a number option that is not a whole number, instead of running with NaN', () => {
    // Before the fix `logs --after x` printed nothing and exited 0, `demo --latency x` ran with NaN.
    const after = spindle('logs', done, '--dir', dir, '--after', 'x')
    expect(after.stderr).toContain('--after must be a whole number')
    expect(after.code).toBe(3)
    expect(spindle('demo', '--dir', tempDir('spindle-cli-latency'), '--latency', '-5').code).toBe(3)
    expect(spindle('inspect', '--dir', dir, '--port', 'http').code).toBe(3)
    expect(spindle('logs', done, '--dir', dir, '--after', '1', '--json').stdout.trim().split('\n')[0]).toContain('"seq":2')
  })
})

describe('spindle rebuild', () => {
  it('should find a damaged state.json, leave it alone without --apply, and restore it with --apply', () => {
    const file = path.join(dir, 'threads', done, 'state.json')
    const good = JSON.parse(fs.readFileSync(file, 'utf8'))
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').slice(0, 50))

    const dry = spindle('rebuild', done, '--dir', dir, '--json')
    expect(dry.code).toBe(5)
    expect(JSON.parse(dry.stdout)).toMatchObject({ matches: false, applied: false, stored: { problem: { code: 'STATE_CORRUPT' } } })
    expect(fs.readFileSync(file, 'utf8').length).toBe(50)

    const apply = spindle('rebuild', done, '--dir', dir, '--apply')
    expect(apply.code).toBe(0)
    expect(apply.stdout).toContain('rewritten')
    expect(JSON.parse(fs.readFileSync(file, 'utf8')).snapshot).toEqual(good.snapshot)
    expect(verifyReplay(dir, done).matches).toBe(true)
    expect(spindle('rebuild', done, '--dir', dir).code).toBe(0)
  })

  it('should refuse --apply (exit 9, THREAD_LEASED) while a live runtime runs the thread, and write nothing', async () => {
    const busy = tempDir('spindle-cli-rebuild-live')
    const rt = await createRuntime({ dir: busy, model: scriptedModel([{ text: 'late' }], { latencyMs: 60_000 }) })
    const thread = await rt.spawn({ directive: { name: 'slow', prompt: 'p' } })
    thread.done.catch(() => {})
    const file = path.join(busy, 'threads', thread.id, 'state.json')
    await new Promise((resolve) => setTimeout(resolve, 300))
    const before = fs.readFileSync(file, 'utf8')
    try {
      const apply = spindle('rebuild', thread.id, '--dir', busy, '--apply')
      expect(apply.stderr).toContain('THREAD_LEASED')
      expect(apply.code).toBe(9)
      expect(fs.readFileSync(file, 'utf8')).toBe(before)
      // Without --apply it only reads: allowed.
      expect(spindle('rebuild', thread.id, '--dir', busy).code).toBe(0)
    } finally {
      await rt.close()
    }
  })
})

describe('spindle logs --follow', () => {
  it('should print entries as a running thread records them and stop when it stops', async () => {
    const followDir = tempDir('spindle-follow')
    const rt = await createRuntime({
      dir: followDir,
      model: scriptedModel((r) => (r.turn < 4 ? { toolCalls: [{ name: 'none', input: {} }] } : { text: 'end' }), { latencyMs: 150 }),
    })
    const thread = await rt.spawn({ directive: { name: 'followed', prompt: 'p' } })
    const { spawn } = await import('node:child_process')
    const child = spawn(process.execPath, [compiled('src/cli.js'), 'logs', thread.id, '--dir', followDir, '--follow', '--json'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let printed = ''
    child.stdout.on('data', (d: Buffer) => (printed += d))
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve))
    await thread.done
    await rt.close()
    expect(await exited).toBe(0)
    const seqs = printed.trim().split('\n').map((l) => JSON.parse(l).seq as number)
    // Every entry exactly once, in order, including those recorded after following began.
    expect(seqs).toEqual(seqs.map((_, i) => i + 1))
    expect(JSON.parse(printed.trim().split('\n').at(-1)!).type).toBe('MODEL_REPLIED')
  })
})
