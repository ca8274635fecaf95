/**
 * `spindle/testing`: what users need to test their own threads — a runtime on a temporary
 * directory with simulated time, the scripted model, and replay checks for recorded transcripts.
 *
 * @example
 * const rt = await createTestRuntime({ model: scriptedModel(script) })
 * const thread = await rt.spawn({ directive: { name: 'research', prompt: 'Find X' } })
 * await rt.advance(30_000)                       // a rate-limit wait passes instantly
 * const outcome = await thread.done
 * expect(rt.checkReplay(thread.id).matches).toBe(true)
 * await rt.cleanup()
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { SimulatedClock } from 'xstate'
import type { AnyStateMachine } from 'xstate'
import type { TranscriptEntry } from '../persistence/types.js'
import { isSpindleError } from './base/errors.js'
import { verifyReplay } from './operator/inspectThread.js'
import type { ReplayCheck } from './operator/inspectThread.js'
import { replayTranscript } from './thread/replay.js'
import type { ReplayResult } from './thread/replay.js'
import { createRuntime } from './runtime/createRuntime.js'
import type { Runtime, RuntimeOptions } from './runtime/api.js'

export interface TestRuntime extends Runtime {
  /** The simulated clock every thread of this runtime waits on. */
  readonly clock: SimulatedClock
  /** Moves simulated time forward and lets the threads act on it. */
  advance(ms: number): Promise<void>
  /** Lets pending model calls, tool calls and checkpoints run (no simulated time passes). */
  settle(): Promise<void>
  /** Replays a thread's transcript and compares it with its state.json. */
  checkReplay(threadId: string): ReplayCheck
  /** Closes the runtime and deletes its temporary directory. */
  cleanup(): Promise<void>
}

export type TestRuntimeOptions = Omit<RuntimeOptions, 'dir' | 'clock'> & {
  /** Use this directory instead of a fresh temporary one (it is not deleted by cleanup). */
  dir?: string
  /** Start of simulated time, ms since epoch (default 2026-01-01T00:00:00Z). */
  startAt?: number
}

async function turnsOfTheEventLoop(count: number): Promise<void> {
  for (let i = 0; i < count; i++) await new Promise((resolve) => setImmediate(resolve))
}

/** A runtime on a temporary directory with a simulated clock. Durability defaults to 'process' (fast); it installs no signal listener (shutdownSignals: []), so a test runner's own signal handling is left alone. */
export async function createTestRuntime(options: TestRuntimeOptions): Promise<TestRuntime> {
  const { dir: givenDir, startAt, ...rest } = options
  const dir = givenDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'spindle-test-'))
  const clock = new SimulatedClock()
  clock.set(startAt ?? Date.UTC(2026, 0, 1))
  const runtime = await createRuntime({ durability: 'process', userConfig: null, shutdownSignals: [], ...rest, dir, clock })
  const settle = () => turnsOfTheEventLoop(10)
  const test: TestRuntime = {
    get dir() {
      return runtime.dir
    },
    get durability() {
      return runtime.durability
    },
    get lastRecovery() {
      return runtime.lastRecovery
    },
    spawn: (spawnOptions) => runtime.spawn(spawnOptions),
    get: (id) => runtime.get(id),
    list: (filter) => runtime.list(filter),
    recover: () => runtime.recover(),
    active: () => runtime.active(),
    stats: () => runtime.stats(),
    close: () => runtime.close(),
    cancel: (id, reason) => runtime.cancel(id, reason),
    approve: (id, approveOptions) => runtime.approve(id, approveOptions),
    deny: (id, reason, denyOptions) => runtime.deny(id, reason, denyOptions),
    answer: (id, answer, answerOptions) => runtime.answer(id, answer, answerOptions),
    resume: (id, resumeOptions) => runtime.resume(id, resumeOptions),
    followUp: (id, message, followUpOptions) => runtime.followUp(id, message, followUpOptions),
    checkRequests: (requestOptions) => runtime.checkRequests(requestOptions),
    waitThreads: (ids, waitOptions) => runtime.waitThreads(ids, waitOptions),
    chain: (id) => runtime.chain(id),
    budget: (id) => runtime.budget(id),
    children: (id) => runtime.children(id),
    settleOrphan: (id, action, reason) => runtime.settleOrphan(id, action, reason),
    on: ((type: never, listener: never) => runtime.on(type, listener)) as Runtime['on'],
    replies: (repliesOptions) => runtime.replies(repliesOptions),
    onReply: (listener) => runtime.onReply(listener),
    events: (eventsOptions) => runtime.events(eventsOptions),
    get config() {
      return runtime.config
    },
    clock,
    settle,
    async advance(ms: number) {
      await settle()
      clock.increment(ms)
      await settle()
    },
    checkReplay: (threadId) => verifyReplay(dir, threadId),
    async cleanup() {
      await runtime.close()
      if (!givenDir) fs.rmSync(dir, { recursive: true, force: true })
    },
  }
  return test
}

export type ReplayOutcome =
  | { replays: true; result: ReplayResult }
  | {
      replays: false
      /** The first recorded input the machine would not accept. */
      divergence: { seq: number; type: string; state: unknown }
      message: string
    }

/**
 * Whether a recorded transcript still replays through `machine` (for instance a changed version
 * of the thread machine). Reports the first recorded input it would not accept.
 */
export function checkTranscriptReplays(entries: readonly TranscriptEntry[], machine?: AnyStateMachine): ReplayOutcome {
  try {
    return { replays: true, result: replayTranscript(entries, machine ? { machine } : {}) }
  } catch (error) {
    if (isSpindleError(error) && error.code === 'REPLAY_DIVERGED') {
      const { seq, type, state } = error.details as { seq: number; type: string; state: unknown }
      return { replays: false, divergence: { seq, type, state }, message: error.message }
    }
    throw error
  }
}

export { scriptedModel } from '../actors/scriptedModel.js'
export { readThreadFiles, verifyReplay } from './operator/inspectThread.js'
export { replayTranscript } from './thread/replay.js'
export { threadMachine } from '../machines/thread.machine.js'
