import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { isSpindleError } from '../../src/base/errors.js'
import type { SpindleError } from '../../src/base/errors.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { createMemoryTranscriptStore } from '../../persistence/memoryTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import type { DataPaths } from '../../persistence/paths.js'
import { encodeEntry } from '../../persistence/transcriptLines.js'
import { entryHash } from '../../persistence/transcriptHash.js'
import type { Durability, TranscriptEntry, TranscriptStore } from '../../persistence/types.js'
import { transcriptContract } from '../contract/transcript.contract.js'
import { plantLink } from '../helpers/dirs.js'
import { envelope } from '../contract/checkpoints.contract.js'

function freshDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-'))
}

function fileBackend(durability: Durability, maxOpen?: number) {
  return () => {
    const root = freshDir()
    return {
      store: createJsonlTranscriptStore({ paths: dataPaths(root), durability, ...(maxOpen ? { maxOpen } : {}) }),
      destroy: () => fs.rmSync(root, { recursive: true, force: true }),
    }
  }
}

transcriptContract('memory', () => ({ store: createMemoryTranscriptStore() }))
transcriptContract('jsonl (durability process)', fileBackend('process'))
transcriptContract('jsonl (durability fsync)', fileBackend('fsync'))
transcriptContract('jsonl (durability process, 3 descriptors)', fileBackend('process', 3))
transcriptContract('jsonl (durability fsync, 3 descriptors)', fileBackend('fsync', 3))

const ID = 'research-abcdefghijkl'
const T0 = Date.parse('2025-01-01T00:00:00.000Z')
const at = (n: number): Date => new Date(T0 + n * 1000)

function thrown(fn: () => unknown): SpindleError {
  try {
    fn()
  } catch (error) {
    if (isSpindleError(error)) return error
    throw error
  }
  throw new Error('expected a SpindleError, nothing was thrown')
}

function verifyChain(entries: TranscriptEntry[]): void {
  let prev = ''
  entries.forEach((e, i) => {
    expect(e.seq).toBe(i + 1)
    expect(e.hash).toBe(entryHash(prev, e.seq, e.ts, e.type, e.data))
    prev = e.hash
  })
}

/**
 * Recovery matrix for the file backend. Each row: the setup, the fault injected into the files,
 * and what must hold afterwards.
 */
