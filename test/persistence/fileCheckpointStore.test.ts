import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { writeFileAtomic, writeFileAtomicSync } from '../../persistence/atomicFile.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createMemoryCheckpointStore } from '../../persistence/memoryCheckpointStore.js'
import type { DataPaths } from '../../persistence/paths.js'
import { dataPaths } from '../../persistence/paths.js'
import type { CheckpointStore, Durability } from '../../persistence/types.js'
import { checkpointContract, envelope } from '../contract/checkpoints.contract.js'
import { tempDir } from '../helpers/dirs.js'

checkpointContract('memory', () => ({ store: createMemoryCheckpointStore() }))
for (const durability of ['fsync', 'process'] as const) {
  checkpointContract(`file (${durability})`, () => {
    const dir = tempDir()
    return { store: createFileCheckpointStore({ paths: dataPaths(dir), durability }), destroy: () => fs.rmSync(dir, { recursive: true, force: true }) }
  })
}

const made: string[] = []
afterEach(() => {
  for (const dir of made.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

function freshDir(): string {
  const dir = tempDir()
  made.push(dir)
  return dir
}

interface OnDisk {
  paths: DataPaths
  store: CheckpointStore
  /** state.json of a thread. */
  file: (id: string) => string
}

function fileStore(durability: Durability = 'fsync'): OnDisk {
  const paths = dataPaths(freshDir())
  return { paths, store: createFileCheckpointStore({ paths, durability }), file: (id) => path.join(paths.threads, id, 'state.json') }
}

/** One row of the recovery matrix: a good state, a fault injected into it, and what must still hold. */
interface Recovery {
  scenario: string
  setup: (disk: OnDisk) => Promise<void>
  fault: (disk: OnDisk) => Promise<void> | void
  holds: string
  check: (disk: OnDisk) => Promise<void> | void
}

const T = 'research-abcdefghijkl'
const BAD = 'bad-abcdefghijkl'
const GOOD = 'good-abcdefghijkl'

async function synced(disk: OnDisk, turns: number): Promise<void> {
  disk.store.stage(T, envelope(T, turns))
  await disk.store.sync()
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/** The thread directory BAD is a regular file, so writing its state.json fails; GOOD is fine. */
function blockThreadDir(disk: OnDisk): void {
  fs.mkdirSync(disk.paths.threads, { recursive: true })
  fs.writeFileSync(path.join(disk.paths.threads, BAD), 'not a directory')
  disk.store.stage(BAD, envelope(BAD, 1))
  disk.store.stage(GOOD, envelope(GOOD, 1))
}

const recoveryMatrix: Recovery[] = [
  {
    scenario: 'state.json cut in half',
    setup: (disk) => synced(disk, 2),
    fault: (disk) => {
      const text = fs.readFileSync(disk.file(T), 'utf8')
      fs.writeFileSync(disk.file(T), text.slice(0, text.length / 2))
    },
    holds: 'throw STATE_CORRUPT naming the file and the rebuild command on load',
    check: (disk) => {
      expect(() => disk.store.load(T)).toThrow(
        expect.objectContaining({
          code: 'STATE_CORRUPT',
          message: expect.stringMatching(new RegExp(`${escape(disk.file(T))}.*rebuilds state.json from it`)),
          details: { path: disk.file(T), threadId: T },
        }),
      )
    },
  },
  {
    scenario: 'a crash left a half-written state.json.tmp next to a good state.json',
    setup: (disk) => synced(disk, 4),
    fault: (disk) => fs.writeFileSync(`${disk.file(T)}.tmp`, '{"v":1,"thre'),
    holds: 'load the last good state.json',
    check: (disk) => expect(disk.store.load(T)).toEqual(envelope(T, 4)),
  },
  {
    scenario: 'state.json written by a newer spindle (v: 99)',
    setup: (disk) => synced(disk, 1),
    fault: (disk) => fs.writeFileSync(disk.file(T), JSON.stringify({ ...envelope(T), v: 99 })),
    holds: 'throw STATE_VERSION_UNSUPPORTED naming the version and the file on load',
    check: (disk) => {
      expect(() => disk.store.load(T)).toThrow(
        expect.objectContaining({ code: 'STATE_VERSION_UNSUPPORTED', message: expect.stringMatching(new RegExp(`${escape(disk.file(T))}.*99`)) }),
      )
    },
  },
  {
    scenario: "another thread's state.json copied into the directory",
    setup: (disk) => synced(disk, 1),
    fault: (disk) => fs.writeFileSync(disk.file(T), JSON.stringify(envelope('other-abcdefghijkl'))),
    holds: 'throw STATE_CORRUPT naming the other thread on load',
    check: (disk) => {
      expect(() => disk.store.load(T)).toThrow(expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining('other-abcdefghijkl') }))
    },
  },
  {
    scenario: 'state.json without its snapshot',
    setup: (disk) => synced(disk, 1),
    fault: (disk) => {
      const { snapshot: _dropped, ...rest } = envelope(T)
      fs.writeFileSync(disk.file(T), JSON.stringify(rest))
    },
    holds: 'throw STATE_CORRUPT naming the missing field on load',
    check: (disk) => {
      expect(() => disk.store.load(T)).toThrow(expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining('"snapshot"') }))
    },
  },
  {
    scenario: 'state.json whose snapshot is valid JSON but no state of the thread machine',
    setup: (disk) => synced(disk, 1),
    fault: (disk) => fs.writeFileSync(disk.file(T), JSON.stringify({ ...envelope(T), snapshot: { status: 'active', value: { nonsense: 'x' }, context: {} } })),
    holds: 'throw STATE_CORRUPT naming the file and the state on load (recovery then rebuilds it from the transcript)',
    check: (disk) => {
      expect(() => disk.store.load(T)).toThrow(
        expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining(`${disk.file(T)} is not a valid thread state: its snapshot's state {"nonsense":"x"}`) }),
      )
    },
  },
  {
    scenario: 'state.json is a directory',
    setup: async () => {},
    fault: (disk) => fs.mkdirSync(disk.file(T), { recursive: true }),
    holds: 'throw DATA_DIR_INVALID naming it on load (not STATE_CORRUPT: a rebuilt file could not replace it)',
    check: (disk) => {
      expect(() => disk.store.load(T)).toThrow(expect.objectContaining({ code: 'DATA_DIR_INVALID', message: expect.stringContaining(`${disk.file(T)} is a directory`) }))
    },
  },
  {
    scenario: "one thread's directory is a regular file",
    setup: async () => {},
    fault: blockThreadDir,
    holds: 'reject the sync naming that thread and its file',
    check: async (disk) => {
      const error = await disk.store.sync().then(() => null, (e: unknown) => e as Error)
      expect(error?.message).toContain(BAD)
      expect(error?.message).toContain(path.join(disk.paths.threads, BAD, 'state.json.tmp'))
      expect(error?.message).not.toContain(GOOD)
    },
  },
  {
    scenario: "one thread's directory is a regular file",
    setup: async () => {},
    fault: blockThreadDir,
    holds: 'still write the other threads of the batch',
    check: async (disk) => {
      await disk.store.sync().catch(() => {})
      expect(disk.store.load(GOOD)).toEqual(envelope(GOOD, 1))
    },
  },
  {
    scenario: "one thread's directory is a regular file",
    setup: async () => {},
    fault: blockThreadDir,
    holds: 'write the failed thread on the next sync once the fault is gone',
    check: async (disk) => {
      await disk.store.sync().catch(() => {})
      fs.rmSync(path.join(disk.paths.threads, BAD))
      await disk.store.sync()
      expect(disk.store.load(BAD)).toEqual(envelope(BAD, 1))
    },
  },
  {
    scenario: 'the transcript sync before publishing fails',
    setup: (disk) => synced(disk, 1),
    fault: async (disk) => {
      disk.store.stage(T, envelope(T, 2))
      await disk.store.sync({ beforePublish: () => Promise.reject(new Error('EIO')) }).catch(() => {})
    },
    holds: 'keep the previous state.json and no temp file',
    check: (disk) => {
      expect(disk.store.load(T)).toEqual(envelope(T, 1))
      expect(fs.readdirSync(path.dirname(disk.file(T)))).toEqual(['state.json'])
    },
  },
  (() => {
    let publish = () => {}
    let syncing = Promise.resolve()
    return {
      scenario: 'the process stops after the temp file is written, before the rename',
      setup: (disk: OnDisk) => synced(disk, 1),
      fault: async (disk: OnDisk) => {
        disk.store.stage(T, envelope(T, 2))
        syncing = disk.store.sync({ beforePublish: () => new Promise<void>((resolve) => (publish = resolve)) })
        // Parked before its rename: what is on disk now is what a crash at this point leaves.
        await vi.waitFor(() => expect(fs.readFileSync(`${disk.file(T)}.tmp`, 'utf8')).toBe(JSON.stringify(envelope(T, 2))))
      },
      holds: 'load the previous state.json until the batch is published',
      check: async (disk: OnDisk) => {
        expect(disk.store.load(T)).toEqual(envelope(T, 1))
        publish()
        await syncing
        expect(disk.store.load(T)).toEqual(envelope(T, 2))
      },
    }
  })(),
  {
    scenario: "a caller passes the path-traversal id '../x-aaaaaaaaaaaa'",
    setup: async () => {},
    fault: () => {},
    holds: 'refuse it with INVALID_THREAD_ID before touching the disk',
    check: (disk) => {
      expect(() => disk.store.stage('../x-aaaaaaaaaaaa', envelope('../x-aaaaaaaaaaaa'))).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
      expect(() => disk.store.load('../../etc/passwd')).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
      expect(fs.existsSync(disk.paths.threads)).toBe(false)
    },
  },
  {
    scenario: 'threads/ holds a directory that is not a thread id and one without state.json',
    setup: (disk) => synced(disk, 1),
    fault: (disk) => {
      fs.mkdirSync(path.join(disk.paths.threads, 'Not An Id'))
      fs.mkdirSync(path.join(disk.paths.threads, 'empty-abcdefghijkl'))
    },
    holds: 'list only the thread with a state.json',
    check: (disk) => expect(disk.store.list()).toEqual([T]),
  },
]

