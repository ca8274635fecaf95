/**
 * https://github.com/spindle/spindle/issues/22 (item 7): a stopped thread's `done` waits for the
 * settle round (`GroupCommit.whenSettled`), which makes the thread's end durable — its transcript
 * file, its state.json, its registry row — and waits for no checkpoint round of the threads still
 * running: neither one under way (a slow disk) nor one still to start (at the end of an event-loop
 * turn that a busy host may not give for seconds).
 *
 * Each scenario: two threads registered and checkpointed once, then one stops while the other runs
 * on; the fault is held between them; what must be on disk (or in the stores) when `whenSettled`
 * resolves. Real stores: jsonl transcripts, state.json files, an SQLite registry file; and the
 * memory stores.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { GroupCommit } from '../../persistence/groupCommit.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { createMemoryCheckpointStore } from '../../persistence/memoryCheckpointStore.js'
import { createMemoryRegistry } from '../../persistence/memoryRegistry.js'
import { createMemoryTranscriptStore } from '../../persistence/memoryTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { CheckpointStore, Registry, TranscriptStore } from '../../persistence/types.js'
import { envelope } from '../contract/checkpoints.contract.js'
import { tempDir } from '../helpers/dirs.js'

const STOPPED = 'stopped-aaaaaaaaaaaa'
const RUNNING = 'running-aaaaaaaaaaaa'

type Store = 'memory' | 'process' | 'fsync'

/** What a process opening the stores now would read of a thread. */
interface Seen {
  state: string | undefined
  seq: number | undefined
  row: string | undefined
  result: unknown
  spend: number
}

async function twoRunning(store: Store) {
  let transcripts: TranscriptStore
  let checkpoints: CheckpointStore
  let registry: Registry
  let onDisk: (id: string) => Seen
  if (store === 'memory') {
    transcripts = createMemoryTranscriptStore()
    checkpoints = createMemoryCheckpointStore()
    registry = createMemoryRegistry()
    onDisk = (id) => {
      const state = checkpoints.load(id)
      const row = registry.get(id)
      return { state: state?.status, seq: state?.transcript.seq, row: row?.status, result: row?.result, spend: row?.cost?.spend ?? 0 }
    }
  } else {
    const root = tempDir('spindle-group-commit-settle')
    const paths = dataPaths(root)
    transcripts = createJsonlTranscriptStore({ paths, durability: store })
    checkpoints = createFileCheckpointStore({ paths, durability: store })
    registry = openSqliteRegistry({ path: path.join(root, 'registry.db'), durability: store })
    // state.json from disk, the registry row through a connection of its own.
    onDisk = (id) => {
      const state = JSON.parse(fs.readFileSync(path.join(paths.threads, id, 'state.json'), 'utf8')) as { status: string; transcript: { seq: number } }
      const reader = openSqliteRegistry({ path: path.join(root, 'registry.db'), durability: store })
      try {
        const row = reader.get(id)
        return { state: state.status, seq: state.transcript.seq, row: row?.status, result: row?.result, spend: row?.cost?.spend ?? 0 }
      } finally {
        reader.close()
      }
    }
  }
  const commit = new GroupCommit({ transcripts, checkpoints, registry })
  for (const id of [STOPPED, RUNNING]) {
    transcripts.open(id)
    transcripts.append(id, 'NOTE', { step: 1 })
    commit.stageRegistration({ id, directiveName: id.split('-')[0]!, directive: {}, nonce: 'n', createdAt: 0 })
    checkpoints.stage(id, envelope(id, 1))
    commit.noteCheckpoint(id)
    commit.stageRegistry(id, { status: 'running', at: 1 })
  }
  await commit.whenDurable()

  /** Both step on; then STOPPED ends (what LiveThread stages as a thread stops). */
  const stepAndStop = (): void => {
    transcripts.append(STOPPED, 'NOTE', { step: 2 })
    transcripts.append(RUNNING, 'NOTE', { step: 2 })
    checkpoints.stage(RUNNING, envelope(RUNNING, 2))
    commit.noteCheckpoint(RUNNING)
    commit.stageRegistry(RUNNING, { cost: { turns: 2, inputTokens: 0, outputTokens: 0, spend: 0.5 } })
    checkpoints.stage(STOPPED, { ...envelope(STOPPED, 2), status: 'completed' })
    commit.noteCheckpoint(STOPPED)
    commit.stageRegistry(STOPPED, { status: 'completed', at: 2, outcome: { result: 'the end' } })
  }
  return { transcripts, checkpoints, registry, commit, onDisk, stepAndStop }
}

