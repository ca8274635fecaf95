/**
 * The main job: `spindle demo`, killed with SIGKILL half way and started again, resumes and says so.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'

describe('spindle demo', () => {
  it('should resume after kill -9, say so, and finish every thread', async () => {
    const dir = tempDir('spindle-demo')
    const cli = compiled('src/cli.js')
    // Slow enough to be killed part way: six threads, six turns, ~300 ms a model call.
    const first = spawn(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '300'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let printed = ''
    await new Promise<void>((resolve) => {
      first.stdout.on('data', (d: Buffer) => {
        printed += d
        // Kill once some thread has finished a turn or two.
        if (/turn=2/.test(printed)) resolve()
      })
    })
    first.kill('SIGKILL')
    await new Promise((resolve) => first.on('exit', resolve))
    expect(printed).not.toContain('Done:')

    const second = spawnSync(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '5'], { encoding: 'utf8' })
    expect(second.status).toBe(0)
    // Recovery shows its progress (plain lines off a terminal), then says what it did.
    const total = Number(second.stdout.match(/^recovering 0\/(\d+) unfinished threads; \$0\.\d{5} spent so far$/m)?.[1])
    expect(total).toBeGreaterThan(0)
    expect(second.stdout).toMatch(new RegExp(`^recovering ${total}/${total} unfinished threads: \\d+ resumed[^;]*; \\$\\d+\\.\\d{5} spent so far$`, 'm'))
    expect(second.stdout).toMatch(/^Resumed \d+ unfinished threads? /m)
    // Threads by status and spend so far, each time a thread's status changes.
    expect(second.stdout).toMatch(/^threads: (\d+ \w+, )*\d+ completed(, \d+ \w+)*; \$\d+\.\d{5} spent$/m)
    const done = second.stdout.slice(second.stdout.indexOf('Done:'))
    expect(done.match(/ completed /g)).toHaveLength(3)
    // Three wait for a person: at a turn limit, at a tool call that needs approval, at a question.
    expect(done).toContain('suspended (limit)')
    expect(done).toContain('suspended (tool_approval)')
    expect(done).toContain('suspended (waiting)')
    expect(done).toMatch(/^demo-aurora-\S+ waits for a person to approve its publish call .*: spindle approve demo-aurora-/m)
    expect(done).toMatch(/^demo-volcanoes-\S+ asks a person: "Which volcano should the summary lead with\?" \(Etna, Kilauea, Fuji\): spindle answer demo-volcanoes-\S+ Etna /m)
  })

  it('should account for threads that ended before a kill, and carry on one approved while it was stopped', async () => {
    const dir = tempDir('spindle-demo-approve')
    const cli = compiled('src/cli.js')
    const first = spawn(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '40'], { stdio: ['ignore', 'pipe', 'pipe'] })
    let printed = ''
    await new Promise<void>((resolve) => {
      first.stdout.on('data', (d: Buffer) => {
        printed += d
        // Killed once one thread has completed and coral is waiting at its turn limit.
        if (/completed turn=6/.test(printed) && /demo-coral-\S+ suspended/.test(printed)) resolve()
      })
    })
    first.kill('SIGKILL')
    await new Promise((resolve) => first.on('exit', resolve))
    const coral = printed.match(/(demo-coral-\S+) suspended/)![1]!

    const second = spawnSync(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '5'], { encoding: 'utf8' })
    expect(second.status).toBe(0)
    const done = second.stdout.slice(second.stdout.indexOf('Done:'))
    // Every one of the six threads is accounted for: the ones this run finished, and the rest.
    const finishedNow = done.split('\n').filter((line) => /^  demo-\S+ +completed /.test(line)).length
    const before = done.match(/^  and, stopped before this run: (?:(\d+) suspended, )?(\d+) completed; /m)
    expect(before).not.toBeNull()
    expect(Number(before![1] ?? 0) + Number(before![2]) + finishedNow).toBe(6)
    expect(done).toContain(`${coral} waits for a person at its limit: spindle approve ${coral} --dir ${dir}, then run the demo again.`)

    // A person answers all three from the shell while no demo runs.
    const aurora = done.match(/^(demo-aurora-\S+) waits for a person/m)![1]!
    const volcanoes = done.match(/^(demo-volcanoes-\S+) asks a person/m)![1]!
    for (const args of [
      ['approve', coral],
      ['approve', aurora, '--input', '{"title":"Aurora","text":"edited by a person"}'],
      ['answer', volcanoes, 'Kilauea'],
    ]) {
      const answered = spawnSync(process.execPath, [cli, ...args, '--dir', dir], { encoding: 'utf8' })
      expect(answered.status, answered.stderr).toBe(0)
    }
    const third = spawnSync(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '5'], { encoding: 'utf8' })
    expect(third.status).toBe(0)
    expect(third.stdout).toMatch(/^Resumed 0 unfinished threads from .*; carried on 3 approved, answered or resumed while the demo was stopped/m)
    const last = third.stdout.slice(third.stdout.indexOf('Done:'))
    expect(last).toMatch(new RegExp(`^  ${coral} +completed `, 'm'))
    expect(last).toMatch(new RegExp(`^  ${volcanoes} +completed .*leading with Kilauea\\.$`, 'm'))
    expect(last).toMatch(/^  and, stopped before this run: 3 completed; /m)
    expect(last).not.toContain('waits for a person')
    expect(fs.readFileSync(path.join(dir, 'published.txt'), 'utf8')).toBe('Aurora\tedited by a person\n')
  })

  it('should refuse to start beside a live demo on the same directory, naming what holds it', async () => {
    const dir = tempDir('spindle-demo-twice')
    const cli = compiled('src/cli.js')
    const first = spawn(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '2000'], { stdio: ['ignore', 'pipe', 'pipe'] })
    try {
      let printed = ''
      await new Promise<void>((resolve) => first.stdout.on('data', (d: Buffer) => (printed += d) && /turn=0/.test(printed) && resolve()))
      const second = spawnSync(process.execPath, [cli, 'demo', '--dir', dir, '--latency', '5'], { encoding: 'utf8' })
      expect(second.status).toBe(9)
      expect(second.stderr).toContain('THREAD_LEASED')
      expect(second.stderr).toContain('run by another live spindle process')
      expect(second.stdout).not.toContain('Starting')
    } finally {
      first.kill('SIGKILL')
    }
  })
})