describe('jsonl transcript recovery', () => {
  let root: string
  let paths: DataPaths
  let file: string
  let store: TranscriptStore

  beforeEach(() => {
    root = freshDir()
    paths = dataPaths(root)
    file = path.join(paths.threads, ID, 'transcript.jsonl')
    store = createJsonlTranscriptStore({ paths, durability: 'process' })
  })

  afterEach(() => {
    store.closeAll()
    fs.rmSync(root, { recursive: true, force: true })
  })

  /** Appends n entries and closes the thread; returns the position after them. */
  function writeEntries(n: number, s: TranscriptStore = store) {
    s.open(ID)
    for (let i = 0; i < n; i++) s.append(ID, 'NOTE', { n: i + 1, text: `entry ${i + 1}` }, at(i))
    const position = s.position(ID)
    s.close(ID)
    return position
  }

  function lines(): string[] {
    return fs.readFileSync(file, 'utf8').split('\n')
  }

  it('should have the folder of a thread that ended checked again at its next checkpoint, so a link planted after it ended is refused', async () => {
    // A thread runs (its folder is checked once), ends with a final checkpoint, and its files close.
    store.open(ID)
    const checkpoints = createFileCheckpointStore({ paths, durability: 'process' })
    checkpoints.stage(ID, envelope(ID, 1))
    await checkpoints.sync()
    checkpoints.stage(ID, { ...envelope(ID, 1), status: 'completed' })
    await checkpoints.sync()
    store.close(ID)
    // Then its folder is swapped for a link, and someone resumes or rebuilds it.
    const folder = path.join(paths.threads, ID)
    const moved = plantLink(folder)
    checkpoints.stage(ID, envelope(ID, 2))
    const error = await checkpoints.sync().then(() => null, (e: unknown) => e as Error)
    expect(error?.message).toContain(folder)
    expect(fs.existsSync(path.join(moved, 'state.json.tmp'))).toBe(false)
    expect(JSON.parse(fs.readFileSync(path.join(moved, 'state.json'), 'utf8')).status).toBe('completed')
    fs.rmSync(path.dirname(moved), { recursive: true, force: true })
  })

  describe('torn last line (a crash in the middle of a write)', () => {
    // setup: 3 entries. fault: half a JSON line, no newline, at the end.
    const fragment = '{"seq":4,"ts":"2025-01-01T00:00:03.000Z","type":"NO'

    it('should open at seq 3 and report the fragment moved to a side file', () => {
      const position = writeEntries(3)
      fs.appendFileSync(file, fragment)
      const opened = store.open(ID)
      expect(opened.position).toEqual(position)
      expect(opened.tail.map((e) => e.seq)).toEqual([1, 2, 3])
      const savedTo = `${file}.torn-${position.bytes}`
      expect(opened.torn).toEqual({ bytes: Buffer.byteLength(fragment), savedTo })
      expect(fs.readFileSync(savedTo, 'utf8')).toBe(fragment)
      expect(fs.statSync(file).size).toBe(position.bytes)
    })

    it('should give the next append seq 4 and a chain that verifies', () => {
      writeEntries(3)
      fs.appendFileSync(file, fragment)
      store.open(ID)
      expect(store.append(ID, 'NOTE', { n: 4 }, at(3)).seq).toBe(4)
      const { entries, torn } = store.read(ID)
      expect(torn).toBeNull()
      expect(entries).toHaveLength(4)
      verifyChain(entries)
    })

    it('should treat a complete last line without its newline as torn', () => {
      // fault: the write stopped one byte short, before the "\n".
      writeEntries(3)
      const whole = fs.readFileSync(file)
      fs.writeFileSync(file, whole.subarray(0, whole.length - 1))
      const opened = store.open(ID)
      expect(opened.position.seq).toBe(2)
      expect(opened.torn?.bytes).toBe(whole.length - 1 - opened.position.bytes)
    })

    it('should treat an unparsable last line that ends with a newline as torn', () => {
      const position = writeEntries(3)
      fs.appendFileSync(file, `${fragment}\n`)
      const opened = store.open(ID)
      expect(opened.position).toEqual(position)
      expect(opened.torn?.bytes).toBe(Buffer.byteLength(fragment) + 1)
    })

    it('should keep both fragments when the same offset tears twice', () => {
      const position = writeEntries(3)
      fs.appendFileSync(file, 'first tear')
      store.open(ID)
      store.close(ID)
      fs.appendFileSync(file, 'second tear')
      const opened = store.open(ID)
      expect(opened.torn?.savedTo).toBe(`${file}.torn-${position.bytes}.1`)
      expect(fs.readFileSync(`${file}.torn-${position.bytes}`, 'utf8')).toBe('first tear')
      expect(fs.readFileSync(`${file}.torn-${position.bytes}.1`, 'utf8')).toBe('second tear')
    })

    it('should recover a torn line after the position it is opened from', () => {
      const position = writeEntries(3)
      fs.appendFileSync(file, fragment)
      const opened = store.open(ID, position)
      expect(opened).toMatchObject({ position, tail: [], torn: { bytes: Buffer.byteLength(fragment) } })
    })

    it('should report a torn line from read without cutting it off', () => {
      writeEntries(3)
      fs.appendFileSync(file, fragment)
      const before = fs.statSync(file).size
      expect(store.read(ID)).toMatchObject({ torn: { bytes: Buffer.byteLength(fragment) } })
      expect(store.read(ID).entries).toHaveLength(3)
      expect(fs.statSync(file).size).toBe(before)
      expect(fs.readdirSync(path.dirname(file))).toEqual(['transcript.jsonl'])
    })
  })

  describe('broken chain (the file was edited or damaged)', () => {
    it('should throw TRANSCRIPT_CHAIN_BROKEN at seq 2 when the data of entry 2 was changed', () => {
      // setup: 3 entries. fault: entry 2's data edited in place; its hash no longer matches.
      writeEntries(3)
      const all = lines()
      all[1] = all[1]!.replace('entry 2', 'entry X')
      fs.writeFileSync(file, all.join('\n'))
      const error = thrown(() => store.open(ID))
      expect(error.code).toBe('TRANSCRIPT_CHAIN_BROKEN')
      expect(error.details).toMatchObject({ path: file, seq: 2 })
      expect(error.message).toContain('restore it from a backup')
    })

    it('should throw TRANSCRIPT_CHAIN_BROKEN at the expected seq when an entry is missing', () => {
      // fault: entry 2 deleted; entry 3 follows entry 1.
      writeEntries(3)
      const all = lines()
      all.splice(1, 1)
      fs.writeFileSync(file, all.join('\n'))
      expect(thrown(() => store.open(ID)).details).toMatchObject({ seq: 2 })
    })

    it('should throw TRANSCRIPT_CHAIN_BROKEN when a line before the last is not JSON', () => {
      // Only the last line can be torn by a crash; garbage before it is real damage.
      writeEntries(3)
      const all = lines()
      all[1] = '{"seq":2,"ts":'
      fs.writeFileSync(file, all.join('\n'))
      const error = thrown(() => store.open(ID))
      expect(error.code).toBe('TRANSCRIPT_CHAIN_BROKEN')
      expect(error.details).toMatchObject({ seq: 2 })
    })

    it('should throw TRANSCRIPT_CHAIN_BROKEN from read, too', () => {
      writeEntries(3)
      fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('entry 3', 'entry X'))
      const error = thrown(() => store.read(ID))
      expect(error.code).toBe('TRANSCRIPT_CHAIN_BROKEN')
      expect(error.details).toMatchObject({ seq: 3 })
    })

    it('should leave the thread closed and the file untouched after a chain error', () => {
      writeEntries(3)
      const damaged = fs.readFileSync(file, 'utf8').replace('entry 2', 'entry X')
      fs.writeFileSync(file, damaged)
      thrown(() => store.open(ID))
      expect(thrown(() => store.append(ID, 'NOTE', null)).code).toBe('THREAD_NOT_FOUND')
      expect(fs.readFileSync(file, 'utf8')).toBe(damaged)
    })
  })

  describe('state.json and transcript disagree', () => {
    it('should throw TRANSCRIPT_CORRUPT when the file is shorter than the position', () => {
      // setup: 3 entries and their position. fault: the file cut back to 2 entries.
      const position = writeEntries(3)
      const all = lines()
      fs.writeFileSync(file, `${all.slice(0, 2).join('\n')}\n`)
      const error = thrown(() => store.open(ID, position))
      expect(error.code).toBe('TRANSCRIPT_CORRUPT')
      expect(error.details).toMatchObject({ path: file })
      expect(error.message).toContain(`state.json says ${position.bytes} bytes, file has ${fs.statSync(file).size}`)
    })

    it('should throw TRANSCRIPT_CORRUPT naming the path when the file is missing but the position is past seq 0', () => {
      const position = writeEntries(3)
      fs.rmSync(file)
      const error = thrown(() => store.open(ID, position))
      expect(error.code).toBe('TRANSCRIPT_CORRUPT')
      expect(error.details).toMatchObject({ path: file })
      expect(error.message).toContain(file)
      expect(fs.existsSync(file)).toBe(false)
    })

    it('should create the file when it is missing and the position is seq 0', () => {
      expect(store.open(ID, { seq: 0, hash: '', bytes: 0 }).position.seq).toBe(0)
      expect(fs.existsSync(file)).toBe(true)
    })

    it('should throw TRANSCRIPT_CORRUPT when the position does not end at an entry boundary', () => {
      const position = writeEntries(3)
      const error = thrown(() => store.open(ID, { ...position, bytes: position.bytes - 5 }))
      expect(error.code).toBe('TRANSCRIPT_CORRUPT')
    })

    it('should throw TRANSCRIPT_CORRUPT when the file was replaced by another transcript of the same length', () => {
      // fault: the file swapped for another thread's 3 entries with other timestamps: the same
      // length, so only the hash at the position tells them apart.
      const position = writeEntries(3)
      const otherRoot = freshDir()
      try {
        const other = createJsonlTranscriptStore({ paths: dataPaths(otherRoot), durability: 'process' })
        other.open(ID)
        for (let i = 0; i < 3; i++) other.append(ID, 'NOTE', { n: i + 1, text: `entry ${i + 1}` }, at(i + 100))
        other.closeAll()
        fs.copyFileSync(path.join(otherRoot, 'threads', ID, 'transcript.jsonl'), file)
      } finally {
        fs.rmSync(otherRoot, { recursive: true, force: true })
      }
      expect(fs.statSync(file).size).toBe(position.bytes)
      const error = thrown(() => store.open(ID, position))
      expect(error.code).toBe('TRANSCRIPT_CORRUPT')
      expect(error.details).toMatchObject({ path: file, seq: 3 })
    })
  })

  describe('a line from a process that lost the thread (stopped between its lease check and its write)', () => {
    // setup: 3 entries; the thread is taken over (opened by a new store, which appends entry 4).
    // fault: the old owner, woken, writes the line it had built before it stopped: seq 4 again.
    const staleLine = `{"seq":4,"ts":"2025-01-01T00:00:03.000Z","type":"NOTE","data":{"n":4,"by":"stale owner"},"hash":"x"}\n`
    function takeover(found: unknown[]) {
      writeEntries(3)
      const stale = createJsonlTranscriptStore({ paths, durability: 'process', onForeignTail: (f) => found.push(f) })
      stale.open(ID)
      const taker = createJsonlTranscriptStore({ paths, durability: 'process', onForeignTail: (f) => found.push(f) })
      taker.open(ID)
      taker.append(ID, 'NOTE', { n: 4, by: 'taker' }, at(3))
      const end = taker.position(ID).bytes
      return { stale, taker, end }
    }

    it("should move the stale line aside before the new owner's next line, and keep the chain unbroken", () => {
      const found: unknown[] = []
      const { stale, taker, end } = takeover(found)
      // A writer that created the file checks nothing: its line lands after the new owner's.
      fs.appendFileSync(file, staleLine)
      stale.close(ID)
      expect(taker.append(ID, 'NOTE', { n: 5, by: 'taker' }, at(4)).seq).toBe(5)
      const savedTo = `${file}.torn-${end}`
      expect(found).toEqual([{ threadId: ID, file, offset: end, bytes: fs.statSync(savedTo).size, savedTo }])
      expect(JSON.parse(fs.readFileSync(savedTo, 'utf8'))).toMatchObject({ seq: 4, data: { by: 'stale owner' } })
      taker.close(ID)
      const { entries, torn } = store.read(ID)
      expect(torn).toBeNull()
      verifyChain(entries)
      expect(entries.map((e) => (e.data as { by?: string }).by ?? null)).toEqual([null, null, null, 'taker', 'taker'])
    })

    it("should have the stale owner write nothing, and cut nothing, when it finds the new owner's lines past its own", () => {
      const found: unknown[] = []
      const { stale, taker, end } = takeover(found)
      const error = thrown(() => stale.append(ID, 'NOTE', { n: 4, by: 'stale owner' }, at(3)))
      expect(error.code).toBe('LEASE_LOST')
      expect(error.message).toContain('past this process\'s last line (seq 3)')
      expect(fs.statSync(file).size).toBe(end)
      expect(found).toEqual([])
      expect(taker.append(ID, 'NOTE', { n: 5, by: 'taker' }, at(4)).seq).toBe(5)
      stale.close(ID)
      taker.close(ID)
      verifyChain(store.read(ID).entries)
    })

    it("should set aside, like a torn line, a stale line that landed after the new owner's last one", () => {
      const found: unknown[] = []
      const { stale, taker, end } = takeover(found)
      taker.close(ID)
      fs.appendFileSync(file, staleLine)
      stale.close(ID)
      // Read (doctor, replay): reported as torn, the chain verifies.
      const read = store.read(ID)
      expect(read.torn).toMatchObject({ bytes: staleLine.length })
      verifyChain(read.entries)
      // Opened again (a recovery): moved aside and cut off, and the next line goes on from seq 4.
      const opened = store.open(ID)
      expect(opened.position.seq).toBe(4)
      expect(opened.torn).toEqual({ bytes: staleLine.length, savedTo: `${file}.torn-${end}` })
      expect(store.append(ID, 'NOTE', { n: 5 }, at(4)).seq).toBe(5)
      store.close(ID)
    })

    it("should skip and list a stale line that landed between two of the new owner's lines, and verify the chain around it", () => {
      const found: unknown[] = []
      const { stale, taker, end } = takeover(found)
      stale.close(ID)
      // The stale owner's line lands after the new owner checked the file and before its write.
      fs.appendFileSync(file, staleLine)
      const fd = fs.openSync(file, 'a')
      const next = encodeEntry(taker.position(ID), 'NOTE', { n: 5, by: 'taker' }, at(4))
      fs.writeSync(fd, next.line)
      fs.closeSync(fd)
      taker.close(ID)

      // Read (doctor, replay) and opened again (a recovery): the chain verifies without it.
      const read = store.read(ID)
      verifyChain(read.entries)
      expect(read.entries.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5])
      expect(read.stale).toEqual([{ offset: end, bytes: staleLine.length, seq: 4 }])
      const opened = store.open(ID)
      expect(opened).toMatchObject({ position: { seq: 5 }, stale: [{ offset: end, bytes: staleLine.length, seq: 4 }], torn: null })
      expect(store.append(ID, 'NOTE', { n: 6 }, at(5)).seq).toBe(6)
      store.close(ID)
      expect(store.read(ID).entries.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6])
      // Still damage: a lower seq in a line spindle did not write that way, and a line the next does not chain past.
      const lines = fs.readFileSync(file, 'utf8').split('\n')
      fs.writeFileSync(file, [...lines.slice(0, 4), '{"ts":"x","seq":2}', ...lines.slice(4)].join('\n'))
      expect(thrown(() => store.read(ID)).code).toBe('TRANSCRIPT_CHAIN_BROKEN')
      fs.writeFileSync(file, [...lines.slice(0, 3), staleLine.trimEnd(), ...lines.slice(4)].join('\n'))
      expect(thrown(() => store.read(ID))).toMatchObject({ code: 'TRANSCRIPT_CHAIN_BROKEN', details: { seq: 4 } })
    })

    it('should leave bytes that are not transcript lines, and a file that got shorter, as they are and write nothing', () => {
      const found: unknown[] = []
      const { stale, taker, end } = takeover(found)
      stale.close(ID)
      fs.appendFileSync(file, 'hand-typed notes\n')
      expect(thrown(() => taker.append(ID, 'NOTE', { n: 5 }, at(4))).code).toBe('TRANSCRIPT_CORRUPT')
      expect(fs.statSync(file).size).toBe(end + 'hand-typed notes\n'.length)
      fs.truncateSync(file, end - 10)
      const shorter = thrown(() => taker.append(ID, 'NOTE', { n: 5 }, at(4)))
      expect(shorter.code).toBe('TRANSCRIPT_CORRUPT')
      expect(shorter.message).toContain('shorter than what this process wrote')
      expect(found).toEqual([])
      taker.close(ID)
    })
  })

  describe('thread ids', () => {
    it('should throw INVALID_THREAD_ID for an id that would leave the data directory', () => {
      expect(thrown(() => store.open('../evil-aaaaaaaaaaaa')).code).toBe('INVALID_THREAD_ID')
      expect(thrown(() => store.read('../evil-aaaaaaaaaaaa')).code).toBe('INVALID_THREAD_ID')
      expect(fs.existsSync(path.join(root, 'evil-aaaaaaaaaaaa'))).toBe(false)
    })
  })

  describe('durability fsync', () => {
    it('should resolve sync and keep the data across close and reopen', async () => {
      const durable = createJsonlTranscriptStore({ paths, durability: 'fsync' })
      durable.open(ID)
      const appended = [durable.append(ID, 'spawn', { input: 'x' }, at(0)), durable.append(ID, 'START', null, at(1))]
      await expect(durable.sync()).resolves.toBeUndefined()
      const position = durable.position(ID)
      durable.close(ID)
      const reopened = createJsonlTranscriptStore({ paths, durability: 'fsync' })
      expect(reopened.open(ID)).toEqual({ position, tail: appended, torn: null })
      reopened.closeAll()
    })

    it('should keep appends made during a sync for the next sync', async () => {
      const durable = createJsonlTranscriptStore({ paths, durability: 'fsync' })
      durable.open(ID)
      durable.append(ID, 'NOTE', 1, at(0))
      const first = durable.sync()
      durable.append(ID, 'NOTE', 2, at(1))
      await first
      await durable.sync()
      expect(durable.read(ID).entries).toHaveLength(2)
      durable.closeAll()
    })

    it('should let a thread be closed while its sync is in flight', async () => {
      const durable = createJsonlTranscriptStore({ paths, durability: 'fsync' })
      durable.open(ID)
      durable.append(ID, 'NOTE', 1, at(0))
      const syncing = durable.sync()
      durable.close(ID)
      await expect(syncing).resolves.toBeUndefined()
      expect(store.read(ID).entries).toHaveLength(1)
    })

    it('should make appends durable on close when no sync followed them', () => {
      const durable = createJsonlTranscriptStore({ paths, durability: 'fsync' })
      durable.open(ID)
      durable.append(ID, 'NOTE', 1, at(0))
      durable.close(ID)
      expect(store.read(ID).entries).toHaveLength(1)
    })
  })
})
