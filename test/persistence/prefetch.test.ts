/**
 * Recovery reads the files of many threads ahead on a worker thread. The scenarios: what the
 * worker hands over, descriptors that must outlive the worker, descriptors nobody took, files it
 * could not read cleanly; and a whole recovery above the prefetch threshold, with damaged threads
 * among healthy ones, that must end as a recovery without it would.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { Runtime } from '../../src/index.js'
import { createRuntime, defineTool, scriptedModel, verifyReplay } from '../../src/index.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { bootThreadFileReader, prefetchThreadFiles } from '../../persistence/prefetch.js'
import type { PrefetchedTranscript } from '../../persistence/prefetch.js'
import { compiled, tempDir } from '../helpers/dirs.js'
import { inState, until } from '../helpers/threads.js'

const openFds = (): number => fs.readdirSync('/proc/self/fd').length
/**
 * The descriptor count once it holds still for 200 ms: a worker an earlier test let go releases
 * its own loop's descriptors when its thread ends, which may be after that test returned.
 */
async function settledFds(): Promise<number> {
  let last = openFds()
  for (let waited = 0; waited < 5_000; waited += 200) {
    await new Promise((r) => setTimeout(r, 200))
    const now = openFds()
    if (now === last) return now
    last = now
  }
  return last
}
/**
 * The descriptor count once it is down to `before`, or after 20 s: `close` leaves a worker that
 * takes over 2 s to stop (a loaded CI machine) to release the rest when it exits.
 */
async function fdsDownTo(before: number): Promise<number> {
  for (let waited = 0; openFds() > before && waited < 20_000; waited += 50) await new Promise((r) => setTimeout(r, 50))
  return openFds()
}
const fdOf = (t: PrefetchedTranscript | undefined): number => (t && 'fd' in t ? t.fd : -1)

function thread(root: string, id: string, files: { state?: string; transcript?: string }): void {
  const dir = path.join(root, id)
  fs.mkdirSync(dir, { recursive: true })
  if (files.state !== undefined) fs.writeFileSync(path.join(dir, 'state.json'), files.state)
  if (files.transcript !== undefined) fs.writeFileSync(path.join(dir, 'transcript.jsonl'), files.transcript)
}

const open: Runtime[] = []
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

