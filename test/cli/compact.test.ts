/**
 * `spindle rebuild --compact`: a deduplicated transcript that replays to the same snapshot, with
 * a fresh hash chain, the old file kept, and state.json pointing into the new one.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { anchorSetAside } from '../../persistence/anchorSetAside.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { createRuntime, scriptedModel, verifyReplay } from '../../src/index.js'
import { compactThread } from '../../src/operator/compact.js'
import { createTestRuntime } from '../../src/testing.js'
import { compiled } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

/** A thread suspended at its turn limit (one tool call made, the reply to it not yet asked for), then five repeated notes in its transcript. */
async function suspendedWithNotes(name: string): Promise<{ dir: string; thread: { id: string } }> {
  const rt = await createTestRuntime({ model: scriptedModel([{ toolCalls: [{ name: 'missing', input: {} }] }, { text: 'done' }]) })
  const thread = await rt.spawn({ directive: { name, prompt: 'p' }, limits: { turns: 1 } })
  expect((await thread.done).status).toBe('suspended')
  const dir = rt.dir
  await rt.close()
  const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'process' })
  store.open(thread.id)
  for (let i = 0; i < 5; i++) store.append(thread.id, 'operator_looked', { at: 1000 + i, by: 'ops' })
  store.closeAll()
  return { dir, thread }
}

