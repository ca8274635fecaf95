/**
 * Child process of the PostgreSQL lease and ledger races (leases.test.ts, ledger.test.ts): one side
 * of a race, as a runtime process on another host runs it, on a connection of its own. Connects,
 * prints `ready`, waits for the go file, runs its steps one after another and prints what each got
 * as one line of JSON.
 *
 * argv: <job as JSON> (see RaceJob in sides.ts)
 */
import fs from 'node:fs'
import { PgBridge } from '../../persistence/postgres/bridge.js'
import { openPgLeases } from '../../persistence/postgres/pgLeases.js'
import { openPgLedger } from '../../persistence/postgres/pgLedger.js'
import type { RecordedWait } from '../../persistence/types.js'
import type { RaceJob, RaceStep } from './sides.js'

const job = JSON.parse(process.argv[2] ?? '') as RaceJob
const db = new PgBridge({ url: job.url, schema: job.schema })
const leases = openPgLeases({ db })
const ledger = openPgLedger({ db })
db.querySync('SELECT 1')
process.stdout.write('ready\n')
while (!fs.existsSync(job.go)) await new Promise((resolve) => setTimeout(resolve, 1))

/** Whether `wait` closes a cycle of the wait-for graph of `others` (the check wait_threads makes). */
function closesCycle(wait: RecordedWait, others: RecordedWait[]): boolean {
  const edges = new Map<string, string[]>()
  for (const w of [...others, wait]) edges.set(w.waiter, [...(edges.get(w.waiter) ?? []), ...w.ids])
  const seen = new Set<string>()
  const stack = [...wait.ids]
  while (stack.length > 0) {
    const id = stack.pop()!
    if (id === wait.waiter) return true
    if (seen.has(id)) continue
    seen.add(id)
    stack.push(...(edges.get(id) ?? []))
  }
  return false
}

function run(step: RaceStep): unknown {
  const owner = { id: job.owner, pid: process.pid, host: 'h' }
  try {
    switch (step.op) {
      case 'acquire':
        return leases.acquire(step.id, owner, step.ttl, step.now)
      case 'acquireMany': {
        const result = leases.acquireMany(step.ids, owner, step.ttl, step.now)
        return { acquired: result.acquired, held: result.held, tokens: [...result.tokens] }
      }
      case 'wait': {
        const wait = { waiter: step.waiter, failFast: false, ids: step.ids }
        return leases.recordWait(job.owner, wait, (others) => {
          if (closesCycle(wait, others)) throw new Error('would close a cycle')
        })
      }
      case 'reserve':
        return ledger.reserve(step.child, step.parent, { spend: step.spend, tokens: null }, Date.now(), step.spawns === undefined ? undefined : { max: step.spawns, known: [] })
    }
  } catch (error) {
    return { refused: (error as { code?: string }).code ?? (error as Error).message }
  }
}

const results = job.steps.map(run)
process.stdout.write(`${JSON.stringify(results)}\n`)
leases.close()
ledger.close()
db.close()
