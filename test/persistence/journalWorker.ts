/**
 * Child process of the journal test: appends to a few transcripts, makes them durable through the
 * journal only (no files sync), and kills itself with SIGKILL, leaving its journal behind.
 *
 * argv: <dir> <entries per thread> <thread id>...
 */
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'

const [dir, entriesArg, ...ids] = process.argv.slice(2)
if (!dir || !entriesArg || ids.length === 0) throw new Error('usage: journalWorker <dir> <entries> <thread id>...')
const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'fsync' })
for (const id of ids) store.open(id)
// A note an operator tool writes: the same data each time, so compaction may drop all but the first.
for (let n = 0; n < Number(entriesArg); n++) for (const id of ids) store.append(id, 'operator_looked', { at: 1000 + n, by: 'journal test' })
await store.sync()
process.stdout.write('synced\n', () => process.kill(process.pid, 'SIGKILL'))
