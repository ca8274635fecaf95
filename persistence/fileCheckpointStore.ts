/**
 * state.json per thread, written by group commit: every staged envelope of a batch is written to a
 * temp file, the temp files are fsynced in parallel, renamed into place, and the directories
 * fsynced in parallel — one round of fsync latency for the whole batch instead of one per thread.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError, isSpindleError } from '../src/errors.js'
import { isThreadId } from '../src/ids.js'
import { fsyncDir } from './atomicFile.js'
import { upgradeEnvelope } from './envelope.js'
import type { DataPaths } from './paths.js'
import { threadDir } from './paths.js'
import type { CheckpointStore, Durability, StateEnvelope } from './types.js'

const STATE = 'state.json'
const TEMP = 'state.json.tmp'
/** File operations of one batch in flight at once. */
const CONCURRENCY = 256

function call<T = void>(fn: (cb: (error: NodeJS.ErrnoException | null, value?: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => fn((error, value) => (error ? reject(error) : resolve(value as T))))
}

async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++]!)
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}

export function createFileCheckpointStore(options: { paths: DataPaths; durability: Durability }): CheckpointStore {
  const { paths, durability } = options
  let staged = new Map<string, StateEnvelope>()
  let chain: Promise<void> = Promise.resolve()

  /** Writes one temp file (creating the thread directory if it is missing); resolves true if it created it. */
  async function writeTemp(dir: string, data: string, fsync: boolean): Promise<boolean> {
    const temp = path.join(dir, TEMP)
    let created = false
    let handle: number
    try {
      handle = await call<number>((cb) => fs.open(temp, 'w', cb))
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
      await fs.promises.mkdir(dir, { recursive: true })
      created = true
      handle = await call<number>((cb) => fs.open(temp, 'w', cb))
    }
    try {
      await call((cb) => fs.writeFile(handle, data, cb))
      if (fsync) await call((cb) => fs.fsync(handle, cb))
    } finally {
      await call((cb) => fs.close(handle, cb))
    }
    return created
  }

  async function writeBatch(batch: Map<string, StateEnvelope>, publishAfter: Promise<unknown>): Promise<void> {
    const fsync = durability === 'fsync'
    const failed: Array<{ id: string; error: unknown }> = []
    const written: Array<{ id: string; dir: string }> = []
    let createdDir = false
    // Every file's open, write, fsync and close run on the libuv pool, many at once but bounded so
    // ten thousand threads never hold ten thousand extra descriptors.
    await eachLimited([...batch], CONCURRENCY, async ([id, envelope]) => {
      const dir = threadDir(paths, id)
      try {
        if (await writeTemp(dir, JSON.stringify(envelope), fsync)) createdDir = true
        written.push({ id, dir })
      } catch (error) {
        failed.push({ id, error })
      }
    })
    await publishAfter
    const published: typeof written = []
    await eachLimited(written, CONCURRENCY, async (w) => {
      try {
        await call((cb) => fs.rename(path.join(w.dir, TEMP), path.join(w.dir, STATE), cb))
        published.push(w)
      } catch (error) {
        failed.push({ id: w.id, error })
      }
    })
    if (fsync) {
      await eachLimited(published, CONCURRENCY, (w) => fsyncDir(w.dir))
      if (createdDir) await fsyncDir(paths.threads)
    }
    if (failed.length > 0) {
      // Retry on the next sync, unless a newer envelope of that thread was staged meanwhile.
      for (const { id } of failed) if (!staged.has(id)) staged.set(id, batch.get(id)!)
      // Not STATE_CORRUPT: nothing on disk is damaged, the write did not happen.
      throw new Error(
        `Could not write state.json of ${failed.length} thread(s): ` +
          failed.map((f) => `${f.id} (${(f.error as Error).message})`).join('; '),
        { cause: failed[0]!.error },
      )
    }
  }

  return {
    stage(threadId, envelope) {
      threadDir(paths, threadId)
      staged.set(threadId, envelope)
    },

    sync(options = {}) {
      // Serialised: two batches must never write the same temp file at once.
      const run = chain.then(() => {
        const batch = staged
        staged = new Map()
        const publishAfter = options.beforePublish?.() ?? Promise.resolve()
        return batch.size > 0 ? writeBatch(batch, publishAfter) : publishAfter.then(() => undefined)
      })
      chain = run.catch(() => {})
      return run
    },

    load(threadId) {
      const file = path.join(threadDir(paths, threadId), STATE)
      let text: string
      try {
        text = fs.readFileSync(file, 'utf8')
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null
        throw error
      }
      let raw: unknown
      try {
        raw = JSON.parse(text)
      } catch (error) {
        throw new SpindleError(
          'STATE_CORRUPT',
          `${file} is not valid JSON (${text.length} bytes; it may have been cut short). The thread's transcript still ` +
            `holds its history; \`spindle rebuild ${threadId}\` rebuilds state.json from it.`,
          { cause: error, details: { path: file, threadId } },
        )
      }
      return upgradeEnvelope(raw, file, threadId)
    },

    list() {
      let names: string[]
      try {
        names = fs.readdirSync(paths.threads)
      } catch (error) {
        if (isSpindleError(error) || (error as NodeJS.ErrnoException).code === 'ENOENT') return []
        throw error
      }
      return names.filter((name) => isThreadId(name) && fs.existsSync(path.join(paths.threads, name, STATE)))
    },
  }
}
