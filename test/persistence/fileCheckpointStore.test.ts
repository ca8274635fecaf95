import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { writeFileAtomic, writeFileAtomicSync } from '../../persistence/atomicFile.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { createMemoryCheckpointStore } from '../../persistence/memoryCheckpointStore.js'
import { dataPaths } from '../../persistence/paths.js'
import type { Durability } from '../../persistence/types.js'
import { checkpointContract, envelope } from '../contract/checkpoints.contract.js'
import { tempDir } from '../helpers/dirs.js'

checkpointContract('memory', () => ({ store: createMemoryCheckpointStore() }))
for (const durability of ['fsync', 'process'] as const) {
  checkpointContract(`file (${durability})`, () => {
    const dir = tempDir()
    return { store: createFileCheckpointStore({ paths: dataPaths(dir), durability }), destroy: () => fs.rmSync(dir, { recursive: true }) }
  })
}

function fileStore(durability: Durability = 'fsync') {
  const dir = tempDir()
  const paths = dataPaths(dir)
  return { dir, paths, store: createFileCheckpointStore({ paths, durability }), file: (id: string) => path.join(paths.threads, id, 'state.json') }
}

describe('state.json on disk', () => {
  it('should report a truncated state.json as STATE_CORRUPT naming the file', async () => {
    const { store, file } = fileStore()
    store.stage('cut-aaaaaaaaaaaa', envelope('cut-aaaaaaaaaaaa', 2))
    await store.sync()
    const text = fs.readFileSync(file('cut-aaaaaaaaaaaa'), 'utf8')
    fs.writeFileSync(file('cut-aaaaaaaaaaaa'), text.slice(0, text.length / 2))
    expect(() => store.load('cut-aaaaaaaaaaaa')).toThrow(
      expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining(file('cut-aaaaaaaaaaaa')) }),
    )
  })

  it('should ignore a half-written temp file left by a crash and load the last good state', async () => {
    const { store, file } = fileStore()
    store.stage('tmp-aaaaaaaaaaaa', envelope('tmp-aaaaaaaaaaaa', 4))
    await store.sync()
    fs.writeFileSync(`${file('tmp-aaaaaaaaaaaa')}.tmp`, '{"v":1,"thre')
    expect(store.load('tmp-aaaaaaaaaaaa')?.transcript.seq).toBe(4)
  })

  it('should refuse a schema version it does not know', async () => {
    const { store, file } = fileStore()
    store.stage('ver-aaaaaaaaaaaa', envelope('ver-aaaaaaaaaaaa'))
    await store.sync()
    fs.writeFileSync(file('ver-aaaaaaaaaaaa'), JSON.stringify({ ...envelope('ver-aaaaaaaaaaaa'), v: 99 }))
    expect(() => store.load('ver-aaaaaaaaaaaa')).toThrow(expect.objectContaining({ code: 'STATE_VERSION_UNSUPPORTED', message: expect.stringContaining('99') }))
  })

  it('should refuse a state.json that belongs to another thread or lacks a field', async () => {
    const { store, file } = fileStore()
    store.stage('own-aaaaaaaaaaaa', envelope('own-aaaaaaaaaaaa'))
    await store.sync()
    fs.writeFileSync(file('own-aaaaaaaaaaaa'), JSON.stringify(envelope('other-aaaaaaaaaaaa')))
    expect(() => store.load('own-aaaaaaaaaaaa')).toThrow(expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining('other-aaaaaaaaaaaa') }))
    const { snapshot: _drop, ...noSnapshot } = envelope('own-aaaaaaaaaaaa')
    fs.writeFileSync(file('own-aaaaaaaaaaaa'), JSON.stringify(noSnapshot))
    expect(() => store.load('own-aaaaaaaaaaaa')).toThrow(expect.objectContaining({ code: 'STATE_CORRUPT', message: expect.stringContaining('"snapshot"') }))
  })

  for (const durability of ['fsync', 'process'] as const) {
    it(`should leave no temp files behind with durability '${durability}'`, async () => {
      const { store, paths } = fileStore(durability)
      for (let i = 0; i < 3; i++) {
        store.stage('clean-aaaaaaaaaaaa', envelope('clean-aaaaaaaaaaaa', i))
        await store.sync()
      }
      expect(fs.readdirSync(path.join(paths.threads, 'clean-aaaaaaaaaaaa'))).toEqual(['state.json'])
    })
  }

  it('should write the other threads of a batch when one fails, name the failed one, and retry it', async () => {
    const { store, paths } = fileStore()
    fs.mkdirSync(paths.threads, { recursive: true })
    // A regular file where the thread directory should be: writing into it fails.
    fs.writeFileSync(path.join(paths.threads, 'bad-aaaaaaaaaaaa'), 'not a directory')
    store.stage('bad-aaaaaaaaaaaa', envelope('bad-aaaaaaaaaaaa'))
    store.stage('good-aaaaaaaaaaaa', envelope('good-aaaaaaaaaaaa'))
    await expect(store.sync()).rejects.toThrow(/bad-aaaaaaaaaaaa/)
    expect(store.load('good-aaaaaaaaaaaa')).not.toBeNull()
    fs.rmSync(path.join(paths.threads, 'bad-aaaaaaaaaaaa'))
    await store.sync()
    expect(store.load('bad-aaaaaaaaaaaa')).not.toBeNull()
  })

  it('should refuse an id that would leave the data directory', () => {
    const { store } = fileStore()
    expect(() => store.stage('../x-aaaaaaaaaaaa', envelope('../x-aaaaaaaaaaaa'))).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
    expect(() => store.load('../../etc/passwd')).toThrow(expect.objectContaining({ code: 'INVALID_THREAD_ID' }))
  })

  it('should list only directories that are thread ids with a state.json', async () => {
    const { store, paths } = fileStore()
    store.stage('listed-aaaaaaaaaaaa', envelope('listed-aaaaaaaaaaaa'))
    await store.sync()
    fs.mkdirSync(path.join(paths.threads, 'Not An Id'))
    fs.mkdirSync(path.join(paths.threads, 'empty-aaaaaaaaaaaa'))
    expect(store.list()).toEqual(['listed-aaaaaaaaaaaa'])
  })
})

describe('atomic file replacement', () => {
  it('should replace the content and leave no temp file, sync and async', async () => {
    const dir = tempDir()
    const file = path.join(dir, 'f.json')
    writeFileAtomicSync(file, 'one', { fsync: true })
    await writeFileAtomic(file, 'two', { fsync: true })
    expect(fs.readFileSync(file, 'utf8')).toBe('two')
    expect(fs.readdirSync(dir)).toEqual(['f.json'])
  })

  it('should keep the old content and no temp file when the write fails', () => {
    const dir = tempDir()
    const file = path.join(dir, 'f.json')
    writeFileAtomicSync(file, 'old', { fsync: false })
    // Renaming onto a directory fails after the temp file was written.
    const target = path.join(dir, 'sub')
    fs.mkdirSync(path.join(target, 'inner'), { recursive: true })
    expect(() => writeFileAtomicSync(target, 'new', { fsync: false })).toThrow()
    expect(fs.readFileSync(file, 'utf8')).toBe('old')
    expect(fs.readdirSync(dir).sort()).toEqual(['f.json', 'sub'])
  })
})
