/**
 * The workload of the crash-loop test, shared by its child process (crashLoopWorker.ts) and the
 * test itself (which resumes the quarantined thread in-process with the tool fixed).
 *
 * - `ordinary<i>`: three turns, each calling an idempotent `lookup`; its model answers slowly
 *   enough that a poison in the same process usually kills it before it gets further.
 * - `poison`: its first turn calls `explode`, which ends the process with exit code 1 every time.
 * - `flaky`: each of its first `FLAKY_TURNS` turns calls `stumble`, which kills the process with
 *   SIGKILL the first time it sees an idempotency key and answers the second time: it dies once
 *   per turn, but gets a turn further every time.
 * - `slow<i>` (slowModel): one model call that takes `SLOW_CALL_MS`; the test kills the process
 *   while every call is under way. `mpoison`: its model call ends the process every time.
 */
import fs from 'node:fs'
import path from 'node:path'
import { z } from 'zod'
import { defineTool, scriptedModel } from '../../src/index.js'
import type { ModelAdapter } from '../../src/index.js'

export const FLAKY_TURNS = 6

export function crashLoopTools(dir: string, options: { explodes: boolean }) {
  const seen = path.join(dir, 'stumbled.log')
  return [
    defineTool({
      name: 'lookup',
      description: 'Look something up',
      input: z.object({ q: z.string() }),
      idempotent: true,
      execute: ({ q }) => ({ q, answer: q.length }),
    }),
    defineTool({
      name: 'explode',
      description: 'Ends the host process (a tool with a fatal bug)',
      input: z.object({}),
      idempotent: true,
      execute: () => {
        if (options.explodes) process.exit(1)
        return { exploded: false }
      },
    }),
    defineTool({
      name: 'stumble',
      description: 'Kills the host process the first time it sees a call',
      input: z.object({}),
      idempotent: true,
      execute: (_input, { idempotencyKey }) => {
        const keys = fs.existsSync(seen) ? fs.readFileSync(seen, 'utf8').split('\n') : []
        if (keys.includes(idempotencyKey)) return { stumbled: false }
        const fd = fs.openSync(seen, 'a')
        fs.writeSync(fd, `${idempotencyKey}\n`)
        fs.fsyncSync(fd)
        fs.closeSync(fd)
        process.kill(process.pid, 'SIGKILL')
        return { stumbled: true }
      },
    }),
  ]
}

export function crashLoopModel() {
  return scriptedModel(
    (request) => {
      if (request.directiveName === 'poison') {
        return request.turn === 1 ? { toolCalls: [{ name: 'explode', input: {} }] } : { text: 'recovered after the fix' }
      }
      if (request.directiveName === 'flaky') {
        return request.turn <= FLAKY_TURNS ? { toolCalls: [{ name: 'stumble', input: {} }] } : { text: `done after ${request.turn} turns` }
      }
      return request.turn <= 3 ? { toolCalls: [{ name: 'lookup', input: { q: `q${request.turn}` } }] } : { text: `done after ${request.turn} turns` }
    },
    { latencyMs: (request) => (request.directiveName.startsWith('ordinary') ? 30 : 1) },
  )
}

export const SLOW_CALL_MS = 1_500

/**
 * A model whose every call takes SLOW_CALL_MS, logging `start <thread>` and `end <thread>` lines
 * to `log` in the order they happen; `allStarted` is called once `threads` calls are under way in
 * this process.
 */
export function slowModel(log: string, threads: number, allStarted: () => void): ModelAdapter {
  const inner = scriptedModel(() => ({ text: 'answered' }), { latencyMs: SLOW_CALL_MS })
  let started = 0
  return {
    name: 'slow',
    generate: async (request) => {
      // A provider reply this adapter cannot survive, for one thread only.
      if (request.directiveName === 'mpoison') process.exit(1)
      fs.appendFileSync(log, `start ${request.threadId}\n`)
      if (++started === threads) allStarted()
      const response = await inner.generate(request)
      fs.appendFileSync(log, `end ${request.threadId}\n`)
      return response
    },
  }
}