describe.each([['memory'], ['process'], ['fsync']] as const)('group commit: a stopped thread settles in a round of its own (%s)', (store) => {
  it('should settle a stopped thread while a checkpoint round that took its end is held, and the held round publish nothing older of it', async () => {
    const t = await twoRunning(store)
    t.stepAndStop()
    // The fault: a slow disk holds a sync of every staged state.json (its transcript sync has not
    // returned); the group commit's own round, which took the registry changes, queues behind it.
    let release!: () => void
    const held = t.checkpoints.sync({ beforePublish: () => new Promise<void>((resolve) => (release = resolve)) })
    let roundDone = false
    const round = t.commit.whenDurable().then(() => void (roundDone = true))
    await new Promise((resolve) => setImmediate(resolve))
    const commitsBefore = t.commit.stats.commits

    await t.commit.whenSettled(STOPPED)
    expect(t.onDisk(STOPPED)).toMatchObject({ state: 'completed', seq: 2, row: 'completed', result: 'the end' })
    expect(t.onDisk(RUNNING)).toMatchObject({ state: 'running', seq: 1, row: 'running', spend: 0 })
    expect(roundDone).toBe(false)
    expect(t.commit.stats).toMatchObject({ commits: commitsBefore, settleCommits: 1 })

    // Once the disk answers, the held rounds publish the running thread, and nothing of the stopped one.
    release()
    await held
    await round
    expect(t.onDisk(RUNNING)).toMatchObject({ state: 'running', seq: 2, row: 'running', spend: 0.5 })
    expect(t.onDisk(STOPPED)).toMatchObject({ state: 'completed', seq: 2, row: 'completed', result: 'the end' })
    t.registry.close()
  })

  it('should make the stopped thread wait for the round that registers it when its registration has not committed', async () => {
    const t = await twoRunning(store)
    const NEW = 'new-aaaaaaaaaaaa'
    t.transcripts.open(NEW)
    t.transcripts.append(NEW, 'NOTE', { step: 1 })
    t.commit.stageRegistration({ id: NEW, directiveName: 'new', directive: {}, nonce: 'n', createdAt: 0 })
    t.checkpoints.stage(NEW, { ...envelope(NEW, 1), status: 'cancelled' })
    t.commit.noteCheckpoint(NEW)
    t.commit.stageRegistry(NEW, { status: 'cancelled', at: 1, outcome: { result: null } })
    const commitsBefore = t.commit.stats.commits
    await t.commit.whenSettled(NEW)
    // Its row, state.json and status commit together: a registered thread always has files.
    expect(t.onDisk(NEW)).toMatchObject({ state: 'cancelled', seq: 1, row: 'cancelled' })
    expect(t.commit.stats).toMatchObject({ commits: commitsBefore + 1, settleCommits: 0 })
    t.registry.close()
  })
})

// Without fsync nothing of a settle round waits for the threadpool: threads a scripted model
// answers at once, or any host busy in promise callbacks, do not delay it.
describe.each([['memory'], ['process']] as const)('group commit: a stopped thread settles without a turn of the event loop (%s)', (store) => {
  it('should have the stopped thread durable before the event loop takes its next turn', async () => {
    const t = await twoRunning(store)
    t.stepAndStop()
    let turned = false
    setImmediate(() => (turned = true))

    await t.commit.whenSettled(STOPPED)
    expect(turned).toBe(false)
    expect(t.onDisk(STOPPED)).toMatchObject({ state: 'completed', seq: 2, row: 'completed', result: 'the end' })
    // The running thread's checkpoint is the background round's, which has not run.
    expect(t.onDisk(RUNNING)).toMatchObject({ state: 'running', seq: 1, spend: 0 })
    await t.commit.whenDurable()
    t.registry.close()
  })
})
