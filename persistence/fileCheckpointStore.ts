/**
 * state.json per thread, written by group commit: every staged envelope of a batch is written to a
 * temp file, the temp files are fsynced in parallel, renamed into place, and the directories
 * fsynced in parallel — one round of fsync latency for the whole batch instead of one per thread.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError, isSpindleError } from '../src/errors.js'
import { isThreadId } from '../src/ids.js'
import { fsyncDir, fsyncFd } from './atomicFile.js'
import { upgradeEnvelope } from './envelope.js'
import type { DataPaths } from './paths.js'
import { threadDir } from './paths.js'
import type { CheckpointStore, Durability, StateEnvelope } from './types.js'

const STATE = 'state.json'
const TEMP = 'state.json.tmp'

export function createFileCheckpointStore(options: { paths: DataPaths; durability: Durability }): CheckpointStore {
  const { paths, durability } = options
  let staged = new Map<string, StateEnvelope>()
  let chain: Promise<void> = Promise.resolve()

  async function writeBatch(batch: Map<string, StateEnvelope>, publishAfter: Promise<unknown>): Promise<void> {
    const fsync = durability === 'fsync'
    const written: Array<{ id: string; dir: string; fd: number }> = []
    const failed: Array<{ id: string; error: unknown }> = []
    let createdDir = false
    for (const [id, envelope] of batch) {
      const dir = threadDir(paths, id)
      try {
        if (!fs.existsSync(dir)) {
          fs.mkdirSync(dir, { recursive: true })
          createdDir = true
        }
        const fd = fs.openSync(path.join(dir, TEMP), 'w')
        try {
          fs.writeFileSync(fd, JSON.stringify(envelope))
        } catch (error) {
          fs.closeSync(fd)
          throw error
        }
        written.push({ id, dir, fd })
      } catch (error) {
        failed.push({ id, error })
      }
    }
    try {
      if (fsync) await Promise.all(written.map((w) => fsyncFd(w.fd)))
    } finally {
      for (const w of written) fs.closeSync(w.fd)
    }
    await publishAfter
    for (const w of written) {
      try {
        fs.renameSync(path.join(w.dir, TEMP), path.join(w.dir, STATE))
      } catch (error) {
        failed.push({ id: w.id, error })
      }
    }
    if (fsync) {
      await Promise.all(written.map((w) => fsyncDir(w.dir)))
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
      const publishAfter = options.publishAfter ?? Promise.resolve()
      // Serialised: two batches must never write the same temp file at once.
      const run = chain.then(() => {
        const batch = staged
        staged = new Map()
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
