/**
 * Recovery matrix rows "power loss after the journal vouched for a line": thread files are
 * fdatasynced only in the background checkpoint round, so a power loss can take their newest
 * lines; the transcript journal gives them back, verified, and only to the file they were written
 * for. A power loss is simulated by cutting the thread files back to what was durable before the
 * journal sync (the journal itself was fdatasynced, so it keeps what it held).
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths, TRANSCRIPT_FILE } from '../../persistence/paths.js'
import type { TranscriptStore } from '../../persistence/types.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const IDS = ['alpha-aaaaaaaaaaaa', 'bravo-bbbbbbbbbbbb', 'charlie-cccccccccccc'] as const

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

function setup() {
  const dir = tempDir('spindle-journal')
  dirs.push(dir)
  const paths = dataPaths(dir)
  const store = (journal = true): TranscriptStore => {
    const s = createJsonlTranscriptStore({ paths, durability: 'fsync', journal })
    stores.push(s)
    return s
  }
  const file = (id: string): string => path.join(paths.threads, id, TRANSCRIPT_FILE)
  const journals = (): string[] => (fs.existsSync(paths.journal) ? fs.readdirSync(paths.journal).map((n) => path.join(paths.journal, n)) : [])
  /** Byte offsets where each line of a thread's file ends. */
  const lineEnds = (id: string): number[] => {
    const bytes = fs.readFileSync(file(id))
    const ends: number[] = []
    for (let i = bytes.indexOf(0x0a); i !== -1; i = bytes.indexOf(0x0a, i + 1)) ends.push(i + 1)
    return ends
  }
  return { dir, paths, store, file, journals, lineEnds }
}

/** Appends `n` entries to each thread and makes them durable through the journal only. */
async function appendAndJournal(store: TranscriptStore, ids: readonly string[], n: number, from = 0): Promise<void> {
  for (let i = from; i < from + n; i++) for (const id of ids) store.append(id, 'NOTE', { i, id, text: 'x'.repeat(i * 7) })
  await store.sync()
}

