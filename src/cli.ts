#!/usr/bin/env node
/**
 * The `spindle` command.
 */
import './threadpool.js'
import { parseArgs } from 'node:util'
import { isSpindleError } from './errors.js'
import type { SpindleErrorCode } from './errors.js'
import { runDemo } from './demo.js'
import { writeVisualizations } from './visualize.js'

const USAGE = `usage: spindle <command> [options]

commands:
  demo [--dir DIR] [--durability fsync|process]   run several threads on the scripted model
  viz [--out DIR] [--check]                       write Mermaid diagrams of the machines (--check: exit 1 if stale)

exit codes: 0 ok, 1 unexpected failure, 2 usage, 3 invalid input, 4 not found, 5 damaged data`

const EXIT: Partial<Record<SpindleErrorCode, number>> = {
  INVALID_OPTIONS: 3,
  INVALID_THREAD_ID: 3,
  CONFIG_INVALID: 3,
  THREAD_NOT_FOUND: 4,
  STATE_CORRUPT: 5,
  TRANSCRIPT_CORRUPT: 5,
  TRANSCRIPT_CHAIN_BROKEN: 5,
  FILES_MISSING: 5,
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv
  switch (command) {
    case 'demo': {
      const { values } = parseArgs({
        args: rest,
        options: { dir: { type: 'string', default: '.spindle' }, durability: { type: 'string', default: 'fsync' }, latency: { type: 'string' } },
      })
      if (values.durability !== 'fsync' && values.durability !== 'process') {
        process.stderr.write(`--durability must be fsync or process (got ${values.durability})\n`)
        return 2
      }
      return runDemo({
        dir: values.dir!,
        durability: values.durability,
        out: process.stdout,
        ...(values.latency ? { latencyMs: Number(values.latency) } : {}),
      })
    }
    case 'viz': {
      const { values } = parseArgs({
        args: rest,
        options: { out: { type: 'string', default: 'visualizations' }, check: { type: 'boolean', default: false } },
      })
      const stale = writeVisualizations(values.out!, { check: values.check! })
      for (const file of stale) process.stdout.write(`${values.check ? 'out of date' : 'wrote'}: ${file}\n`)
      if (values.check && stale.length > 0) {
        process.stderr.write('The machines changed since the diagrams were generated: run `spindle viz` and commit the result.\n')
        return 1
      }
      return 0
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(`${USAGE}\n`)
      return command === undefined ? 2 : 0
    default:
      process.stderr.write(`spindle: unknown command "${command}"\n${USAGE}\n`)
      return 2
  }
}

// A reader that went away (`spindle demo | head`) is not an error; every thread is checkpointed.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0)
  throw error
})

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (isSpindleError(error)) {
      process.stderr.write(`spindle: ${error.message} [${error.code}]\n`)
      process.exit(EXIT[error.code] ?? 1)
    }
    process.stderr.write(`spindle: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`)
    process.exit(1)
  },
)
