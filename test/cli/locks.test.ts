/**
 * `spindle locks` and the doctor's ledger and lease checks, run as real child processes against a
 * data directory that a real runtime process left behind.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it, onTestFinished } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'
import { pidAlive } from '../../src/base/processes.js'
import { createRuntime, scriptedModel } from '../../src/index.js'

function spindle(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

/** A runtime process running 3 long threads with a long lease; resolves once they are spawned. */
async function runtimeProcess(dir: string) {
  const child = spawn(process.execPath, [compiled('test/crash/leaseWorker.js'), dir, 'spawn', '3', '100000', '600000'], { stdio: ['ignore', 'pipe', 'pipe'] })
  // Its threads run for a long time: killed when the test ends, passed or failed.
  onTestFinished(() => {
    child.kill('SIGKILL')
  })
  let out = ''
  child.stdout.on('data', (d) => (out += d))
  child.stderr.on('data', (d) => (out += d))
  const exited = new Promise((resolve) => child.on('exit', resolve))
  for (let i = 0; i < 400 && !out.includes('spawned'); i++) await new Promise((r) => setTimeout(r, 25))
  expect(out).toContain('spawned')
  return { child, exited }
}

describe('a dead lease holder', () => {
  it('should count a killed process that nobody reaped (a zombie) as dead', async () => {
    // `sh` starts a short sleep, then becomes a long sleep that never waits for it: once the short
    // one exits it stays a zombie, which still answers signal 0.
    const parent = spawn('sh', ['-c', 'sleep 0.1 & echo $!; exec sleep 10'], { stdio: ['ignore', 'pipe', 'ignore'] })
    try {
      const pid = Number(await new Promise<string>((resolve) => parent.stdout.once('data', (d: Buffer) => resolve(String(d).trim()))))
      expect(pidAlive(pid)).toBe(true)
      for (let i = 0; i < 100 && fs.readFileSync(`/proc/${pid}/stat`, 'latin1').split(') ')[1]![0] !== 'Z'; i++) await new Promise((r) => setTimeout(r, 20))
      expect(() => process.kill(pid, 0)).not.toThrow()
      expect(pidAlive(pid)).toBe(false)
      expect(pidAlive(process.pid)).toBe(true)
    } finally {
      parent.kill('SIGKILL')
    }
  })
})

describe('spindle locks', () => {
  it('should list the leases of a process killed with SIGKILL as stale, and reclaim them with --apply, logging each', async () => {
    const dir = tempDir('spindle-locks')
    const worker = await runtimeProcess(dir)
    worker.child.kill('SIGKILL')
    await worker.exited

    const listed = spindle('locks', '--dir', dir, '--json')
    expect(listed.code, listed.stderr).toBe(0)
    const report = JSON.parse(listed.stdout)
    expect(report.locks).toHaveLength(3)
    for (const lock of report.locks) expect(lock).toMatchObject({ state: 'dead_owner', pid: worker.child.pid, token: 1 })
    expect(report.reclaimed).toEqual([])

    // The doctor sees them too, as lag (a runtime would take the threads over), not damage.
    const doctor = spindle('doctor', '--dir', dir, '--json')
    expect(doctor.code, doctor.stdout).toBe(0)
    const stale = JSON.parse(doctor.stdout).findings.filter((f: { code: string }) => f.code === 'STALE_LEASE')
    expect(stale).toHaveLength(3)
    for (const finding of stale) expect(finding.repair).toContain('takes the thread over by itself')

    // A thread without a registry row (a spawn that never returned) is taken over by nobody: the
    // doctor says so instead of promising a takeover.
    const db = new Database(path.join(dir, 'registry.db'))
    db.prepare('DELETE FROM threads WHERE id = ?').run(stale[0].threadId)
    db.close()
    const rowless = JSON.parse(spindle('doctor', '--dir', dir, '--json').stdout).findings.find(
      (f: { code: string; threadId: string }) => f.code === 'STALE_LEASE' && f.threadId === stale[0].threadId,
    )
    expect(rowless.repair).toContain('no runtime takes it over')

    const applied = JSON.parse(spindle('locks', '--dir', dir, '--apply', '--json').stdout)
    expect(applied.reclaimed).toHaveLength(3)
    const log = fs.readFileSync(path.join(dir, 'locks.log.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    expect(log.map((e) => [e.action, e.state, e.forced])).toEqual([
      ['reclaimed', 'dead_owner', false],
      ['reclaimed', 'dead_owner', false],
      ['reclaimed', 'dead_owner', false],
    ])
    expect(JSON.parse(spindle('locks', '--dir', dir, '--json').stdout).locks).toEqual([])
  }, 60_000)

  it('should never take a live lease without --force', async () => {
    const dir = tempDir('spindle-locks-live')
    const worker = await runtimeProcess(dir)
    try {
      const kept = JSON.parse(spindle('locks', '--dir', dir, '--apply', '--json').stdout)
      expect(kept.reclaimed).toEqual([])
      expect(kept.kept.map((l: { state: string }) => l.state)).toEqual(['live', 'live', 'live'])
      expect(fs.existsSync(path.join(dir, 'locks.log.jsonl'))).toBe(false)
      expect(spindle('locks', '--dir', dir, '--force').code).toBe(3)

      const forced = JSON.parse(spindle('locks', '--dir', dir, '--apply', '--force', '--json').stdout)
      expect(forced.reclaimed).toHaveLength(3)
      const log = fs.readFileSync(path.join(dir, 'locks.log.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
      expect(log.every((e) => e.forced === true && e.action === 'revoked')).toBe(true)
      // Revoked, not freed: the live owner may still be writing until its next heartbeat, so a
      // runtime opened now must not run those threads too (it would run their tools twice).
      const other = await createRuntime({ dir, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), userConfig: null })
      try {
        expect(other.lastRecovery.resumed).toEqual([])
        expect(other.lastRecovery.elsewhere).toHaveLength(3)
      } finally {
        await other.close()
      }
    } finally {
      worker.child.kill('SIGKILL')
      await worker.exited
    }
  }, 60_000)
})

describe('spindle doctor and the ledger', () => {
  it('should report a budget account whose balance does not add up, and exit 5', async () => {
    const dir = tempDir('spindle-doctor-ledger')
    const setup = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `import { createRuntime, scriptedModel } from ${JSON.stringify(compiled('src/index.js'))}
         const rt = await createRuntime({ dir: ${JSON.stringify(dir)}, model: scriptedModel([{ text: 'done', usage: { inputTokens: 1, outputTokens: 1, cost: 0.1 } }]) })
         const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p' }, limits: { spend: 1 } })
         await parent.done
         await rt.close()`,
      ],
      { encoding: 'utf8' },
    )
    expect(setup.status, setup.stderr).toBe(0)
    expect(spindle('doctor', '--dir', dir).code).toBe(0)
    const raw = new Database(path.join(dir, 'ledger.db'))
    raw.prepare('UPDATE accounts SET spent_spend = spent_spend + 5').run()
    raw.close()
    const doctor = spindle('doctor', '--dir', dir, '--json')
    expect(doctor.code).toBe(5)
    expect(JSON.parse(doctor.stdout).findings).toEqual([expect.objectContaining({ kind: 'damage', code: 'LEDGER_MISMATCH' })])
  })
})