describe('transcript journal', () => {
  it('should write back the lines a power loss took from thread files, torn or garbled, and verify them', async () => {
    const { store, file, lineEnds } = setup()
    const before = store()
    for (const id of IDS) before.open(id)
    await appendAndJournal(before, IDS, 6)
    const original = Object.fromEntries(IDS.map((id) => [id, fs.readFileSync(file(id))]))
    const positions = Object.fromEntries(IDS.map((id) => [id, before.position(id)]))

    // The fault: every line gone from the first file; the second cut inside a line; the third
    // keeps two lines and then holds bytes no append wrote (a block the disk never finished).
    fs.truncateSync(file(IDS[0]), 0)
    fs.truncateSync(file(IDS[1]), lineEnds(IDS[1])[2]! + 9)
    const garbage = Buffer.from('\0\0\0\0{"seq":3,"ts"')
    fs.truncateSync(file(IDS[2]), lineEnds(IDS[2])[1]!)
    fs.appendFileSync(file(IDS[2]), garbage)

    const after = store()
    for (const id of IDS) {
      const opened = after.open(id)
      expect(opened.restored, id).toBeDefined()
      expect(fs.readFileSync(file(id)).equals(original[id]!), id).toBe(true)
      expect(opened.position).toEqual(positions[id])
      expect(opened.tail.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6])
    }
    // What the file held where the journal's lines went is kept aside, not thrown away.
    const aside = fs.readdirSync(path.dirname(file(IDS[2]))).filter((n) => n.includes('.torn-'))
    expect(aside).toHaveLength(1)
    expect(fs.readFileSync(path.join(path.dirname(file(IDS[2])), aside[0]!)).equals(garbage)).toBe(true)
    // The store goes on appending to the restored chain.
    after.append(IDS[0], 'NOTE', { more: true })
    await after.sync({ files: true })
    expect(after.read(IDS[0]).entries.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7])
  })

  it('should delete the journal epochs a files sync covers, and the rest when the store closes', async () => {
    const { store, journals } = setup()
    const s = store()
    s.open(IDS[0])
    await appendAndJournal(s, [IDS[0]], 2)
    expect(journals()).toHaveLength(1)
    await s.sync({ files: true })
    expect(journals()).toHaveLength(0)
    await appendAndJournal(s, [IDS[0]], 2, 2)
    const [epoch] = journals()
    expect(epoch).toMatch(/\.000002\.journal$/)
    s.closeAll()
    expect(journals()).toHaveLength(0)
  })

  it('should never patch a transcript replaced since the journal was written (another file, as after compaction)', async () => {
    const { store, file, lineEnds } = setup()
    const before = store()
    before.open(IDS[0])
    await appendAndJournal(before, [IDS[0]], 4)
    const kept = fs.readFileSync(file(IDS[0])).subarray(0, lineEnds(IDS[0])[1])
    fs.writeFileSync(`${file(IDS[0])}.new`, kept)
    fs.renameSync(`${file(IDS[0])}.new`, file(IDS[0]))

    const opened = store().open(IDS[0])
    expect(opened.restored).toBeUndefined()
    expect(opened.position.seq).toBe(2)
    expect(fs.readFileSync(file(IDS[0])).equals(kept)).toBe(true)
  })

  it('should refuse journal lines that do not chain to the file, and leave the file as it was', async () => {
    const { store, file, lineEnds, journals } = setup()
    const before = store()
    before.open(IDS[0])
    await appendAndJournal(before, [IDS[0]], 4)
    fs.truncateSync(file(IDS[0]), lineEnds(IDS[0])[1]!)
    const cut = fs.readFileSync(file(IDS[0]))
    // The fault: the journal's copy of entry 3 was altered (its hash no longer matches).
    const [journal] = journals()
    const text = fs.readFileSync(journal!, 'utf8')
    fs.writeFileSync(journal!, text.replace('"i":2,', '"i":9,'))

    const opened = store().open(IDS[0])
    expect(opened.restored).toBeUndefined()
    expect(opened.position.seq).toBe(2)
    expect(fs.readFileSync(file(IDS[0])).equals(cut)).toBe(true)
  })

  it('should ignore a journal record a crash cut short, and write back the whole ones before it', async () => {
    const { store, file, lineEnds, journals } = setup()
    const before = store()
    before.open(IDS[0])
    await appendAndJournal(before, [IDS[0]], 4)
    const whole = fs.readFileSync(file(IDS[0]))
    // A fifth record, half written when the power went.
    const [journal] = journals()
    const fifth = `${IDS[0]} 1 ${whole.length} {"seq":5,"ts":"2026-01-01T00:00:00.000Z","ty`
    fs.appendFileSync(journal!, fifth)
    fs.truncateSync(file(IDS[0]), lineEnds(IDS[0])[0]!)

    const opened = store().open(IDS[0])
    expect(opened.restored).toBeDefined()
    expect(opened.position.seq).toBe(4)
    expect(fs.readFileSync(file(IDS[0])).equals(whole)).toBe(true)
  })

  it('should write the lines back whatever the durability of the store that opens the directory next', async () => {
    const { paths, store, file, lineEnds } = setup()
    const before = store()
    before.open(IDS[0])
    await appendAndJournal(before, [IDS[0]], 3)
    const original = fs.readFileSync(file(IDS[0]))
    fs.truncateSync(file(IDS[0]), lineEnds(IDS[0])[0]!)

    const relaxed = createJsonlTranscriptStore({ paths, durability: 'process' })
    stores.push(relaxed)
    expect(relaxed.open(IDS[0]).restored).toBeDefined()
    expect(fs.readFileSync(file(IDS[0])).equals(original)).toBe(true)
  })

  it('should keep a thread closed after its journal sync open until the files sync has made it durable', async () => {
    const { store, journals } = setup()
    const openFds = (): number => fs.readdirSync('/proc/self/fd').length
    const s = store()
    s.open(IDS[0])
    await appendAndJournal(s, [IDS[0]], 2)
    const withThread = openFds()
    s.close(IDS[0])
    // Only the journal holds its lines durably: the file waits for the files sync, still open.
    expect(openFds()).toBe(withThread)
    await s.sync({ files: true })
    expect(openFds()).toBe(withThread - 2)
    expect(journals()).toHaveLength(0)
    expect(s.read(IDS[0]).entries).toHaveLength(2)
  })

  it('should write no journal when it is off, and fdatasync the thread files at every sync instead', async () => {
    const { store, journals } = setup()
    const s = store(false)
    s.open(IDS[0])
    await appendAndJournal(s, [IDS[0]], 3)
    expect(journals()).toHaveLength(0)
    expect(s.read(IDS[0]).entries).toHaveLength(3)
  })

  it('should keep the journal epochs until every thread file\'s fdatasync has succeeded, even for a thread closed meanwhile', async () => {
    const { store, journals, file } = setup()
    const s = store()
    for (const id of IDS) s.open(id)
    await appendAndJournal(s, IDS, 3)
    // The fault: the thread files' fdatasyncs are slow, and a thread is closed while they wait.
    const held: Array<() => void> = []
    const synced: string[] = []
    const original = fs.fdatasync
    vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      const target = fs.readlinkSync(`/proc/self/fd/${fd}`)
      if (!target.endsWith(TRANSCRIPT_FILE)) return original(fd, callback)
      held.push(() => original(fd, (error) => (synced.push(target), callback(error))))
    }) as typeof fs.fdatasync)
    const files = s.sync({ files: true })
    await new Promise((r) => setTimeout(r, 20))
    s.close(IDS[1])
    s.close(IDS[2])
    expect(journals()).toHaveLength(1)
    while (held.length > 0 || synced.length < IDS.length) {
      held.splice(0).forEach((release) => release())
      await new Promise((r) => setTimeout(r, 5))
    }
    await files
    // Each file was fdatasynced as itself (no descriptor closed under a queued sync), then the journal went.
    expect(synced.sort()).toEqual(IDS.map((id) => fs.realpathSync(file(id))).sort())
    expect(journals()).toHaveLength(0)
  })

  it('should keep every journal epoch once a thread file\'s fdatasync failed, also after that thread is closed', async () => {
    const { store, journals } = setup()
    const s = store()
    for (const id of IDS) s.open(id)
    await appendAndJournal(s, IDS, 2)
    const original = fs.fdatasync
    let failures = 0
    vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      if (failures === 0 && fs.readlinkSync(`/proc/self/fd/${fd}`).includes(IDS[0])) {
        failures++
        return setImmediate(() => callback(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' })))
      }
      return original(fd, callback)
    }) as typeof fs.fdatasync)
    await expect(s.sync({ files: true })).rejects.toThrow(/fdatasync of .* failed/)
    // The kernel may have dropped that file's pages: the journal holds the only durable copy.
    s.close(IDS[0])
    await appendAndJournal(s, [IDS[1]], 1, 2)
    await s.sync({ files: true })
    expect(journals().length).toBeGreaterThan(0)
    s.closeAll()
    expect(journals().length).toBeGreaterThan(0)
  })

  it('should not stop other threads when a closed thread\'s fdatasync failed: their lines are journaled, its are pinned', async () => {
    const { store, journals } = setup()
    const s = store()
    for (const id of IDS) s.open(id)
    await appendAndJournal(s, IDS, 2)
    s.close(IDS[0])
    const original = fs.fdatasync
    vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`).includes(IDS[0])) {
        return setImmediate(() => callback(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' })))
      }
      return original(fd, callback)
    }) as typeof fs.fdatasync)
    await expect(s.sync({ files: true })).rejects.toThrow(/fdatasync of .* failed/)
    // The others go on: their next lines are durable through the journal, and checkpoints resume.
    await appendAndJournal(s, [IDS[1], IDS[2]], 1, 2)
    await expect(s.sync({ files: true })).resolves.toBeUndefined()
    expect(journals().length).toBeGreaterThan(0)
  })

  // Issue 22: a stopped thread's state.json points into its own file, made durable for it alone.
  it("should fdatasync just the named threads' files, delete no journal epoch, and leave the rest to the next files sync", async () => {
    const { store, journals } = setup()
    const s = store()
    for (const id of IDS) s.open(id)
    await appendAndJournal(s, IDS, 2)
    const original = fs.fdatasync
    const synced: string[] = []
    vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      synced.push(fs.readlinkSync(`/proc/self/fd/${fd}`))
      return original(fd, callback)
    }) as typeof fs.fdatasync)
    await s.sync({ threads: [IDS[0]] })
    expect(synced.map((file) => path.basename(path.dirname(file)))).toEqual([IDS[0]])
    expect(journals()).toHaveLength(1)
    synced.length = 0
    await s.sync({ files: true })
    expect(synced.map((file) => path.basename(path.dirname(file))).sort()).toEqual([IDS[1], IDS[2]])
    expect(journals()).toHaveLength(0)
  })

  it('should keep the journal when the store is closed while a files sync is still running', async () => {
    const { store, journals } = setup()
    const s = store()
    s.open(IDS[0])
    await appendAndJournal(s, [IDS[0]], 2)
    const original = fs.fdatasync
    const held: Array<() => void> = []
    vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      held.push(() => original(fd, callback))
    }) as typeof fs.fdatasync)
    const files = s.sync({ files: true })
    await new Promise((r) => setTimeout(r, 10))
    s.closeAll()
    expect(journals().length).toBeGreaterThan(0)
    held.splice(0).forEach((release) => release())
    await files
  })

  it('should take a journal whose header names this very pid but another start time as a gone writer\'s (PID 1 of a restarted container)', async () => {
    const { store, journals, paths } = setup()
    const writer = store(true)
    writer.open(IDS[0])
    await appendAndJournal(writer, [IDS[0]], 2)
    await writer.sync({ files: true })
    expect(journals()).toEqual([])
    // A journal left by an earlier process that had this pid: its lines are all in the file.
    writer.append(IDS[0], 'NOTE', { late: true })
    await writer.sync()
    const [epoch] = journals()
    const text = fs.readFileSync(epoch!, 'utf8')
    const earlier = path.join(paths.journal, `${process.pid}-earlier.000001.journal`)
    fs.writeFileSync(earlier, JSON.stringify({ 'spindle-journal': 1, host: os.hostname(), pid: process.pid, start: 'another' }) + '\n' + text.split('\n').slice(1).join('\n'))
    const settled = await store().settleJournals!()
    expect(settled.removed).toEqual([earlier])
  })

  it('should write back records that name the file by its inode alone (a filesystem without birth times)', async () => {
    const { store, file, lineEnds, journals } = setup()
    const before = store()
    before.open(IDS[0])
    await appendAndJournal(before, [IDS[0]], 3)
    const original = fs.readFileSync(file(IDS[0]))
    fs.truncateSync(file(IDS[0]), lineEnds(IDS[0])[0]!)
    const [journal] = journals()
    fs.writeFileSync(journal!, fs.readFileSync(journal!, 'utf8').replace(/ (\d+)-\d+ /g, ' $1-0 '))

    expect(store().open(IDS[0]).restored).toBeDefined()
    expect(fs.readFileSync(file(IDS[0])).equals(original)).toBe(true)
  })

  it('should write back lines lost after a line longer than a megabyte', async () => {
    const { store, file } = setup()
    const before = store()
    before.open(IDS[0])
    before.append(IDS[0], 'NOTE', { big: 'y'.repeat(3 * 1024 * 1024) })
    await before.sync({ files: true })
    const durable = fs.statSync(file(IDS[0])).size
    await appendAndJournal(before, [IDS[0]], 2)
    const original = fs.readFileSync(file(IDS[0]))
    fs.truncateSync(file(IDS[0]), durable)

    const opened = store().open(IDS[0])
    expect(opened.restored).toBeDefined()
    expect(fs.readFileSync(file(IDS[0])).equals(original)).toBe(true)
  })

  it('should write nothing back when two journals disagree about the same bytes', async () => {
    const { store, file, lineEnds, journals, paths } = setup()
    const before = store()
    before.open(IDS[0])
    await appendAndJournal(before, [IDS[0]], 3)
    fs.truncateSync(file(IDS[0]), lineEnds(IDS[0])[0]!)
    const cut = fs.readFileSync(file(IDS[0]))
    // A second journal claims other bytes at the second line's offset.
    const [journal] = journals()
    const text = fs.readFileSync(journal!, 'utf8')
    fs.writeFileSync(path.join(paths.journal, '1-forged.000001.journal'), text.replace('"i":1,', '"i":7,'))

    const opened = store().open(IDS[0])
    expect(opened.restored).toBeUndefined()
    expect(fs.readFileSync(file(IDS[0])).equals(cut)).toBe(true)
  })

  it('should judge a dead process\'s journal by what it holds when settling, not when first read', async () => {
    const { store, file, journals, paths } = setup()
    // A journal whose writer is gone: a pid that has exited, on this host.
    const exited = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' })
    const deadPid = Number(exited.stdout)
    const writer = store()
    for (const id of IDS.slice(0, 2)) writer.open(id)
    await appendAndJournal(writer, [IDS[0]], 2)
    const [own] = journals()
    const dead = path.join(paths.journal, `${deadPid}-gone.000001.journal`)
    const header = JSON.stringify({ 'spindle-journal': 1, host: os.hostname(), pid: deadPid }) + '\n'
    const records = (text: string) => text.split('\n').slice(1).join('\n')
    fs.writeFileSync(dead, header + records(fs.readFileSync(own!, 'utf8')))

    const reader = store()
    // Its first open of an existing file reads the journals.
    reader.open(IDS[0])
    // After the reader first read it, the dead journal had grown: lines of a second thread that
    // its file then lost.
    await appendAndJournal(writer, [IDS[1]], 2)
    fs.writeFileSync(dead, header + records(fs.readFileSync(own!, 'utf8')))
    fs.truncateSync(file(IDS[1]), 0)
    const settled = await reader.settleJournals!()
    expect(settled.removed).not.toContain(dead)
    expect(fs.existsSync(dead)).toBe(true)
    // Once the second thread has its lines back, the dead journal owes nothing and goes.
    expect(reader.open(IDS[1]).restored).toBeDefined()
    expect((await reader.settleJournals!()).removed).toEqual([dead])
  })

  it('should delete a journal of an earlier boot under another host name, and keep one of this boot', async () => {
    const { store, journals, paths } = setup()
    const writer = store()
    writer.open(IDS[0])
    await appendAndJournal(writer, [IDS[0]], 2)
    const [own] = journals()
    const records = fs.readFileSync(own!, 'utf8').split('\n').slice(1).join('\n')
    const boot = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()
    // The directory was moved from another machine, or the host was renamed across a restart.
    const earlier = path.join(paths.journal, '4242-moved.000001.journal')
    fs.writeFileSync(earlier, JSON.stringify({ 'spindle-journal': 1, host: 'old-name', pid: 4242, boot: '00000000-0000-4000-8000-000000000000' }) + '\n' + records)
    // A sibling container on this kernel: its pid means nothing here, so it may be alive.
    const sibling = path.join(paths.journal, '4243-sibling.000001.journal')
    fs.writeFileSync(sibling, JSON.stringify({ 'spindle-journal': 1, host: 'other-container', pid: 4243, boot }) + '\n' + records)

    const settled = await store().settleJournals!()
    expect(settled.removed).toEqual([earlier])
    expect(fs.existsSync(sibling)).toBe(true)
  })

  it('should delete a dead process\'s journal once every thread it names holds its lines, and not before', async () => {
    const { dir, store, file, lineEnds, journals } = setup()
    const child = spawnSync(process.execPath, [compiled('test/persistence/journalWorker.js'), dir, '5', IDS[0], IDS[1]], { encoding: 'utf8' })
    expect(child.signal, child.stderr).toBe('SIGKILL')
    expect(child.stdout).toBe('synced\n')
    expect(journals()).toHaveLength(1)
    const original = fs.readFileSync(file(IDS[0]))
    // The power loss took the first thread's last three lines; the second kept all of them.
    fs.truncateSync(file(IDS[0]), lineEnds(IDS[0])[1]!)

    const live = store()
    live.open(IDS[2])
    await appendAndJournal(live, [IDS[2]], 1)
    const mine = journals().filter((f) => path.basename(f).startsWith(`${process.pid}-`))
    expect(mine).toHaveLength(1)

    const next = store()
    // Not yet: the first thread's file still lacks lines only the dead journal holds.
    const early = await next.settleJournals!()
    expect(early.removed).toEqual([])
    expect(early.kept).toHaveLength(2)
    expect(next.open(IDS[0]).restored).toBeDefined()
    expect(fs.readFileSync(file(IDS[0])).equals(original)).toBe(true)
    const settled = await next.settleJournals!()
    expect(settled.removed).toHaveLength(1)
    // A live store's journal (this process's) is its own to delete.
    expect(journals()).toEqual(mine)
  })
})