describe('file checkpoint store: recovery matrix', () => {
  for (const row of recoveryMatrix) {
    it(`should ${row.holds} (${row.scenario})`, async () => {
      const disk = fileStore()
      await row.setup(disk)
      await row.fault(disk)
      await row.check(disk)
    })
  }
})

describe('file checkpoint store: durability', () => {
  for (const durability of ['fsync', 'process'] as const) {
    it(`should round-trip and leave no temp files with durability '${durability}'`, async () => {
      const disk = fileStore(durability)
      for (let turns = 0; turns < 3; turns++) {
        disk.store.stage(T, envelope(T, turns))
        await disk.store.sync()
      }
      expect(disk.store.load(T)).toEqual(envelope(T, 2))
      expect(fs.readdirSync(path.dirname(disk.file(T)))).toEqual(['state.json'])
    })

    // Issue 22: a stopped thread's sync (`only`) runs beside a sync of everything under way.
    it(`should leave the newest state.json and no temp file when an \`only\` sync took a thread whose temp file a sync under way had written ('${durability}')`, async () => {
      const disk = fileStore(durability)
      await synced(disk, 1)
      disk.store.stage(T, envelope(T, 2))
      let release!: () => void
      const everything = disk.store.sync({ beforePublish: () => new Promise<void>((resolve) => (release = resolve)) })
      // The sync under way writes its temp file before it waits to publish; nothing else says when.
      const temp = `${disk.file(T)}.tmp`
      for (let turn = 0; turn < 10_000 && !fs.existsSync(temp); turn++) await new Promise((resolve) => setImmediate(resolve))
      expect(fs.existsSync(temp)).toBe(true)
      disk.store.stage(T, envelope(T, 3))
      await disk.store.sync({ only: new Set([T]) })
      expect(disk.store.load(T)).toEqual(envelope(T, 3))
      release()
      await everything
      expect(disk.store.load(T)).toEqual(envelope(T, 3))
      expect(fs.readdirSync(path.dirname(disk.file(T)))).toEqual(['state.json'])
    })
  }
})

