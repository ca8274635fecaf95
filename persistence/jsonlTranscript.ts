/**
 * transcript.jsonl per thread: append-only, one hash-chained entry per line.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SpindleError } from '../src/errors.js'
import type { DataPaths } from './paths.js'
import { threadDir } from './paths.js'
import { makeEntry, parseTranscriptBytes, serialiseEntry } from './transcriptLines.js'
import type { Durability, TranscriptEntry, TranscriptOpenResult, TranscriptPosition, TranscriptStore } from './types.js'
import { EMPTY_POSITION } from './types.js'

interface OpenFile {
  fd: number
  position: TranscriptPosition
}

function fdatasync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve())))
}

function fsyncPath(dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    fs.open(dir, 'r', (e, fd) => {
      if (e) return reject(e)
      fs.fsync(fd, (e2) => fs.close(fd, () => (e2 ? reject(e2) : resolve())))
    })
  })
}

function corrupt(file: string, message: string): SpindleError {
  return new SpindleError('TRANSCRIPT_CORRUPT', `The transcript ${file} ${message}`, { details: { path: file } })
}

export function createJsonlTranscriptStore(options: { paths: DataPaths; durability: Durability }): TranscriptStore {
  const { paths, durability } = options
  const open = new Map<string, OpenFile>()
  let dirty = new Set<number>()
  let newDirs = new Set<string>()
  const fileOf = (id: string): string => path.join(threadDir(paths, id), 'transcript.jsonl')

  function readFrom(file: string, from: TranscriptPosition) {
    const fd = fs.openSync(file, 'r')
    try {
      const size = fs.fstatSync(fd).size
      if (size < from.bytes) {
        throw corrupt(file, `is truncated: state.json says it held ${from.bytes} bytes, the file has ${size}. Run \`spindle rebuild\` on the thread.`)
      }
      const buffer = Buffer.alloc(size - from.bytes)
      if (buffer.length > 0) fs.readSync(fd, buffer, 0, buffer.length, from.bytes)
      return parseTranscriptBytes(buffer, from, file)
    } finally {
      fs.closeSync(fd)
    }
  }

  return {
    open(threadId: string, from?: TranscriptPosition): TranscriptOpenResult {
      const existing = open.get(threadId)
      if (existing) return { position: existing.position, tail: [], torn: null }
      const file = fileOf(threadId)
      const start = from ?? EMPTY_POSITION
      if (!fs.existsSync(file)) {
        if (start.seq > 0) throw corrupt(file, `is missing, but state.json says it held ${start.seq} entries.`)
        const dir = path.dirname(file)
        fs.mkdirSync(dir, { recursive: true })
        const fd = fs.openSync(file, 'a')
        // The new file's directory entry (and a new directory's) is durable only once its parent is synced.
        newDirs.add(dir)
        open.set(threadId, { fd, position: { ...EMPTY_POSITION } })
        return { position: { ...EMPTY_POSITION }, tail: [], torn: null }
      }
      const parsed = readFrom(file, start)
      let torn: TranscriptOpenResult['torn'] = null
      if (parsed.torn) {
        // Keep the torn bytes for forensics, then cut them so the next append starts a clean line.
        const savedTo = `${file}.torn-${parsed.torn.offset}`
        const bytes = Buffer.alloc(parsed.torn.bytes)
        const rfd = fs.openSync(file, 'r')
        fs.readSync(rfd, bytes, 0, bytes.length, parsed.torn.offset)
        fs.closeSync(rfd)
        fs.writeFileSync(savedTo, bytes)
        fs.truncateSync(file, parsed.position.bytes)
        torn = { bytes: parsed.torn.bytes, savedTo }
      }
      const fd = fs.openSync(file, 'a')
      if (torn && durability === 'fsync') fs.fdatasyncSync(fd)
      open.set(threadId, { fd, position: parsed.position })
      return { position: { ...parsed.position }, tail: parsed.entries, torn }
    },

    append(threadId: string, type: string, data: unknown, ts: Date = new Date()): TranscriptEntry {
      const file = open.get(threadId)
      if (!file) {
        throw new SpindleError('THREAD_NOT_FOUND', `The transcript of ${threadId} is not open for appending.`, { details: { threadId } })
      }
      const entry = makeEntry(file.position, type, data, ts)
      const line = Buffer.from(serialiseEntry(entry))
      let written = 0
      while (written < line.length) written += fs.writeSync(file.fd, line, written, line.length - written)
      file.position = { seq: entry.seq, hash: entry.hash, bytes: file.position.bytes + line.length }
      dirty.add(file.fd)
      return entry
    },

    position(threadId: string): TranscriptPosition {
      const file = open.get(threadId)
      return file ? { ...file.position } : { ...EMPTY_POSITION }
    },

    async sync(): Promise<void> {
      const fds = dirty
      const dirs = newDirs
      dirty = new Set()
      newDirs = new Set()
      if (durability !== 'fsync') return
      await Promise.all([...fds].map(fdatasync))
      if (dirs.size > 0) {
        await Promise.all([...dirs].map(fsyncPath))
        await fsyncPath(paths.threads)
      }
    },

    read(threadId: string) {
      const file = fileOf(threadId)
      if (!fs.existsSync(file)) throw corrupt(file, 'does not exist.')
      const parsed = readFrom(file, EMPTY_POSITION)
      return { entries: parsed.entries, torn: parsed.torn ? { bytes: parsed.torn.bytes } : null }
    },

    close(threadId: string): void {
      const file = open.get(threadId)
      if (!file) return
      open.delete(threadId)
      // A close before the next sync must not lose durability: sync it now if it is still dirty.
      if (dirty.delete(file.fd) && durability === 'fsync') fs.fdatasyncSync(file.fd)
      fs.closeSync(file.fd)
    },

    closeAll(): void {
      for (const id of [...open.keys()]) this.close(id)
    },
  }
}
