/** The tool and model shared by processToolCrash.test.ts and the worker it kills. */
import path from 'node:path'
import { z } from 'zod'
import type { ModelAdapter } from '../../src/index.js'
import { commandTool, scriptedModel } from '../../src/index.js'

/**
 * `job`: appends its leader's pid to `<work>/runs`, then — unless `<work>/release` exists — starts
 * a grandchild `sleep` (its pid in `<work>/grandchild`) and waits for it, so it never finishes.
 */
export function crashTool(work: string, idempotent: boolean) {
  const script =
    `echo $$ >> '${path.join(work, 'runs')}'; ` +
    `[ -e '${path.join(work, 'release')}' ] && exit 0; ` +
    `sleep 1000 & echo $! > '${path.join(work, 'grandchild.tmp')}'; mv '${path.join(work, 'grandchild.tmp')}' '${path.join(work, 'grandchild')}'; wait`
  return commandTool({
    name: 'job',
    description: 'Runs the job',
    input: z.object({}),
    idempotent,
    command: () => ({ command: 'sh', args: ['-c', script] }),
  })
}

export function crashScript(): ModelAdapter {
  return scriptedModel([{ toolCalls: [{ name: 'job', input: {}, id: 'job1' }] }, { text: 'done' }])
}
