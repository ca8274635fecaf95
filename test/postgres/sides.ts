/**
 * Races between runtime processes on one PostgreSQL schema: each side is a child process with its
 * own connection (raceSide.ts, compiled), and all start their steps together once every one is
 * connected. A synchronous bridge blocks its thread, so two sides in one thread would never overlap.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { compiled, tempDir } from '../helpers/dirs.js'

export type RaceStep =
  | { op: 'acquire'; id: string; ttl: number; now: number }
  | { op: 'acquireMany'; ids: string[]; ttl: number; now: number }
  /** recordWait with the check wait_threads makes: refused ('would close a cycle') when the wait closes a cycle. */
  | { op: 'wait'; waiter: string; ids: string[] }
  | { op: 'reserve'; child: string; parent: string; spend: number; spawns?: number }

export interface RaceJob {
  url: string
  schema: string
  go: string
  owner: string
  steps: RaceStep[]
}

/** One side running: `ready` once connected, `results` (what each step got, JSON-parsed) when done. */
export interface Side {
  ready: Promise<void>
  results: Promise<unknown[]>
}

/** Starts a side of a race; it waits for `go` before its first step. */
export function startSide(job: RaceJob): Side {
  const child = spawn(process.execPath, [compiled('test/postgres/raceSide.js'), JSON.stringify(job)], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  let readied: () => void = () => {}
  const ready = new Promise<void>((resolve) => (readied = resolve))
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString()
    if (out.startsWith('ready\n')) readied()
  })
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()))
  const results = new Promise<unknown[]>((resolve, reject) =>
    child.on('exit', (code) => {
      readied()
      const last = out.trim().split('\n').pop() ?? ''
      if (code === 0 && last.startsWith('[')) resolve(JSON.parse(last) as unknown[])
      else reject(new Error(`race side exited with ${code}: ${err || out}`))
    }),
  )
  return { ready, results }
}

/** Runs the sides' steps at once (each side's in order); what each side's steps got. */
export async function race(url: string, schema: string, sides: Array<{ owner: string; steps: RaceStep[] }>): Promise<unknown[][]> {
  const dir = tempDir('spindle-pg-race')
  const go = path.join(dir, 'go')
  try {
    const running = sides.map((side) => startSide({ url, schema, go, ...side }))
    await Promise.all(running.map((side) => side.ready))
    fs.writeFileSync(go, '')
    return await Promise.all(running.map((side) => side.results))
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}
