/**
 * Recovery matrix row "killed right after `done`" (issue 22, item 7): `done` settles as soon as a
 * thread's end is as durable as the durability setting promises, not after a checkpoint round of
 * every running thread — so what it said must be what the files say when the host is killed with
 * SIGKILL in the very continuation that saw it, and, with `fsync`, after a power loss as well.
 *
 * Each row: a real host process runs 40 long threads and one short one and kills itself when the
 * short one's `done` resolves. What must hold: before any runtime opens the directory, the registry
 * row, state.json and transcript all say the outcome `done` reported; a runtime opening it then
 * reports the thread as it was and does not run it again.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { createRuntime, readThreadFiles, scriptedModel, verifyReplay } from '../../src/index.js'
import type { Durability } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { durableSizes } from './trackDurable.js'

interface Told {
  id: string
  status: string
  result: unknown
  turns: number
}

function runWorker(dir: string, durability: Durability, trackDurable: boolean): { told: Told; signal: NodeJS.Signals | null; stderr: string } {
  const run = spawnSync(process.execPath, [compiled('test/crash/doneKillWorker.js'), dir, durability], {
    encoding: 'utf8',
    env: { ...process.env, SPINDLE_TRACK_DURABLE: trackDurable ? '1' : '0' },
    timeout: 120_000,
  })
  const line = run.stdout.trim().split('\n').at(-1) ?? ''
  return { told: (line.startsWith('{') ? JSON.parse(line) : null) as Told, signal: run.signal, stderr: run.stderr }
}

/**
 * A power loss right after the kill: every transcript and journal file is cut back to the bytes a
 * completed fdatasync made durable (the worker recorded them). state.json and the registry were
 * fsynced before the rename and in the transaction that `done` waited for. Returns the files cut.
 */
function losePageCache(dir: string): number {
  const { durable } = durableSizes(fs.realpathSync(dir))
  const threads = path.join(dir, 'threads')
  const journal = path.join(dir, 'journal')
  const files = [
    ...fs.readdirSync(threads).map((id) => path.join(threads, id, 'transcript.jsonl')),
    ...(fs.existsSync(journal) ? fs.readdirSync(journal).map((name) => path.join(journal, name)) : []),
  ]
  let cut = 0
  for (const file of files) {
    if (!fs.existsSync(file)) continue
    const keep = durable.get(fs.realpathSync(file)) ?? 0
    if (fs.statSync(file).size <= keep) continue
    fs.truncateSync(file, keep)
    cut++
  }
  return cut
}

describe.each([
  ['fsync', false],
  ['process', false],
  ['fsync', true],
] as const)('a host killed with SIGKILL as a thread settles, durability %s, power loss %s', (durability, powerLoss) => {
  it('should keep the outcome done reported in the registry, state.json and transcript, and not run the thread again', async () => {
    const dir = tempDir('spindle-done-kill')
    const { told, signal, stderr } = runWorker(dir, durability, powerLoss)
    expect(signal, stderr).toBe('SIGKILL')
    expect(told).toMatchObject({ status: 'completed', result: 'short done after 3 turns', turns: 3 })
    // The others were still running: the power loss takes their undurable lines, not the short one's.
    if (powerLoss) expect(losePageCache(dir)).toBeGreaterThan(0)

    // Before any runtime opens the directory.
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability })
    const row = registry.get(told.id)
    registry.close()
    expect(row).toMatchObject({ status: 'completed', result: told.result })
    const { envelope, entries } = readThreadFiles(dir, told.id)
    expect(envelope?.status).toBe('completed')
    expect(envelope?.transcript.seq).toBe(entries.at(-1)!.seq)
    expect(verifyReplay(dir, told.id)).toMatchObject({ matches: true, checkpointFound: true, pendingEntries: 0 })

    // A runtime opening it: the thread is as it was, and not resumed. (The long threads are, and
    // hang in their model calls until it closes.)
    const rt = await createRuntime({ dir, durability, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), userConfig: null })
    try {
      expect(rt.lastRecovery.resumed).not.toContain(told.id)
      expect(rt.list().find((r) => r.id === told.id)).toMatchObject({ status: 'completed', result: told.result })
      expect(rt.active().map((t) => t.id)).not.toContain(told.id)
    } finally {
      await rt.close()
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }, 180_000)
})
