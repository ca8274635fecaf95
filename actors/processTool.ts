/**
 * Tools that run child processes, and the one function that runs a process so that cancelling it
 * (or timing it out) stops everything it started, not only the process itself.
 *
 * Each child is spawned with `detached: true`, so it leads a new session and process group whose id
 * is its pid. Everything it starts (`sh -c 'a | b'`, `make`'s jobs, `cmd &`) lands in that group
 * unless it deliberately leaves it (`setsid`). Stopping the call signals the whole group:
 * SIGTERM, then SIGKILL after a grace period to whatever is still alive. Being detached, the group
 * also does not get the terminal's Ctrl-C, so this module is the only thing that ever stops it.
 *
 * POSIX only for the group semantics; on Windows only the direct child is signalled.
 * Side effects. Not imported by machines/.
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import { StringDecoder } from 'node:string_decoder'
import type { z } from 'zod'
import { SpindleError, describeError } from '../src/base/errors.js'
import { MAX_TIMER_MS } from '../src/base/clock.js'
import { defineTool } from './tools.js'
import type { Tool, ToolContext } from './tools.js'

export interface ProcessResult {
  /** The exit code, or null when the process was ended by a signal. */
  exitCode: number | null
  /** The signal that ended the process, or null when it exited by itself. */
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  /** Whether stdout or stderr went over `maxOutputBytes` and was cut (each then ends with a marker). */
  truncated: boolean
}

export interface RunProcessOptions {
  /** Aborting it stops the whole process group (SIGTERM, then SIGKILL after `killGraceMs`). */
  signal: AbortSignal
  cwd?: string
  /** The child's whole environment (not merged): @default process.env */
  env?: NodeJS.ProcessEnv
  /** Written to the child's stdin, which is then closed. Without it stdin is /dev/null. */
  input?: string
  /** Bytes kept of each of stdout and stderr; the rest is read and dropped. @default 1 MiB */
  maxOutputBytes?: number
  /** Time between SIGTERM and SIGKILL to the process group. @default 2000 */
  killGraceMs?: number
}

export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
export const DEFAULT_KILL_GRACE_MS = 2000
/** How often a group that was sent SIGTERM is checked for being empty, to stop waiting early. */
const GROUP_POLL_MS = 50
/**
 * After the group leader has exited and its group has been stopped, how long stdout/stderr may
 * stay open (held by a descendant that left the group with `setsid`) before they are abandoned.
 */
const STDIO_DRAIN_EXTRA_MS = 500

/**
 * Runs `command` with `args` (no shell: pass `sh`, `-c`, script for one) and resolves with its exit
 * code or signal and its output. A non-zero exit resolves; it does not reject.
 *
 * Rejects with a `SpindleError` (code `TOOL_FAILED`):
 * - when `options.signal` aborts before the process has exited: the process group is stopped and
 *   the message names the command, its pid and the abort reason (`details.reason`). The promise
 *   settles once the group leader has died and its output pipes have closed, so at most about
 *   `killGraceMs` after the abort; a group member that ignored SIGTERM and does not hold the pipes
 *   is still SIGKILLed when the grace period ends, after the promise has settled;
 * - when `options.signal` is already aborted: nothing is spawned;
 * - when the command cannot be started (not found, not executable, missing `cwd`).
 *
 * When the group leader exits by itself but left background processes in its group (`cmd &`
 * without `wait`), the group is stopped too, the same way (SIGTERM, then SIGKILL). The call is
 * the unit of work the runtime can see, cancel and time out; a leftover would be orphaned with
 * nothing to ever stop it (it does not even get the host's Ctrl-C, being detached), and it would
 * hold stdout open and keep this call from finishing. A tool that really means to start a daemon
 * must leave the group itself (`setsid`) and take charge of it.
 *
 * Nothing outlives the settled promise except, when a group member is still alive at that point,
 * the grace timer that SIGKILLs it (at most `killGraceMs`; it keeps the event loop alive until
 * then on purpose, so the kill is not skipped when the host is about to exit).
 */