describe('spindle rebuild --compact', () => {
  it('should drop repeated notes, keep every input, and leave a transcript that verifies and replays the same', async () => {
    const rt = await createTestRuntime({ model: scriptedModel([{ text: 'done' }]) })
    const thread = await rt.spawn({ directive: { name: 'noisy', prompt: 'p' } })
    await thread.done
    const dir = rt.dir
    await rt.close()
    // The same note written again and again (a reopened directory, a retried write).
    const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'process' })
    store.open(thread.id)
    for (let i = 0; i < 5; i++) store.append(thread.id, 'operator_looked', { at: 1000 + i, by: 'ops' })
    store.append(thread.id, 'operator_looked', { at: 2000, by: 'someone else' })
    store.closeAll()
    const before = fs.readFileSync(path.join(dir, 'threads', thread.id, 'transcript.jsonl'), 'utf8')

    const dry = JSON.parse(spindle('rebuild', thread.id, '--compact', '--dir', dir, '--json').stdout)
    expect(dry).toMatchObject({ dropped: { operator_looked: 4 }, applied: false })
    expect(fs.readFileSync(path.join(dir, 'threads', thread.id, 'transcript.jsonl'), 'utf8')).toBe(before)

    const applied = spindle('rebuild', thread.id, '--compact', '--apply', '--dir', dir)
    expect(applied.code, applied.stderr).toBe(0)
    expect(applied.stdout).toContain(`transcript compacted from ${dry.before} to ${dry.before - 4} entries`)
    const kept = fs.readdirSync(path.join(dir, 'threads', thread.id)).find((f) => f.startsWith('transcript.jsonl.pre-compact-'))!
    expect(fs.readFileSync(path.join(dir, 'threads', thread.id, kept), 'utf8')).toBe(before)
    const lines = fs.readFileSync(path.join(dir, 'threads', thread.id, 'transcript.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    expect(lines.map((l) => l.seq)).toEqual(lines.map((_, i) => i + 1))
    expect(lines.filter((l) => l.type === 'operator_looked').map((l) => l.data.by)).toEqual(['ops', 'someone else'])
    expect(verifyReplay(dir, thread.id).matches).toBe(true)
    expect(spindle('doctor', '--dir', dir).code).toBe(0)
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('should refuse to compact a transcript that lacks lines a stopped process journaled, and compact it once a runtime wrote them back', async () => {
    const rt = await createTestRuntime({ model: scriptedModel([{ text: 'done' }]) })
    const thread = await rt.spawn({ directive: { name: 'lost', prompt: 'p' } })
    await thread.done
    const dir = rt.dir
    await rt.close()
    const file = path.join(dir, 'threads', thread.id, 'transcript.jsonl')
    const size = fs.statSync(file).size
    // A process journals repeated notes and is killed; the power loss takes them from the file.
    const child = spawnSync(process.execPath, [compiled('test/persistence/journalWorker.js'), dir, '4', thread.id], { encoding: 'utf8' })
    expect(child.signal, child.stderr).toBe('SIGKILL')
    fs.truncateSync(file, size)

    const refused = spindle('rebuild', thread.id, '--compact', '--apply', '--dir', dir)
    expect(refused.code).toBe(9)
    expect(refused.stderr).toContain('TRANSCRIPT_BEHIND_JOURNAL')
    expect(fs.statSync(file).size).toBe(size)
    // Nor rebuilds its state.json, which would point past what it replayed once the lines are back.
    const state = fs.readFileSync(path.join(dir, 'threads', thread.id, 'state.json'))
    const rebuild = spindle('rebuild', thread.id, '--apply', '--dir', dir)
    expect(rebuild.code).toBe(9)
    expect(rebuild.stderr).toContain('TRANSCRIPT_BEHIND_JOURNAL')
    expect(fs.readFileSync(path.join(dir, 'threads', thread.id, 'state.json')).equals(state)).toBe(true)

    // A runtime opening the directory writes a stopped thread's lines back and drops the journal.
    const next = await createRuntime({ dir, model: scriptedModel([{ text: 'unused' }]) })
    await next.close()
    expect(fs.readdirSync(path.join(dir, 'journal'))).toEqual([])
    const entries = (): number => fs.readFileSync(file, 'utf8').trim().split('\n').length
    expect(entries()).toBe(7)
    const applied = spindle('rebuild', thread.id, '--compact', '--apply', '--dir', dir)
    expect(applied.code, applied.stderr).toBe(0)
    // The four notes came back and compacted to their first; the old file is kept beside.
    expect(entries()).toBe(4)
    expect(fs.readdirSync(path.dirname(file)).some((n) => n.startsWith('transcript.jsonl.pre-compact-'))).toBe(true)
  })

  it('should report entries of unknown types, unknown threads and inputs the machine would not accept, and exit 5', async () => {
    const rt = await createTestRuntime({ model: scriptedModel([{ text: 'done' }]) })
    const thread = await rt.spawn({ directive: { name: 'checked', prompt: 'p' } })
    await thread.done
    const dir = rt.dir
    await rt.close()
    const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'process' })
    store.open(thread.id)
    store.append(thread.id, 'mystery', { x: 1 })
    store.append(thread.id, 'child_thread_failed', { childId: 'ghost-aaaaaaaaaaaa', error: { code: 'x', message: 'y' } })
    store.append(thread.id, 'MODEL_REPLIED', { at: 1, turn: 7, attempt: 1, text: 'late', toolCalls: [], usage: { inputTokens: 1, outputTokens: 1 } })
    store.closeAll()
    const run = spindle('rebuild', thread.id, '--dir', dir, '--json')
    expect(run.code).toBe(5)
    const report = JSON.parse(run.stdout)
    expect(report.findings.map((f: { kind: string }) => f.kind)).toEqual(['unknown_type', 'unknown_thread', 'invalid_transition'])
    expect(report.findings[2].message).toContain('MODEL_REPLIED')
    // --apply refuses to write what does not replay.
    expect(spindle('rebuild', thread.id, '--dir', dir, '--apply', '--json').code).toBe(5)
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('should not call a state.json that points into the transcript a compaction replaced a match, and a second compaction repairs it', async () => {
    // Repeated notes in the middle of the transcript: the entries after them move when compacted.
    const { dir, thread } = await suspendedWithNotes('halfway')
    const next = await createRuntime({ dir, model: scriptedModel([{ text: 'unused' }, { text: 'done' }]), userConfig: null })
    await next.approve(thread.id, { limits: { turns: 5 } })
    expect((await next.get(thread.id).done).status).toBe('completed')
    await next.close()
    const statePath = path.join(dir, 'threads', thread.id, 'state.json')
    const stateBefore = fs.readFileSync(statePath)
    expect(compactThread(dir, thread.id, { apply: true })).toMatchObject({ applied: true, dropped: { operator_looked: 4 } })
    expect(verifyReplay(dir, thread.id)).toMatchObject({ matches: true, checkpointFound: true })
    // Killed between writing the new transcript and its state.json: the old state.json names a
    // seq and hash the new file does not have. Before, verifyReplay called that a match.
    fs.writeFileSync(statePath, stateBefore)
    expect(verifyReplay(dir, thread.id)).toMatchObject({ matches: false, checkpointFound: false })
    const doctor = spindle('doctor', '--dir', dir, '--json')
    expect(doctor.code).toBe(5)
    expect(JSON.parse(doctor.stdout).findings).toContainEqual(expect.objectContaining({ threadId: thread.id, code: 'STATE_MISMATCH', message: expect.stringContaining('does not hold') }))
    const again = spindle('rebuild', thread.id, '--compact', '--apply', '--dir', dir)
    expect(again.code, again.stderr).toBe(0)
    expect(verifyReplay(dir, thread.id)).toMatchObject({ matches: true, checkpointFound: true })
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('should carry on a thread whose compaction was stopped between its two writes, rebuilding state.json from the compacted transcript', async () => {
    // Setup: a thread suspended at its turn limit, with repeated notes before its last entries.
    const { dir, thread } = await suspendedWithNotes('unfinished')
    const next = await createRuntime({ dir, model: scriptedModel([{ text: 'unused' }]), userConfig: null })
    await next.close()
    const statePath = path.join(dir, 'threads', thread.id, 'state.json')
    const stateBefore = fs.readFileSync(statePath)
    expect(compactThread(dir, thread.id, { apply: true })).toMatchObject({ applied: true, dropped: { operator_looked: 4 } })
    const compacted = fs.readFileSync(path.join(dir, 'threads', thread.id, 'transcript.jsonl'))

    // The fault: killed after the new transcript was renamed in, before state.json was.
    fs.writeFileSync(statePath, stateBefore)
    const envelope = JSON.parse(stateBefore.toString('utf8'))
    expect(anchorSetAside(dataPaths(dir), thread.id, envelope.transcript, Date.parse(envelope.savedAt))).toMatchObject({
      why: 'compaction',
      keptAs: expect.stringContaining(`${thread.id}/transcript.jsonl.pre-compact-`),
    })
    // The same position in a state.json saved after the compaction began would point into the
    // compacted transcript: a mismatch there is damage, never taken for an unfinished compaction.
    expect(anchorSetAside(dataPaths(dir), thread.id, envelope.transcript, Date.now())).toBeNull()

    // After: a runtime opening the directory rebuilds state.json from the compacted transcript,
    // says so, and the thread goes on when approved; the compacted transcript is kept, not cut.
    const problems: Array<{ code: string; message: string }> = []
    const last = await createRuntime({ dir, model: scriptedModel([{ text: 'unused' }, { text: 'done' }]), userConfig: null, onProblem: (p) => problems.push(p) })
    expect(last.lastRecovery.failed).toEqual([])
    // A suspended thread is read when it is needed: here, when it is approved.
    await last.approve(thread.id, { limits: { turns: 5 } })
    expect(await last.get(thread.id).done).toMatchObject({ status: 'completed', result: 'done' })
    expect(problems).toContainEqual(expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining('a compaction replaced (kept as') }))
    expect(fs.readFileSync(path.join(dir, 'threads', thread.id, 'transcript.jsonl')).subarray(0, compacted.length).equals(compacted)).toBe(true)
    await last.close()
    expect(verifyReplay(dir, thread.id)).toMatchObject({ matches: true, checkpointFound: true })
    expect(spindle('doctor', '--dir', dir).code).toBe(0)
    fs.rmSync(dir, { recursive: true, force: true })
  })

  it('should recover a running thread whose compaction was stopped between its two writes when a runtime opens, beside one that was not compacted', async () => {
    // Setup: two threads left running in a model call that never returns (the runtime closed under
    // them); repeated notes in one's transcript, and a checkpoint after them (a runtime reopened).
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-compact-open-'))
    const hang = () => scriptedModel([{ faults: [{ fault: 'hang' }], reply: { text: '' } }])
    const first = await createRuntime({ dir, model: hang(), userConfig: null })
    const [halfway, untouched] = (await Promise.all(['halfway', 'untouched'].map(async (name) => (await first.spawn({ directive: { name, prompt: 'p' } })).id))) as [string, string]
    await first.close()
    const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'process' })
    store.open(halfway)
    for (let i = 0; i < 3; i++) store.append(halfway, 'operator_looked', { at: 1000 + i, by: 'ops' })
    store.closeAll()
    await (await createRuntime({ dir, model: hang(), userConfig: null })).close()
    const statePath = path.join(dir, 'threads', halfway, 'state.json')
    const stateBefore = fs.readFileSync(statePath)
    expect(compactThread(dir, halfway, { apply: true })).toMatchObject({ applied: true, dropped: { operator_looked: 2 } })

    // The fault: killed between the compacted transcript's rename and state.json's.
    fs.writeFileSync(statePath, stateBefore)

    // After: recovery at open rebuilds that one from its compacted transcript and resumes both.
    const problems: Array<{ code: string; message: string }> = []
    const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'done' }]), userConfig: null, onProblem: (p) => problems.push(p) })
    expect(rt.lastRecovery).toMatchObject({ failed: [], rebuilt: [halfway] })
    expect([...rt.lastRecovery.resumed].sort()).toEqual([halfway, untouched])
    expect(problems).toContainEqual(expect.objectContaining({ threadId: halfway, code: 'STATE_CORRUPT', message: expect.stringContaining('a compaction replaced') }))
    for (const id of [halfway, untouched]) expect(await rt.get(id).done).toMatchObject({ status: 'completed', result: 'done' })
    await rt.close()
    for (const id of [halfway, untouched]) expect(verifyReplay(dir, id)).toMatchObject({ matches: true, checkpointFound: true })
    fs.rmSync(dir, { recursive: true, force: true })
  })
})
