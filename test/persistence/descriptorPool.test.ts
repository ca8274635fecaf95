/**
 * Recovery matrix rows "more open threads than the store keeps descriptors for": the JSONL store
 * keeps at most `maxOpen` transcript files open, closes the least recently written first, and
 * opens a thread's file again at its next append, where it left off. Each row: the setup, the
 * fault or the pressure, and what must hold (the lines, their order, their durability, the number
 * of descriptors held). Descriptors are counted in /proc/self/fd, fdatasyncs held or failed with a
 * spy on `fs`, as the journal tests do.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { isSpindleError } from '../../src/base/errors.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import type { JsonlTranscriptOptions } from '../../persistence/jsonlTranscript.js'
import { dataPaths, TRANSCRIPT_FILE } from '../../persistence/paths.js'
import { entryHash } from '../../persistence/transcriptHash.js'
import type { TranscriptEntry, TranscriptStore } from '../../persistence/types.js'
import { tempDir } from '../helpers/dirs.js'

const ids = Array.from({ length: 10 }, (_, i) => `pool${i}-${'abcdefghijkl'.slice(0, 12)}`)
const [A, B, C] = ids as [string, string, string]

let dirs: string[] = []
let stores: TranscriptStore[] = []
afterEach(() => {
  vi.restoreAllMocks()
  for (const store of stores) {
    try {
      store.closeAll()
    } catch {
      // A test that failed a sync on purpose.
    }
  }
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
  dirs = []
  stores = []
})

function setup(options: Partial<JsonlTranscriptOptions> & { maxOpen: number }) {
  const root = tempDir('spindle-pool')
  dirs.push(root)
  const paths = dataPaths(root)
  const store = createJsonlTranscriptStore({ paths, durability: 'process', ...options })
  stores.push(store)
  const file = (id: string): string => path.join(paths.threads, id, TRANSCRIPT_FILE)
  /** The transcript files this process holds descriptors on, one entry per descriptor. */
  const held = (): string[] => {
    const real = fs.realpathSync(paths.threads)
    const files: string[] = []
    for (const fd of fs.readdirSync('/proc/self/fd')) {
      let target: string
      try {
        target = fs.readlinkSync(`/proc/self/fd/${fd}`)
      } catch {
        continue
      }
      if (target.startsWith(real) && target.endsWith(TRANSCRIPT_FILE)) files.push(path.basename(path.dirname(target)))
    }
    return files.sort()
  }
  const journals = (): string[] => (fs.existsSync(paths.journal) ? fs.readdirSync(paths.journal) : [])
  return { root, paths, store, file, held, journals }
}

function expectChain(entries: readonly TranscriptEntry[], count: number): void {
  expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: count }, (_, i) => i + 1))
  let prev = ''
  for (const e of entries) {
    expect(e.hash).toBe(entryHash(prev, e.seq, e.ts, e.type, e.data))
    prev = e.hash
  }
}

type Callback = (error: NodeJS.ErrnoException | null) => void

/** Holds every fdatasync of a thread file until `release()`; `failing` makes them fail with EIO. */
function holdFileSyncs(options: { failing?: boolean } = {}) {
  const original = fs.fdatasync
  const held: Array<() => void> = []
  const synced: string[] = []
  vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, callback: Callback) => {
    const target = fs.readlinkSync(`/proc/self/fd/${fd}`)
    if (!target.endsWith(TRANSCRIPT_FILE)) return original(fd, callback)
    held.push(() => {
      if (options.failing) return callback(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO', syscall: 'fdatasync' }))
      original(fd, (error) => (synced.push(path.basename(path.dirname(target))), callback(error)))
    })
  }) as typeof fs.fdatasync)
  return {
    held,
    synced,
    release: (): void => held.splice(0).forEach((go) => go()),
  }
}

const tick = (ms = 5): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