export async function runProcess(command: string, args: string[], options: RunProcessOptions): Promise<ProcessResult> {
  const { signal } = options
  const maxOutputBytes = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES
  const killGraceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS
  if (!Number.isSafeInteger(maxOutputBytes) || maxOutputBytes < 0) {
    throw new SpindleError('INVALID_OPTIONS', `runProcess: maxOutputBytes must be a non-negative integer (got ${maxOutputBytes})`)
  }
  const graceProblem = killGraceProblem(killGraceMs)
  if (graceProblem) throw new SpindleError('INVALID_OPTIONS', `runProcess: ${graceProblem}`)
  const shown = showCommand(command, args)
  if (signal.aborted) {
    const reason = describeError(signal.reason).message
    throw new SpindleError('TOOL_FAILED', `Process ${shown} was not started: ${reason}`, {
      cause: signal.reason,
      details: { command, args, reason },
    })
  }

  return new Promise<ProcessResult>((resolve, reject) => {
    // Started before the group, and told its id right after: a host killed between the two spawns
    // (a fork and an exec) left the group with no watchdog; now only one write separates them.
    const watchdog = startWatchdog(killGraceMs)
    let child: ChildProcess
    try {
      child = spawn(command, args, {
        cwd: options.cwd,
        env: options.env ?? process.env,
        detached: true,
        stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
        windowsHide: true,
      })
    } catch (error) {
      // Synchronous failures: invalid arguments (NUL bytes …), EMFILE.
      watchdog?.release()
      reject(startError(command, args, options.cwd, error))
      return
    }
    const pid = child.pid
    if (pid === undefined) watchdog?.release()
    else watchdog?.arm(pid)
    const stdout = new OutputBuffer(maxOutputBytes)
    const stderr = new OutputBuffer(maxOutputBytes)
    child.stdout?.on('data', (chunk: Buffer) => stdout.push(chunk))
    child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk))
    if (child.stdin) {
      // The child may exit (or close stdin) without reading it all: EPIPE is not our failure.
      child.stdin.on('error', () => {})
      child.stdin.end(options.input)
    }

    let settled = false
    let exited = false
    let exit: { code: number | null; signal: NodeJS.Signals | null } = { code: null, signal: null }
    /** Set when the abort arrived while the group leader was still running. */
    let abortedWhileRunning = false
    let drainTimer: NodeJS.Timeout | undefined
    const group = pid === undefined ? undefined : new GroupStopper(pid, child, killGraceMs, watchdog)

    const cleanup = (): void => {
      settled = true
      signal.removeEventListener('abort', onAbort)
      clearTimeout(drainTimer)
      group?.settled()
    }
    const fail = (error: unknown): void => {
      if (settled) return
      cleanup()
      reject(error)
    }
    const finish = (): void => {
      if (settled) return
      cleanup()
      if (abortedWhileRunning) {
        const reason = describeError(signal.reason).message
        const how = exit.signal ? ` (${exit.signal})` : exit.code !== null ? ` (it exited with code ${exit.code})` : ''
        reject(
          new SpindleError('TOOL_FAILED', `Process ${shown} (pid ${pid}) was stopped${how}: ${reason}`, {
            cause: signal.reason,
            details: { command, args, pid, reason, exitCode: exit.code, signal: exit.signal },
          }),
        )
        return
      }
      resolve({
        exitCode: exit.code,
        signal: exit.signal,
        stdout: stdout.text(),
        stderr: stderr.text(),
        truncated: stdout.truncated || stderr.truncated,
      })
    }

    function onAbort(): void {
      if (settled || exited) return // it had finished: the result stands
      abortedWhileRunning = true
      group?.stop()
    }
    signal.addEventListener('abort', onAbort, { once: true })

    child.once('error', (error) => {
      // Before a pid: the spawn failed (ENOENT, EACCES …). After: a failure of our own signalling,
      // which GroupStopper does not use; settle anyway rather than hang.
      if (pid === undefined) fail(startError(command, args, options.cwd, error))
      else {
        group?.stop()
        fail(new SpindleError('TOOL_FAILED', `Process ${shown} (pid ${pid}) failed: ${describeError(error).message}`, { cause: error, details: { command, args, pid } }))
      }
    })
    child.once('exit', (code, exitSignal) => {
      exited = true
      exit = { code, signal: exitSignal }
      // Sweep the group: see the function's comment for why leftovers are stopped, not left.
      group?.stop()
      // Output pipes still open after the group is gone are held by something that left it.
      drainTimer = setTimeout(() => {
        child.stdout?.destroy()
        child.stderr?.destroy()
        finish()
      }, killGraceMs + STDIO_DRAIN_EXTRA_MS)
    })
    child.once('close', finish)
  })
}

/** The longest grace a timer can wait (with the drain allowance) before it would fire at once. */
const MAX_KILL_GRACE_MS = MAX_TIMER_MS - STDIO_DRAIN_EXTRA_MS

function killGraceProblem(killGraceMs: number): string | null {
  if (typeof killGraceMs !== 'number' || !Number.isFinite(killGraceMs) || killGraceMs < 0 || killGraceMs > MAX_KILL_GRACE_MS) {
    return `killGraceMs must be a number of ms from 0 to ${MAX_KILL_GRACE_MS} (got ${killGraceMs})`
  }
  return null
}

/**
 * Stops one process group once: SIGTERM, then SIGKILL after the grace period if any member is
 * still alive. Polls the group so it stops waiting as soon as the group is empty.
 */