describe('spindle orphans', () => {
  it('should list the threads of a killed process as orphans and settle each as the operator says', async () => {
    const dir = tempDir('spindle-orphans')
    const worker = await runtimeProcess(dir)
    worker.child.kill('SIGKILL')
    await worker.exited

    const scan = spindle('orphans', '--dir', dir, '--json')
    expect(scan.code, scan.stderr).toBe(0)
    const orphans = JSON.parse(scan.stdout) as Array<{ id: string; why: string; status: string }>
    expect(orphans).toHaveLength(3)
    // The registry may still say `created` for the last one: its `running` was not yet committed when the kill came.
    for (const o of orphans) expect(o).toMatchObject({ why: 'dead_owner', status: expect.stringMatching(/^(created|running)$/) })
    const [a, b, c] = orphans.map((o) => o.id)

    const failed = spindle('orphans', 'recover', a!, '--action', 'mark_error', '--reason', 'its input was wrong', '--dir', dir, '--json')
    expect(failed.code, failed.stderr).toBe(0)
    expect(JSON.parse(failed.stdout)).toMatchObject({ status: 'error', error: { code: 'ORPHAN_MARKED', message: 'its input was wrong.' } })
    const cancelled = JSON.parse(spindle('orphans', 'recover', b!, '--action', 'mark_cancelled', '--dir', dir, '--json').stdout)
    expect(cancelled).toMatchObject({ status: 'cancelled' })
    const resumed = JSON.parse(spindle('orphans', 'recover', c!, '--action', 'resume', '--dir', dir, '--json').stdout)
    expect(resumed).toMatchObject({ threadId: c, leaseFreed: true })

    const left = JSON.parse(spindle('orphans', '--dir', dir, '--json').stdout) as Array<{ id: string; why: string }>
    expect(left).toEqual([expect.objectContaining({ id: c, why: 'no_lease' })])
    // A thread that is no orphan any more is refused.
    expect(spindle('orphans', 'recover', a!, '--action', 'mark_error', '--dir', dir).code).toBe(6)
    for (const id of [a!, b!]) {
      const replay = spawnSync(process.execPath, ['--input-type=module', '-e', `import { verifyReplay } from ${JSON.stringify(compiled('src/index.js'))}; process.stdout.write(String(verifyReplay(${JSON.stringify(dir)}, ${JSON.stringify(id)}).matches))`], { encoding: 'utf8' })
      expect(replay.stdout, replay.stderr).toBe('true')
    }
  }, 60_000)
})
