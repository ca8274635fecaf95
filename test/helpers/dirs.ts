import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

/** A fresh data directory under the OS temp dir. */
export function tempDir(label = 'spindle'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `${label}-`))
}

/** The compiled file of a test helper script; `npm test` compiles before running vitest. */
export function compiled(relativeFromRoot: string): string {
  const file = path.resolve(import.meta.dirname, '../../dist', relativeFromRoot)
  if (!fs.existsSync(file)) throw new Error(`${file} is missing: run \`npm run build\` (npm test does) before this test`)
  return file
}

/** Moves `entry` outside the data directory and leaves a symlink to it in its place; returns where it went. */
export function plantLink(entry: string): string {
  const elsewhere = path.join(tempDir('spindle-link-target'), path.basename(entry))
  fs.renameSync(entry, elsewhere)
  fs.symlinkSync(elsewhere, entry)
  return elsewhere
}

/** Undoes `plantLink`. */
export function putBack(entry: string, elsewhere: string): void {
  fs.unlinkSync(entry)
  fs.renameSync(elsewhere, entry)
}