describe('file checkpoint store: a thread folder swapped for a link after it was checked', () => {
  // Setup: a thread's folder checked and written once (it is remembered as real: no lstat at the
  // next write). Fault: the folder moved aside and a link to a decoy folder put in its place.
  async function swappedAfterCheck(onFolderInvalid?: (id: string, error: Error) => void) {
    const paths = dataPaths(freshDir())
    const store = createFileCheckpointStore({ paths, durability: 'fsync', ...(onFolderInvalid ? { onFolderInvalid } : {}) })
    store.stage(BAD, envelope(BAD, 1))
    store.stage(GOOD, envelope(GOOD, 1))
    await store.sync()
    const folder = path.join(paths.threads, BAD)
    fs.renameSync(folder, path.join(freshDir(), BAD))
    const decoy = freshDir()
    fs.writeFileSync(path.join(decoy, 'state.json'), 'the decoy')
    fs.symlinkSync(decoy, folder)
    store.stage(BAD, envelope(BAD, 2))
    store.stage(GOOD, envelope(GOOD, 2))
    return { store, folder, decoy }
  }

  it('should write nothing through the link and reject the sync naming it, then retry it', async () => {
    const { store, folder, decoy } = await swappedAfterCheck()
    const error = await store.sync().then(() => null, (e: unknown) => e as Error)
    expect(error?.message).toContain(`${folder} is a symbolic link (to ${decoy})`)
    expect(fs.readdirSync(decoy)).toEqual(['state.json'])
    expect(fs.readFileSync(path.join(decoy, 'state.json'), 'utf8')).toBe('the decoy')
    expect(store.load(GOOD)).toEqual(envelope(GOOD, 2))
    await expect(store.sync()).rejects.toThrow(folder)
  })

  it('should hand the thread to onFolderInvalid instead, drop it, and resolve the sync', async () => {
    const handed: Array<[string, string]> = []
    const { store, folder, decoy } = await swappedAfterCheck((id, error) => handed.push([id, error.message]))
    await store.sync()
    expect(handed).toEqual([[BAD, expect.stringContaining(`${folder} is a symbolic link (to ${decoy})`)]])
    expect(fs.readdirSync(decoy)).toEqual(['state.json'])
    expect(fs.readFileSync(path.join(decoy, 'state.json'), 'utf8')).toBe('the decoy')
    expect(store.load(GOOD)).toEqual(envelope(GOOD, 2))
    await store.sync()
    expect(handed).toHaveLength(1)
  })
})

describe('writeFileAtomic', () => {
  const variants = {
    writeFileAtomic: (file: string, data: string) => writeFileAtomic(file, data, { fsync: true }),
    writeFileAtomicSync: async (file: string, data: string) => writeFileAtomicSync(file, data, { fsync: true }),
  }
  for (const [name, write] of Object.entries(variants)) {
    it(`should replace the content and leave no temp file (${name})`, async () => {
      const dir = freshDir()
      const file = path.join(dir, 'f.json')
      fs.writeFileSync(file, 'old')
      await write(file, 'new')
      expect(fs.readFileSync(file, 'utf8')).toBe('new')
      expect(fs.readdirSync(dir)).toEqual(['f.json'])
    })

    it(`should remove its temp file and rethrow when the rename fails (${name})`, async () => {
      const dir = freshDir()
      // A non-empty directory as the target: the temp file is written, then the rename fails.
      const target = path.join(dir, 'sub')
      fs.mkdirSync(path.join(target, 'inner'), { recursive: true })
      await expect(write(target, 'new')).rejects.toThrow()
      expect(fs.readdirSync(dir)).toEqual(['sub'])
      expect(fs.readdirSync(target)).toEqual(['inner'])
    })
  }
})
