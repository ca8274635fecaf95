/**
 * The compiled CLI in a child process that does not block this one, so a runtime in the test's
 * process goes on meanwhile (a worker on the same database). SPINDLE_DATABASE_URL is not passed on
 * unless `env` gives it: a command names its database with --db.
 */
import { spawn } from 'node:child_process'
import { compiled } from './dirs.js'

export interface Ran {
  code: number | null
  stdout: string
  stderr: string
}

export function spindleAsync(args: readonly string[], env: Record<string, string> = {}): Promise<Ran> {
  const { SPINDLE_DATABASE_URL: _unset, ...inherited } = process.env
  const child = spawn(process.execPath, [compiled('src/cli.js'), ...args], { env: { ...inherited, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d: Buffer) => (stdout += d))
  child.stderr.on('data', (d: Buffer) => (stderr += d))
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })))
}