describe.skipIf(!fs.existsSync('/proc/self/fd'))('prefetching thread files on a worker', () => {
  it('should hand over each file as it is on disk, with descriptors that still append to their own file after the worker exited', async () => {
    const root = tempDir('spindle-prefetch')
    const long = `${'x'.repeat(20_000)}\n`
    thread(root, 'both-aaaaaaaaaaaa', { state: '{"v":2}', transcript: 'line one\n' })
    thread(root, 'nostate-aaaaaaaaaaaa', { transcript: 'only a transcript\n' })
    thread(root, 'notranscript-aaaaaaaaaaaa', { state: '{"v":2,"n":3}' })
    thread(root, 'long-aaaaaaaaaaaa', { state: '{}', transcript: long })
    const before = await settledFds()
    const prefetch = prefetchThreadFiles(root, ['both-aaaaaaaaaaaa', 'nostate-aaaaaaaaaaaa', 'notranscript-aaaaaaaaaaaa', 'long-aaaaaaaaaaaa'])

    const both = prefetch.take('both-aaaaaaaaaaaa')!
    expect(both.state).toEqual({ bytes: Buffer.from('{"v":2}') })
    expect(both.transcript).toMatchObject({ size: 9, start: 0, chunk: Buffer.from('line one\n') })
    const nostate = prefetch.take('nostate-aaaaaaaaaaaa')!
    expect(nostate).toMatchObject({ state: { missing: true }, transcript: { size: 18 } })
    expect(prefetch.take('notranscript-aaaaaaaaaaaa')).toEqual({ state: { bytes: Buffer.from('{"v":2,"n":3}') }, transcript: { missing: true } })
    const tail = prefetch.take('long-aaaaaaaaaaaa')!.transcript as Extract<PrefetchedTranscript, { fd: number }>
    // Only the last bytes of a long transcript: the anchor line and the tail after state.json.
    expect(tail).toMatchObject({ size: long.length, start: long.length - tail.chunk.length })
    expect(tail.chunk.length).toBeLessThan(long.length)
    expect(tail.chunk.toString()).toBe(long.slice(tail.start))
    expect(prefetch.take('long-aaaaaaaaaaaa')).toBeUndefined()

    await prefetch.close()
    // The worker is gone; the descriptors it opened and handed over are not.
    fs.writeSync(fdOf(both.transcript), 'line two\n')
    expect(fs.readFileSync(path.join(root, 'both-aaaaaaaaaaaa', 'transcript.jsonl'), 'utf8')).toBe('line one\nline two\n')
    for (const fd of [fdOf(both.transcript), fdOf(nostate.transcript), tail.fd]) fs.closeSync(fd)
    expect(await fdsDownTo(before)).toBe(before)
  })

  it('should close the descriptors of threads skipped over or never taken', async () => {
    const root = tempDir('spindle-prefetch-skip')
    const ids = Array.from({ length: 300 }, (_, i) => `t${i}-aaaaaaaaaaaa`)
    for (const id of ids) thread(root, id, { state: '{}', transcript: `${id}\n` })
    const before = await settledFds()
    const prefetch = prefetchThreadFiles(root, ids)
    // Taken out of reach of the ones before it: those are released on the way.
    const taken = prefetch.take(ids[150]!)!
    expect((taken.transcript as { chunk: Buffer }).chunk.toString()).toBe(`${ids[150]}\n`)
    expect(prefetch.take(ids[3]!)).toBeUndefined()
    await prefetch.close()
    fs.closeSync(fdOf(taken.transcript))
    expect(await fdsDownTo(before)).toBe(before)

    // Nothing taken at all (every thread run by another process): all of it released.
    const untouched = prefetchThreadFiles(root, ids)
    await new Promise((r) => setTimeout(r, 200))
    await untouched.close()
    expect(await fdsDownTo(before)).toBe(before)
  })

  it('should let a worker booted for nothing go, opening nothing (every thread leased elsewhere)', async () => {
    const root = tempDir('spindle-prefetch-cancel')
    thread(root, 'idle-aaaaaaaaaaaa', { state: '{}', transcript: 'a\n' })
    const before = await settledFds()
    // Awaited to its exit, not polled: booting and tearing down a worker took over 5 s on a
    // loaded CI machine.
    await bootThreadFileReader(root).cancel()
    const intoRoot = fs.readdirSync('/proc/self/fd').filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith(root)
      } catch {
        return false // closed between the listing and the read
      }
    })
    expect(intoRoot).toEqual([])
    // At most as many as before: its event loop's descriptors went with it, and a worker an
    // earlier test let go may have closed its own meanwhile.
    expect(openFds()).toBeLessThanOrEqual(before)
  })

  it('should leave a FIFO where a file belongs to the store instead of blocking on it', async () => {
    const root = tempDir('spindle-prefetch-fifo')
    thread(root, 'fifo-aaaaaaaaaaaa', { transcript: 'a\n' })
    thread(root, 'after-aaaaaaaaaaaa', { state: '{}', transcript: 'b\n' })
    execFileSync('mkfifo', [path.join(root, 'fifo-aaaaaaaaaaaa', 'state.json')])
    const prefetch = prefetchThreadFiles(root, ['fifo-aaaaaaaaaaaa', 'after-aaaaaaaaaaaa'])
    const fifo = prefetch.take('fifo-aaaaaaaaaaaa')!
    expect(fifo.state).toBeUndefined()
    expect(fifo.transcript).toMatchObject({ size: 2 })
    if (fifo.transcript && 'fd' in fifo.transcript) fs.closeSync(fifo.transcript.fd)
    expect(prefetch.take('after-aaaaaaaaaaaa')).toMatchObject({ state: { bytes: Buffer.from('{}') } })
    await prefetch.close()
  })

  it('should leave a file it could not read cleanly to the store, which reports it as it always does', async () => {
    const root = tempDir('spindle-prefetch-odd')
    thread(root, 'odd-aaaaaaaaaaaa', {})
    // A directory where state.json should be: not "missing", not readable.
    fs.mkdirSync(path.join(root, 'odd-aaaaaaaaaaaa', 'state.json'))
    fs.mkdirSync(path.join(root, 'odd-aaaaaaaaaaaa', 'transcript.jsonl'))
    const prefetch = prefetchThreadFiles(root, ['odd-aaaaaaaaaaaa'])
    expect(prefetch.take('odd-aaaaaaaaaaaa')).toEqual({})
    await prefetch.close()
  })

  it('should give up on a worker stuck in a read, leave those threads to the stores, and still close what it opened once it exits', async () => {
    const root = tempDir('spindle-prefetch-stuck')
    thread(root, 'stuck-aaaaaaaaaaaa', { transcript: 'a\n' })
    thread(root, 'after-aaaaaaaaaaaa', { state: '{}', transcript: 'b\n' })
    // The worker's first read does not come back (a hung network filesystem) until `hold` is set.
    const hold = new Int32Array(new SharedArrayBuffer(4))
    const before = await settledFds()
    const prefetch = prefetchThreadFiles(root, ['stuck-aaaaaaaaaaaa', 'after-aaaaaaaaaaaa'], { hold: hold.buffer as SharedArrayBuffer })
    expect(prefetch.take('stuck-aaaaaaaaaaaa')).toBeUndefined()
    expect(prefetch.take('after-aaaaaaaaaaaa')).toBeUndefined()
    await prefetch.close()
    // Unblocked at last, the worker finishes its batch and exits; its descriptors are closed then.
    Atomics.store(hold, 0, 1)
    Atomics.notify(hold, 0)
    expect(await fdsDownTo(before)).toBe(before)
  }, 40_000)

  it('should read what a prefetched tail does not cover from the descriptor itself', async () => {
    const dir = tempDir('spindle-prefetch-store')
    const paths = dataPaths(dir)
    const store = createJsonlTranscriptStore({ paths, durability: 'process' })
    const id = 'long-aaaaaaaaaaaa'
    store.open(id)
    for (let i = 0; i < 40; i++) store.append(id, 'note', { i, pad: 'y'.repeat(500) })
    store.closeAll()
    const prefetch = prefetchThreadFiles(paths.threads, [id])
    const read = prefetch.take(id)!
    await prefetch.close()
    // Opened from the start, so the whole file is needed: more than the prefetched tail.
    const reopened = createJsonlTranscriptStore({ paths, durability: 'process' })
    const opened = reopened.open(id, undefined, read.transcript)
    expect(opened.tail.map((e) => (e.data as { i: number }).i)).toEqual(Array.from({ length: 40 }, (_, i) => i))
    reopened.append(id, 'note', { i: 40 })
    reopened.closeAll()
    expect(fs.readFileSync(path.join(paths.threads, id, 'transcript.jsonl'), 'utf8').trim().split('\n')).toHaveLength(41)
  })
})

