/**
 * Child process of leftovers.test.ts: stops at a chosen instant of a write — the fs call that
 * would close the window is intercepted — either killed there with SIGKILL (`kill`) or stopped
 * with SIGSTOP (`stop`: alive, holding what it made, until the test kills it). Before it stops it
 * prints `at window` on stdout.
 *
 * argv: <dir> <step> [id] [kill|stop]
 *   setup-hang        spawns a thread whose model call never returns, prints its id, closes
 *   setup-error       spawns a thread that suspends when its retries run out, prints its id, closes
 *   journal <how>     appends to a transcript through its journal: stops before the journal's header is written
 *   probe <how>       the same: stops while the journal probes birth times, its probe file made
 *   temp <id> <how>   `spindle cancel`'s write of the request file: stops before the temp file's rename
 *   claim <id> <kind> <how>  writes a cancel or resume request, opens a runtime on the directory: stops as soon as
 *                     the runtime has claimed the request, before it reads it
 *   resumed <id>      writes a resume request, opens a runtime: killed once the resume is recorded, before the
 *                     runtime is done with the request
 *   bell <how>        rings the request bell past its size and reads it: stops after setting it aside, before removing it
 */
import fs from 'node:fs'
import { z } from 'zod'
import { ringBell, BellReader } from '../../persistence/requestBell.js'
import { createJsonlTranscriptStore } from '../../persistence/jsonlTranscript.js'
import { dataPaths } from '../../persistence/paths.js'
import { createRuntime, defineTool, requestCancel, requestResume, scriptedModel } from '../../src/index.js'

const [dir, step, ...rest] = process.argv.slice(2)
if (!dir || !step) throw new Error('usage: leftoversWorker <dir> <step> [id] [kill|stop]')

/** Stops here: killed, or stopped alive for the test to kill later. */
function stopHere(how: string | undefined): void {
  fs.writeSync(1, 'at window\n')
  process.kill(process.pid, how === 'stop' ? 'SIGSTOP' : 'SIGKILL')
}

/** Calls `stop` instead of (before) fs[name] when `when` holds for its first argument. */
function intercept(name: 'openSync' | 'writeSync' | 'renameSync' | 'rmSync' | 'futimesSync', when: (first: unknown) => boolean, stop: () => void): void {
  const original = fs[name] as (...args: unknown[]) => unknown
  Object.defineProperty(fs, name, {
    configurable: true,
    writable: true,
    value: (...args: unknown[]) => {
      if (when(args[name === 'writeSync' ? 1 : 0])) stop()
      return original(...args)
    },
  })
}

const noop = defineTool({ name: 'noop', description: 'n', input: z.object({}), idempotent: true, execute: () => null })
// 'hang' threads wait in their model call for good; 'flaky' ones fail until their retries run out,
// once, then finish when resumed.
const model = scriptedModel((r) => {
  if (r.directiveName === 'hang') return { faults: [{ fault: 'hang' }], reply: { text: '' } }
  if (r.directiveName === 'flaky' && !r.messages.some((m) => m.role === 'assistant') && r.attempt <= 4) {
    return { faults: Array.from({ length: 4 }, () => ({ fault: 'http' as const, status: 503 })), reply: { text: 'recovered' } }
  }
  return { text: `${r.directiveName} done` }
})
const options = { dir, model, tools: [noop], retry: { baseMs: 1, capMs: 2, maxRetries: 3 }, userConfig: null }

if (step === 'setup-hang' || step === 'setup-error') {
  const rt = await createRuntime(options)
  const thread = await rt.spawn({ directive: { name: step === 'setup-hang' ? 'hang' : 'flaky', prompt: 'p' } })
  if (step === 'setup-error') await thread.done
  else while (!JSON.stringify(thread.getSnapshot().state).includes('callingModel')) await new Promise((r) => setTimeout(r, 5))
  process.stdout.write(`${thread.id}\n`)
  await rt.close()
} else if (step === 'journal' || step === 'probe') {
  if (step === 'journal') intercept('writeSync', (data) => typeof data === 'string' && data.includes('"spindle-journal"'), () => stopHere(rest[0]))
  else intercept('futimesSync', () => true, () => stopHere(rest[0]))
  const store = createJsonlTranscriptStore({ paths: dataPaths(dir), durability: 'fsync' })
  store.open('leftover-aaaaaaaaaaaa')
  store.append('leftover-aaaaaaaaaaaa', 'operator_looked', { by: 'leftovers test' })
  await store.sync()
  process.stdout.write('not stopped\n')
} else if (step === 'temp') {
  intercept('renameSync', (from) => String(from).includes('.tmp-'), () => stopHere(rest[1]))
  requestCancel(dir, rest[0]!, { reason: 'from the leftovers test', by: 'leftovers test' })
  process.stdout.write('not stopped\n')
} else if (step === 'claim' || step === 'resumed') {
  const [id, kind, how] = step === 'claim' ? rest : [rest[0], 'resume', 'kill']
  if (kind === 'cancel') requestCancel(dir, id!, { reason: 'from the leftovers test', by: 'leftovers test' })
  else requestResume(dir, id!, { by: 'leftovers test' })
  // Claiming renames the request into tmp/; the runtime then opens it there to read it, or, once
  // it has carried it out, removes it.
  if (step === 'claim') intercept('openSync', (file) => String(file).includes('.claimed'), () => stopHere(how))
  else intercept('rmSync', (file) => String(file).includes('.claimed'), () => stopHere(how))
  const rt = await createRuntime(options)
  await rt.checkRequests({ sweep: true })
  process.stdout.write('not stopped\n')
  await rt.close()
} else if (step === 'bell') {
  intercept('rmSync', (file) => String(file).endsWith('.old'), () => stopHere(rest[0]))
  const reader = new BellReader(dir, { rotateBytes: 64 })
  reader.read()
  for (let i = 0; i < 10; i++) ringBell(dir, `thread-${i}`)
  reader.read()
  process.stdout.write('not stopped\n')
} else {
  throw new Error(`unknown step ${step}`)
}