describe('transcript descriptor pool', () => {
  it('should hold at most maxOpen descriptors however many threads are open, keeping those written last', () => {
    const { store, held } = setup({ maxOpen: 3 })
    for (const id of ids) {
      store.open(id)
      store.append(id, 'NOTE', { id })
    }
    expect(held()).toEqual(ids.slice(-3).sort())
    // Written to again, the first thread's file is opened again and the least recently written goes.
    store.append(ids[0]!, 'NOTE', 'again')
    expect(held()).toEqual([ids[0]!, ids[8]!, ids[9]!].sort())
  })

  it('should append where the thread left off after its descriptor was given up, without reading the file again', () => {
    const { store, file } = setup({ maxOpen: 1 })
    store.open(A)
    store.append(A, 'NOTE', 1)
    store.append(A, 'NOTE', 2)
    store.open(B)
    store.append(B, 'NOTE', 'b')
    const reads = vi.spyOn(fs, 'readSync')
    const third = store.append(A, 'NOTE', 3)
    expect(reads).not.toHaveBeenCalled()
    reads.mockRestore()
    expect(third.seq).toBe(3)
    expectChain(store.read(A).entries, 3)
    expect(store.position(A).bytes).toBe(fs.statSync(file(A)).size)
    expectChain(store.read(B).entries, 1)
  })

  it('should refuse to append to a transcript replaced while its descriptor was given up, and write nothing to it', () => {
    const { store, file } = setup({ maxOpen: 1 })
    store.open(A)
    store.append(A, 'NOTE', 1)
    store.open(B)
    store.append(B, 'NOTE', 'b')
    // The fault: another file of the same content put in its place (a new inode).
    fs.copyFileSync(file(A), `${file(A)}.copy`)
    fs.renameSync(`${file(A)}.copy`, file(A))
    const before = fs.readFileSync(file(A))
    let code: string | undefined
    try {
      store.append(A, 'NOTE', 2)
    } catch (error) {
      code = isSpindleError(error) ? error.code : String(error)
    }
    expect(code).toBe('TRANSCRIPT_CORRUPT')
    expect(fs.readFileSync(file(A))).toEqual(before)
  })

  it('should set aside a stale line another writer appended while its descriptor was given up, and go on unbroken', () => {
    const found: unknown[] = []
    const { store, file } = setup({ maxOpen: 1, onForeignTail: (tail) => found.push(tail) })
    store.open(A)
    store.append(A, 'NOTE', 1)
    const last = fs.readFileSync(file(A), 'utf8')
    store.open(B)
    store.append(B, 'NOTE', 'b')
    // The fault: a writer behind this one (it lost the thread) lands a line this store already has.
    fs.appendFileSync(file(A), last)
    store.append(A, 'NOTE', 2)
    expect(found).toEqual([expect.objectContaining({ threadId: A, offset: last.length, bytes: last.length })])
    expectChain(store.read(A).entries, 2)
  })

  it('should give its idle descriptors up and open the file when the process is out of descriptors', () => {
    const { store, held } = setup({ maxOpen: 5 })
    for (const id of ids.slice(0, 5)) {
      store.open(id)
      store.append(id, 'NOTE', id)
    }
    expect(held()).toHaveLength(5)
    // The fault: the next open of a transcript finds no descriptor left (host code took them all).
    const original = fs.openSync
    let refused = 0
    vi.spyOn(fs, 'openSync').mockImplementation(((file: fs.PathLike, flags?: fs.OpenMode, mode?: fs.Mode) => {
      if (refused === 0 && String(file).endsWith(TRANSCRIPT_FILE)) {
        refused++
        throw Object.assign(new Error(`EMFILE: too many open files, open '${String(file)}'`), { code: 'EMFILE', syscall: 'open', path: String(file) })
      }
      return original(file, flags as fs.OpenMode, mode)
    }) as typeof fs.openSync)
    store.open(ids[5]!)
    store.append(ids[5]!, 'NOTE', 'new')
    expect(refused).toBe(1)
    // Every idle descriptor was given up for it; the threads go on where they were.
    expect(held()).toEqual([ids[5]!])
    store.append(ids[0]!, 'NOTE', 'again')
    expectChain(store.read(ids[0]!).entries, 2)
  })

  describe('durability fsync', () => {
    it('should not give up a descriptor whose fdatasync is under way: the file opened past the bound meanwhile goes next', async () => {
      const { store, held, journals } = setup({ maxOpen: 1, durability: 'fsync' })
      store.open(A)
      store.append(A, 'NOTE', 1)
      await store.sync()
      const syncs = holdFileSyncs()
      const files = store.sync({ files: true })
      await tick()
      expect(syncs.held).toHaveLength(1)
      // A's descriptor is under its round's fdatasync: B's file is opened one past the bound.
      store.open(B)
      store.append(B, 'NOTE', 'b')
      await store.sync()
      expect(held()).toEqual([A, B].sort())
      syncs.release()
      await files
      expect(syncs.synced).toEqual([A])
      // A's epoch went with its round; B's line, journaled since, keeps the newer one.
      expect(journals()).toHaveLength(1)
      // The next file opened makes room again: A's descriptor goes at once, B's once its line is durable.
      vi.restoreAllMocks()
      store.open(C)
      store.append(C, 'NOTE', 'c')
      expect(held()).toEqual([B, C].sort())
      await store.sync({ files: true })
      expect(held()).toEqual([C])
      expect(journals()).toHaveLength(0)
      for (const id of [A, B, C]) expectChain(store.read(id).entries, 1)
    })

    it('should make the lines of a descriptor given up durable before closing it, and have the next files sync wait for that', async () => {
      const { store, held, journals } = setup({ maxOpen: 1, durability: 'fsync' })
      store.open(A)
      store.append(A, 'NOTE', 1)
      await store.sync()
      const syncs = holdFileSyncs()
      // A's line is journaled, not fdatasynced: giving its descriptor up starts its fdatasync.
      store.open(B)
      store.append(B, 'NOTE', 'b')
      await tick()
      expect(syncs.held).toHaveLength(1)
      expect(held()).toEqual([A, B].sort())
      let done = false
      const files = store.sync({ files: true }).then(() => (done = true))
      await tick(20)
      // The files sync (which deletes the journal epochs) waits for A's fdatasync, started before it.
      expect(done).toBe(false)
      expect(journals()).toHaveLength(1)
      while (syncs.held.length > 0 || !done) {
        syncs.release()
        await tick()
      }
      await files
      expect(syncs.synced).toContain(A)
      expect(held()).toEqual([B])
      expect(journals()).toHaveLength(0)
    })

    it('should keep the journal and report the failure when the fdatasync of a descriptor given up fails', async () => {
      const { store, held, journals } = setup({ maxOpen: 1, durability: 'fsync' })
      store.open(A)
      store.append(A, 'NOTE', 1)
      await store.sync()
      const syncs = holdFileSyncs({ failing: true })
      store.open(B)
      store.append(B, 'NOTE', 'b')
      await tick()
      syncs.release()
      await tick()
      vi.restoreAllMocks()
      // The kernel may have dropped A's pages: no later sync may vouch for its file.
      await expect(store.sync({ files: true })).rejects.toThrow(/fdatasync of .*pool0.* failed/)
      expect(held()).toEqual([B])
      await expect(store.sync({ files: true })).rejects.toThrow(/fdatasync of .*pool0.* failed/)
      store.closeAll()
      expect(journals().length).toBeGreaterThan(0)
    })

    it('should make a descriptor given up durable at once when as many wait for their fdatasync as the pool holds', async () => {
      const { store, held } = setup({ maxOpen: 2, durability: 'fsync' })
      const syncs = holdFileSyncs()
      const now = vi.spyOn(fs, 'fdatasyncSync')
      for (const id of ids) {
        store.open(id)
        store.append(id, 'NOTE', id)
        // Two current, at most two given up and waiting, one past while all are under way.
        expect(held().length).toBeLessThanOrEqual(5)
      }
      expect(now).toHaveBeenCalled()
      syncs.release()
      vi.restoreAllMocks()
      await store.sync({ files: true })
      expect(held()).toEqual(ids.slice(-2).sort())
      for (const id of ids) expectChain(store.read(id).entries, 1)
    })
  })
})