class GroupStopper {
  private started = false
  private done = false
  private timer: NodeJS.Timeout | undefined
  private deadline = 0

  constructor(
    private readonly pgid: number,
    private readonly child: ChildProcess,
    private readonly graceMs: number,
    private readonly watchdog: Watchdog | undefined,
  ) {}

  stop(): void {
    if (this.started) return
    this.started = true
    if (!this.signal('SIGTERM')) return this.finish()
    this.deadline = Date.now() + this.graceMs
    this.schedule()
  }

  /** The promise settled: nothing more to do unless a member is still alive and needs its SIGKILL. */
  settled(): void {
    if (!this.started || this.done) return
    if (!this.signal(0)) this.finish()
  }

  private schedule(): void {
    const left = this.deadline - Date.now()
    this.timer = setTimeout(() => this.tick(), Math.max(0, Math.min(GROUP_POLL_MS, left)))
  }

  private tick(): void {
    if (!this.signal(0)) return this.finish()
    if (Date.now() >= this.deadline) {
      this.signal('SIGKILL')
      return this.finish()
    }
    this.schedule()
  }

  private finish(): void {
    this.done = true
    clearTimeout(this.timer)
    // The group is empty (or SIGKILLed): nothing is left for the watchdog to stop.
    this.watchdog?.release()
  }

  /** Sends `sig` to the group; false once the group has no member left (never signal it again then). */
  private signal(sig: NodeJS.Signals | 0): boolean {
    if (this.done) return false
    if (process.platform === 'win32') {
      // No process groups: the direct child is all that can be reached.
      if (this.child.exitCode !== null || this.child.signalCode !== null) return false
      if (sig !== 0) this.child.kill(sig)
      return true
    }
    try {
      process.kill(-this.pgid, sig)
      return true
    } catch (error) {
      // ESRCH: the group is empty (its id may now be reused, so it must not be signalled again).
      // EPERM: a member changed its credentials; nothing more can be done to it.
      return (error as NodeJS.ErrnoException).code !== 'ESRCH'
    }
  }
}

/**
 * Stops a process group when this process dies without stopping it (kill -9, an OOM kill, a crash
 * or `process.exit()` while a call runs). The group is detached, so nothing else ever would: it
 * would run on, orphaned, and after recovery an idempotent call would run a second copy beside it.
 *
 * A small `sh` outside the group reads its stdin, a pipe whose other end only this process holds
 * (Node opens pipes close-on-exec, so no other child inherits it). It is started before the group
 * and first reads the group's id (`arm`); end-of-file there (this process died before the group
 * was started, or it failed to start) ends it. Then, when this process dies, the kernel closes
 * that end, `read` sees end-of-file, and the watchdog sends the group SIGTERM and, `grace` later,
 * SIGKILL. When the group is gone, `release` writes a line instead and the watchdog exits without
 * signalling anything.
 */
const WATCHDOG_SCRIPT =
  'read -r g || exit 0; read -r _ && exit 0; kill -s TERM -- "-$g" 2>/dev/null || exit 0; sleep "$1"; kill -s 0 -- "-$g" 2>/dev/null && kill -s KILL -- "-$g" 2>/dev/null; exit 0'

interface Watchdog {
  /** The group it guards: from now on this process's death stops it. */
  arm(pgid: number): void
  release(): void
}

function startWatchdog(graceMs: number): Watchdog | undefined {
  if (process.platform === 'win32') return undefined
  let watchdog: ChildProcess
  try {
    watchdog = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT, 'spindle-watchdog', String(Math.max(1, Math.ceil(graceMs / 1000)))], {
      stdio: ['pipe', 'ignore', 'ignore'],
      detached: true,
      windowsHide: true,
    })
  } catch {
    // No watchdog (EMFILE …): the call runs as before, unguarded against this process dying.
    return undefined
  }
  watchdog.on('error', () => {})
  const stdin = watchdog.stdin!
  stdin.on('error', () => {})
  // It must not keep the host alive: its only job is to act once the host is gone.
  watchdog.unref()
  ;(stdin as unknown as { unref?: () => void }).unref?.()
  let armed = false
  let released = false
  return {
    arm(pgid: number): void {
      if (armed || released) return
      armed = true
      stdin.write(`${pgid}\n`)
    },
    release(): void {
      if (released) return
      released = true
      // Unarmed, end-of-file at the first read ends it; armed, this line does.
      stdin.end(armed ? 'done\n' : undefined)
    },
  }
}

/** Keeps the first `limit` bytes of a stream and counts the rest. */
class OutputBuffer {
  private readonly chunks: Buffer[] = []
  private kept = 0
  private total = 0

  constructor(private readonly limit: number) {}

  get truncated(): boolean {
    return this.total > this.limit
  }

