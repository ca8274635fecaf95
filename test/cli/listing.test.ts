/**
 * Issue 22: what `spindle ls` and the other commands that print registry rows show. A thread
 * killed mid-run is listed as its last checkpoint has it, not as the spawn left its row; a
 * suspended thread says why it waits; and the nonce, the secret a request file must carry, is
 * printed nowhere. Real host processes, SIGKILL, the compiled CLI.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { startInspector } from '../../src/operator/inspector.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function host(dir: string, mode: 'limit' | 'run'): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, mode], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

function stateJson(dir: string, id: string): { savedAt: string; snapshot: { context: { usage: { turns: number; spend: number } } } } | null {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'threads', id, 'state.json'), 'utf8'))
  } catch {
    return null
  }
}

function registryRow(dir: string, id: string) {
  const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
  try {
    return registry.get(id)!
  } finally {
    registry.close()
  }
}

describe('spindle ls', () => {
  it('should list a thread killed mid-run with the turns, spend and time of its last checkpoint', async () => {
    const dir = tempDir('spindle-ls-crash')
    // Two turns, then a model call that never answers; killed once its checkpoint has both turns.
    const child = spawn(process.execPath, [compiled('test/cli/hostWorker.js'), dir, 'hang'], { stdio: ['ignore', 'pipe', 'inherit'] })
    const id = await new Promise<string>((resolve) => {
      let printed = ''
      child.stdout.on('data', (d: Buffer) => (printed += d).includes('\n') && resolve(printed.trim()))
    })
    while ((stateJson(dir, id)?.snapshot.context.usage.turns ?? 0) < 2) await new Promise((resolve) => setTimeout(resolve, 50))
    child.kill('SIGKILL')
    await new Promise((resolve) => child.on('exit', resolve))
    const checkpoint = stateJson(dir, id)!
    // The row as the registry keeps it dates from the thread's start.
    expect(registryRow(dir, id).updatedAt).toBeLessThan(Date.parse(checkpoint.savedAt))

    const [listed] = JSON.parse(spindle('ls', '--dir', dir, '--json').stdout)
    // A row's cost is the totals; the checkpoint also keeps them per model.
    const { byModel: _perModel, ...totals } = checkpoint.snapshot.context.usage as { byModel?: unknown; turns: number; spend: number }
    expect(listed).toMatchObject({ id, status: 'running', updatedAt: Date.parse(checkpoint.savedAt), cost: totals })
    const text = spindle('ls', '--dir', dir).stdout
    expect(text).toMatch(new RegExp(`^${id} +running +${checkpoint.snapshot.context.usage.turns} .*${checkpoint.savedAt}$`, 'm'))
  })

  it('should say why a suspended thread waits, in text and JSON', () => {
    const dir = tempDir('spindle-ls-reason')
    const id = host(dir, 'limit')
    expect(JSON.parse(spindle('ls', '--dir', dir, '--json').stdout)).toEqual([expect.objectContaining({ id, status: 'suspended', suspendReason: 'limit' })])
    expect(spindle('ls', '--dir', dir).stdout).toMatch(new RegExp(`^${id} +suspended \\(limit\\) `, 'm'))
  })

  it('should print no thread nonce in ls, show, tree, orphans or the inspector', async () => {
    const dir = tempDir('spindle-ls-nonce')
    const id = host(dir, 'limit')
    const { nonce } = registryRow(dir, id)
    expect(nonce.length).toBeGreaterThan(8)
    for (const args of [['ls'], ['ls', '--json'], ['show', id], ['show', id, '--json'], ['tree', '--json'], ['orphans', '--json'], ['logs', id, '--json']]) {
      const run = spindle(...args, '--dir', dir)
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(0)
      expect(run.stdout, args.join(' ')).not.toContain(nonce)
      expect(run.stdout, args.join(' ')).not.toContain('"nonce"')
    }
    const inspector = await startInspector({ dir })
    try {
      const overview = await (await fetch(new URL(`/api/overview?token=${inspector.token}`, inspector.url))).text()
      expect(overview).toContain(id)
      expect(overview).not.toContain(nonce)
    } finally {
      await inspector.close()
    }
  })
})
