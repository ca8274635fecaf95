/**
 * Group commit when this process loses threads to another (its lease ran out while it was stopped
 * or starved). Real stores: state.json files, an SQLite registry file, jsonl transcripts.
 *
 * Each scenario: two threads checkpointed once; then new checkpoints and registry changes are
 * staged, the fault (fenced, one thread discarded) happens, and what the files say after.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { GroupCommit } from '../../persistence/groupCommit.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { openSqliteLeases } from '../../persistence/sqliteLeases.js'
import { openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { SpindleError } from '../../src/base/errors.js'
import { envelope } from '../contract/checkpoints.contract.js'
import { tempDir } from '../helpers/dirs.js'

const KEPT = 'kept-aaaaaaaaaaaa'
const LOST = 'lost-aaaaaaaaaaaa'
const ME = { id: 'me', pid: 1, host: 'h' }
const LEASE_MS = 1_000

async function twoThreads() {
  const root = tempDir('spindle-group-commit')
  const paths = dataPaths(root)
  const transcripts = createJsonlTranscriptStore({ paths, durability: 'fsync' })
  const checkpoints = createFileCheckpointStore({ paths, durability: 'fsync' })
  const registry = openSqliteRegistry({ path: path.join(root, 'registry.db'), durability: 'fsync' })
  let fence: Error | null = null
  const errors: unknown[] = []
  // This process's leases, on a real leases.db: both threads taken with token 1.
  const leasesFile = path.join(root, 'leases.db')
  const leases = openSqliteLeases({ path: leasesFile, durability: 'fsync' })
  const { tokens } = leases.acquireMany([KEPT, LOST], ME, LEASE_MS, 0)
  leases.close()
  const commit = new GroupCommit(
    { transcripts, checkpoints, registry },
    (_id, error) => errors.push(error),
    (error) => errors.push(error),
    () => fence,
    (id) => tokens.get(id),
  )
  for (const id of [KEPT, LOST]) {
    transcripts.open(id)
    commit.stageRegistration({ id, directiveName: id.split('-')[0]!, directive: {}, nonce: 'n', createdAt: 0 })
    checkpoints.stage(id, envelope(id, 1))
    commit.noteCheckpoint(id)
    commit.stageRegistry(id, { status: 'running', at: 1 })
  }
  await commit.whenDurable()
  const turns = (id: string): number => JSON.parse(fs.readFileSync(path.join(paths.threads, id, 'state.json'), 'utf8')).transcript.seq
  /** The next step of both threads: a checkpoint at turn 2 and a cost in the registry. */
  const stepBoth = (): void => {
    for (const id of [KEPT, LOST]) {
      checkpoints.stage(id, envelope(id, 2))
      commit.noteCheckpoint(id)
      commit.stageRegistry(id, { cost: { turns: 2, inputTokens: 0, outputTokens: 0, spend: 0.5 } })
    }
  }
  const spend = (id: string): number => registry.get(id)!.cost?.spend ?? 0
  return { root, leasesFile, tokens, commit, registry, errors, turns, spend, stepBoth, setFence: (error: Error | null) => (fence = error) }
}

describe('group commit in a process that lost threads to another', () => {
  it('should publish nothing while fenced, and everything once the fence lifts', async () => {
    const t = await twoThreads()
    t.stepBoth()
    const lost = new SpindleError('LEASE_LOST', 'leases ran out unrenewed')
    t.setFence(lost)
    await expect(t.commit.whenDurable()).rejects.toBe(lost)
    expect([t.turns(KEPT), t.turns(LOST)]).toEqual([1, 1])
    expect([t.spend(KEPT), t.spend(LOST)]).toEqual([0, 0])
    expect(t.errors).toContain(lost)

    t.setFence(null)
    await t.commit.whenDurable()
    expect([t.turns(KEPT), t.turns(LOST)]).toEqual([2, 2])
    expect([t.spend(KEPT), t.spend(LOST)]).toEqual([0.5, 0.5])
    t.registry.close()
  })

  it("should never publish a discarded thread's staged checkpoint or registry change, held back by a fence or not yet written", async () => {
    const t = await twoThreads()
    t.stepBoth()
    t.setFence(new SpindleError('LEASE_LOST', 'leases ran out unrenewed'))
    await expect(t.commit.whenDurable()).rejects.toThrow('unrenewed')
    // The heartbeat finds out: LOST was taken over, KEPT is still this process's.
    t.commit.discard(LOST)
    t.setFence(null)
    await t.commit.whenDurable()
    expect([t.turns(KEPT), t.turns(LOST)]).toEqual([2, 1])
    expect([t.spend(KEPT), t.spend(LOST)]).toEqual([0.5, 0])

    // Discarded before any round took it.
    t.stepBoth()
    t.commit.discard(LOST)
    await t.commit.whenDurable()
    expect(t.spend(LOST)).toBe(0)
    expect(t.turns(LOST)).toBe(1)
    t.registry.close()
  })

  it("should not let a status staged before a takeover overwrite the new owner's, though the fence check passed before the process stopped", async () => {
    const t = await twoThreads()
    expect([t.tokens.get(KEPT), t.tokens.get(LOST)]).toEqual([1, 1])
    // Staged while this process held both; its validity check passes (it is stopped right after).
    for (const id of [KEPT, LOST]) t.commit.stageRegistry(id, { status: 'completed', at: 5, outcome: { result: 'stale' } })

    // The fault: meanwhile another process took LOST over once its lease expired (token 2),
    // claimed its row, and ran it on to 'suspended'.
    const other = openSqliteLeases({ path: t.leasesFile, durability: 'fsync' })
    const taken = other.acquire(LOST, { id: 'other', pid: 2, host: 'h' }, LEASE_MS, LEASE_MS + 1)
    other.close()
    expect(taken).toMatchObject({ acquired: true, lease: { token: 2 } })
    const otherRegistry = openSqliteRegistry({ path: path.join(t.root, 'registry.db'), durability: 'fsync' })
    otherRegistry.claim([{ id: LOST, token: taken.lease.token }])
    otherRegistry.updateStatus(LOST, 'suspended', 4)
    otherRegistry.close()

    // After: the round applies KEPT's change and refuses LOST's, saying why.
    await t.commit.whenDurable()
    expect(t.registry.get(KEPT)).toMatchObject({ status: 'completed', result: 'stale' })
    expect(t.registry.get(LOST)).toMatchObject({ status: 'suspended', result: null })
    const refused = t.errors.filter((e): e is SpindleError => e instanceof SpindleError && e.code === 'LEASE_LOST')
    expect(refused).toHaveLength(1)
    expect(refused[0]!.details).toMatchObject({ threadId: LOST, token: 1, claimed: 2 })
    t.registry.close()
  })

  it('should publish a discarded thread again once it is staged again (taken back)', async () => {
    const t = await twoThreads()
    t.commit.discard(LOST)
    t.stepBoth()
    await t.commit.whenDurable()
    expect([t.turns(KEPT), t.turns(LOST)]).toEqual([2, 2])
    expect(t.spend(LOST)).toBe(0.5)
    t.registry.close()
  })
})