  push(chunk: Buffer): void {
    this.total += chunk.length
    const room = this.limit - this.kept
    if (room <= 0) return
    const part = chunk.length <= room ? chunk : chunk.subarray(0, room)
    this.chunks.push(part)
    this.kept += part.length
  }

  text(): string {
    const bytes = Buffer.concat(this.chunks)
    if (!this.truncated) return bytes.toString('utf8')
    // write() without end() drops a character the cut split in two, instead of printing U+FFFD.
    const kept = new StringDecoder('utf8').write(bytes)
    return `${kept}\n[output truncated: ${this.total - this.limit} of ${this.total} bytes not shown]`
  }
}

function showCommand(command: string, args: string[]): string {
  const full = JSON.stringify([command, ...args].join(' '))
  return full.length <= 200 ? full : `${full.slice(0, 199)}…"`
}

function startError(command: string, args: string[], cwd: string | undefined, error: unknown): SpindleError {
  const code = (error as NodeJS.ErrnoException).code
  let message: string
  if (code === 'ENOENT' && cwd !== undefined && !fs.existsSync(cwd)) {
    // spawn reports a missing working directory as the command not being found.
    message = `Cannot start ${JSON.stringify(command)}: working directory ${JSON.stringify(cwd)} does not exist`
  } else if (code === 'ENOENT') {
    message = `Cannot start ${JSON.stringify(command)}: command not found (ENOENT)`
  } else if (code === 'EACCES') {
    message = `Cannot start ${JSON.stringify(command)}: permission denied (EACCES)`
  } else {
    message = `Cannot start ${JSON.stringify(command)}: ${describeError(error).message}`
  }
  return new SpindleError('TOOL_FAILED', message, { cause: error, details: { command, args, cwd, errno: code } })
}

/** What a `commandTool` runs for one call. */
export interface CommandInvocation {
  command: string
  args: string[]
  cwd?: string
  /** The child's whole environment (not merged): @default process.env */
  env?: NodeJS.ProcessEnv
  /** Written to the child's stdin. */
  input?: string
}

export interface CommandToolSpec<S extends z.ZodType> {
  name: string
  description: string
  input: S
  /** Turns the validated input into the process to run. A throw becomes an error result. */
  command(input: z.infer<S>): CommandInvocation
  /** @default false */
  idempotent?: boolean
  /** @default the runtime's `timeouts.toolMs`. On timeout the process group is stopped. */
  timeoutMs?: number
  /** @default 1 MiB per stream */
  maxOutputBytes?: number
  /** @default 2000 */
  killGraceMs?: number
  /** Capabilities a call needs. @default ['process'] */
  permissions?: readonly string[]
}

/**
 * A tool that runs one process per call and returns `{ exitCode, signal, stdout, stderr,
 * truncated }` to the model; a non-zero exit is a result the model sees, not a failure. Cancelling
 * the thread or the tool's timeout stops the whole process group.
 *
 * @example
 * const grep = commandTool({
 *   name: 'grep', description: 'Search the repository', input: z.object({ pattern: z.string() }),
 *   idempotent: true, timeoutMs: 30_000,
 *   command: ({ pattern }) => ({ command: 'grep', args: ['-rn', '--', pattern, '.'], cwd: repoDir }),
 * })
 */
export function commandTool<S extends z.ZodType>(spec: CommandToolSpec<S>): Tool<z.infer<S>> {
  // Checked here, like timeoutMs, so a bad spec fails when it is defined, not on every call.
  const { maxOutputBytes, killGraceMs } = spec
  if (maxOutputBytes !== undefined && (!Number.isSafeInteger(maxOutputBytes) || maxOutputBytes < 0)) {
    throw new TypeError(`commandTool: maxOutputBytes of "${spec.name}" must be a non-negative integer (got ${maxOutputBytes})`)
  }
  const graceProblem = killGraceMs === undefined ? null : killGraceProblem(killGraceMs)
  if (graceProblem) throw new TypeError(`commandTool: ${graceProblem.replace('killGraceMs', `killGraceMs of "${spec.name}"`)}`)
  return defineTool({
    name: spec.name,
    description: spec.description,
    input: spec.input,
    idempotent: spec.idempotent,
    timeoutMs: spec.timeoutMs,
    // Starting a program is a capability of its own; a spec may name more (`network`, `fs.write`).
    permissions: spec.permissions ?? ['process'],
    execute: async (input: z.infer<S>, context: ToolContext): Promise<ProcessResult> => {
      const run = spec.command(input)
      const { exitCode, signal, stdout, stderr, truncated } = await runProcess(run.command, run.args, {
        signal: context.signal,
        cwd: run.cwd,
        env: run.env,
        input: run.input,
        maxOutputBytes: spec.maxOutputBytes,
        killGraceMs: spec.killGraceMs,
      })
      return { exitCode, signal, stdout, stderr, truncated }
    },
  })
}
