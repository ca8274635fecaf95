/**
 * `spindle doctor` finds each kind of planted damage, names the thread and says how to repair it.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function doctor(dir: string): { code: number | null; report: { threads: number; findings: Array<{ threadId: string; kind: string; code: string; message: string; repair: string }> } } {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), 'doctor', '--dir', dir, '--json'], { encoding: 'utf8' })
  return { code: run.status, report: JSON.parse(run.stdout) }
}

async function fiveCompletedThreads(dir: string): Promise<string[]> {
  const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'done' }]) })
  const threads = await Promise.all([1, 2, 3, 4, 5].map((i) => rt.spawn({ directive: { name: `t${i}`, prompt: 'p' } })))
  await Promise.all(threads.map((t) => t.done))
  await rt.close()
  return threads.map((t) => t.id)
}

describe('spindle doctor', () => {
  it('should report a healthy directory as healthy', async () => {
    const dir = tempDir('spindle-doctor')
    await fiveCompletedThreads(dir)
    expect(doctor(dir)).toEqual({ code: 0, report: { threads: 5, findings: [] } })
  })

  it('should exit 5 (damaged data, not "not found") when threads/ is not a directory', async () => {
    const dir = tempDir('spindle-doctor')
    await fiveCompletedThreads(dir)
    fs.renameSync(path.join(dir, 'threads'), path.join(dir, 'threads.aside'))
    fs.writeFileSync(path.join(dir, 'threads'), '')
    const run = spawnSync(process.execPath, [compiled('src/cli.js'), 'doctor', '--dir', dir, '--json'], { encoding: 'utf8' })
    expect(run.stderr).toContain('DATA_DIR_INVALID')
    expect(run.status).toBe(5)
  })

  it('should report a thread that recoveries found at the same point twice in a row, as no damage (exit 0)', async () => {
    const dir = tempDir('spindle-doctor')
    const rt = await createRuntime({ dir, model: scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }]), userConfig: null })
    const [suspect, once] = await Promise.all(['suspect', 'once'].map((name) => rt.spawn({ directive: { name, prompt: 'p' } })))
    // A clean close leaves both where they stand: running, for the next runtime to carry on.
    await rt.close()
    // What two processes that each died running it on from seq 2 leave (a single death is no pattern).
    const registry = openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'process' })
    registry.setRecoveryCounts([
      { id: suspect!.id, count: 2, seq: 2 },
      { id: once!.id, count: 1, seq: 2 },
    ])
    registry.close()

    const { code, report } = doctor(dir)
    expect(code).toBe(0)
    expect(report.findings).toEqual([
      expect.objectContaining({ threadId: suspect!.id, kind: 'crash', code: 'RECOVERY_REPEATED', message: expect.stringContaining('(transcript seq 2) 2 times in a row') }),
    ])
  })

  it('should find each kind of planted damage and exit 5', async () => {
    const dir = tempDir('spindle-doctor')
    const [cut, chain, edited, registry, healthy] = await fiveCompletedThreads(dir)
    const file = (id: string, name: string) => path.join(dir, 'threads', id!, name)
    // 1. state.json cut short
    fs.writeFileSync(file(cut!, 'state.json'), fs.readFileSync(file(cut!, 'state.json'), 'utf8').slice(0, 30))
    // 2. a transcript line edited: the hash chain breaks
    const lines = fs.readFileSync(file(chain!, 'transcript.jsonl'), 'utf8').split('\n')
    lines[1] = lines[1]!.replace('"at":', '"at":1')
    fs.writeFileSync(file(chain!, 'transcript.jsonl'), lines.join('\n'))
    // 3. state.json valid JSON but not what the transcript says
    const envelope = JSON.parse(fs.readFileSync(file(edited!, 'state.json'), 'utf8'))
    envelope.snapshot.context.result = 'forged'
    fs.writeFileSync(file(edited!, 'state.json'), JSON.stringify(envelope))
    // 4. the registry disagrees with the thread's files
    const db = new Database(path.join(dir, 'registry.db'))
    db.prepare("UPDATE threads SET status = 'cancelled' WHERE id = ?").run(registry)
    db.close()
    // 5. a thread directory without a registry row
    fs.mkdirSync(path.join(dir, 'threads', 'stray-aaaaaaaaaaaa'))
    // 6. the directory's config.yaml no longer parses: no runtime would open it
    fs.writeFileSync(path.join(dir, 'config.yaml'), 'limits:\n  turns: [unclosed\n')

    const { code, report } = doctor(dir)
    expect(code).toBe(5)
    const found = report.findings.map((f) => [f.threadId, f.code])
    expect(found).toEqual(
      expect.arrayContaining([
        [cut, 'STATE_CORRUPT'],
        [chain, 'TRANSCRIPT_CHAIN_BROKEN'],
        [edited, 'STATE_MISMATCH'],
        [registry, 'REGISTRY_MISMATCH'],
        ['stray-aaaaaaaaaaaa', 'UNREGISTERED_FILES'],
        ['(config)', 'CONFIG_INVALID'],
      ]),
    )
    expect(report.findings.some((f) => f.threadId === healthy)).toBe(false)
    expect(report.findings.find((f) => f.threadId === cut)?.repair).toBe(`spindle rebuild ${cut} --apply`)
  })

  it('should name a thread whose transcript lacks lines a stopped process journaled (a power loss), and none that holds them', async () => {
    const dir = tempDir('spindle-doctor')
    const [lost, kept] = await fiveCompletedThreads(dir)
    const transcript = (id: string) => path.join(dir, 'threads', id, 'transcript.jsonl')
    const size = fs.statSync(transcript(lost!)).size
    // A process appends to two transcripts, makes the lines durable through its journal only, and
    // is killed; the power loss then takes the first file's new lines.
    const child = spawnSync(process.execPath, [compiled('test/persistence/journalWorker.js'), dir, '3', lost!, kept!], { encoding: 'utf8' })
    expect(child.signal, child.stderr).toBe('SIGKILL')
    fs.truncateSync(transcript(lost!), size)

    const { report } = doctor(dir)
    const behind = report.findings.filter((f) => f.code === 'TRANSCRIPT_BEHIND_JOURNAL')
    expect(behind).toEqual([expect.objectContaining({ threadId: lost, kind: 'lag', repair: expect.stringContaining('Open a runtime') })])
  })
})
