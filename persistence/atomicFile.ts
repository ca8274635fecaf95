/**
 * Atomic file replacement: temp file, fsync, rename, fsync the directory. A crash at any point
 * leaves either the old file or the new one, never a mix.
 */
import fs from 'node:fs'
import path from 'node:path'

let counter = 0

function tempName(file: string): string {
  return `${file}.tmp-${process.pid}-${++counter}`
}

export function fsyncDirSync(dir: string): void {
  const fd = fs.openSync(dir, 'r')
  try {
    fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

export function fsyncDir(dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    fs.open(dir, 'r', (error, fd) => {
      if (error) return reject(error)
      fs.fsync(fd, (syncError) => fs.close(fd, () => (syncError ? reject(syncError) : resolve())))
    })
  })
}

/** Replaces `file` atomically. With `fsync`, the new content survives power loss once this returns. */
export function writeFileAtomicSync(file: string, data: string | Buffer, options: { fsync: boolean }): void {
  const temp = tempName(file)
  try {
    const fd = fs.openSync(temp, 'w')
    try {
      fs.writeFileSync(fd, data)
      if (options.fsync) fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
    fs.renameSync(temp, file)
  } catch (error) {
    fs.rmSync(temp, { force: true })
    throw error
  }
  if (options.fsync) fsyncDirSync(path.dirname(file))
}

export async function writeFileAtomic(file: string, data: string | Buffer, options: { fsync: boolean }): Promise<void> {
  const temp = tempName(file)
  try {
    const handle = await fs.promises.open(temp, 'w')
    try {
      await handle.writeFile(data)
      if (options.fsync) await handle.sync()
    } finally {
      await handle.close()
    }
    await fs.promises.rename(temp, file)
  } catch (error) {
    await fs.promises.rm(temp, { force: true })
    throw error
  }
  if (options.fsync) await fsyncDir(path.dirname(file))
}