describe('a recovery large enough to prefetch', () => {
  const THREADS = 300
  const hangs = scriptedModel([{ toolCalls: [{ name: 'noop', input: {} }] }, { faults: [{ fault: 'hang' }], reply: { text: 'never' } }])
  const finishes = scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'noop', input: {} }] } : { text: `finished at turn ${r.turn}` }))
  const noop = defineTool({ name: 'noop', description: 'does nothing', input: z.object({}), idempotent: true, execute: () => null })

  it('should resume every thread, rebuild the damaged ones, and leave every transcript verifiable', async () => {
    const dir = tempDir('spindle-prefetch-recovery')
    const first = await createRuntime({ dir, model: hangs, tools: [noop], durability: 'process' })
    const threads = await Promise.all(Array.from({ length: THREADS }, (_, i) => first.spawn({ directive: { name: `many${i}`, prompt: 'p' } })))
    await Promise.all(threads.map((t) => until(t, (v) => v.usage.turns === 1 && inState('callingModel')(v))))
    await first.close()
    const ids = threads.map((t) => t.id)
    const file = (id: string, name: string) => path.join(dir, 'threads', id, name)
    // Damage among the healthy: a truncated state.json, a torn transcript line, a missing transcript.
    const truncated = ids[10]!
    fs.writeFileSync(file(truncated, 'state.json'), fs.readFileSync(file(truncated, 'state.json'), 'utf8').slice(0, 40))
    const torn = ids[200]!
    fs.appendFileSync(file(torn, 'transcript.jsonl'), '{"seq":99,"ts":"2026-')
    const lost = ids[250]!
    fs.rmSync(file(lost, 'transcript.jsonl'))
    // And lines a power loss took after a process journaled them: written back through the
    // descriptor the worker handed over (persistence/transcriptJournal.ts).
    const behind = ids[120]!
    const size = fs.statSync(file(behind, 'transcript.jsonl')).size
    const writer = spawnSync(process.execPath, [compiled('test/persistence/journalWorker.js'), dir, '3', behind], { encoding: 'utf8' })
    expect(writer.signal, writer.stderr).toBe('SIGKILL')
    const journaled = fs.readFileSync(file(behind, 'transcript.jsonl'))
    fs.truncateSync(file(behind, 'transcript.jsonl'), size)
    const before = await settledFds()

    const problems: string[] = []
    const rt = await createRuntime({ dir, model: finishes, tools: [noop], durability: 'process', onProblem: (p) => problems.push(`${p.code} ${p.message}`) })
    open.push(rt)
    expect(rt.lastRecovery.resumed).toHaveLength(THREADS - 1)
    expect(rt.lastRecovery.rebuilt).toEqual([truncated])
    expect(rt.lastRecovery.failed).toEqual([expect.objectContaining({ threadId: lost, code: 'TRANSCRIPT_CORRUPT' })])
    expect(rt.lastRecovery.restored).toEqual([behind])
    expect(fs.readFileSync(file(behind, 'transcript.jsonl')).subarray(0, journaled.length).equals(journaled)).toBe(true)
    expect(problems.some((p) => p.startsWith('STATE_CORRUPT') && p.includes(file(truncated, 'state.json')))).toBe(true)
    const outcomes = await Promise.all(rt.lastRecovery.resumed.map((id) => rt.get(id).done))
    expect(outcomes.filter((o) => o.status === 'completed' && o.result === 'finished at turn 2')).toHaveLength(THREADS - 1)
    expect(fs.readdirSync(path.dirname(file(torn, 'transcript.jsonl'))).filter((f) => f.includes('.torn-'))).toHaveLength(1)
    // Every descriptor handed over wrote to its own thread's file: each chain verifies and replays.
    for (const id of ids.filter((id) => id !== lost)) expect(verifyReplay(dir, id).matches, id).toBe(true)
    await rt.close()
    open.pop()
    expect(await fdsDownTo(before)).toBeLessThanOrEqual(before)
  }, 60_000)
})
