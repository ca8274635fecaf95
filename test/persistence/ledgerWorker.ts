/**
 * Child process of the ledger concurrency tests: waits for a go file, then reserves one child's
 * budget (and, given a spawns limit, one of the parent's spawn slots) from a shared parent in
 * ledger.db and prints what happened.
 *
 * argv: <ledger.db> <parentId> <childId> <spend> <goFile> [<spawns limit>]
 */
import fs from 'node:fs'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'

const [file, parentId, childId, spend, go, spawns] = process.argv.slice(2)
if (!file || !parentId || !childId || !spend || !go) throw new Error('usage: ledgerWorker <ledger.db> <parentId> <childId> <spend> <goFile>')
const ledger = openSqliteLedger({ path: file, durability: 'fsync' })
// Start together: every worker is open and waiting before any reserves.
while (!fs.existsSync(go)) await new Promise((r) => setTimeout(r, 2))
try {
  ledger.reserve(childId, parentId, { spend: Number(spend), tokens: null }, Date.now(), spawns === undefined ? undefined : { max: Number(spawns), known: [] })
  ledger.record(childId, { spend: Number(spend) / 2, tokens: 10 }, Date.now())
  process.stdout.write('reserved\n')
} catch (error) {
  process.stdout.write(`refused ${(error as { code?: string }).code}\n`)
} finally {
  ledger.close()
}
