/**
 * Tools a thread's model can call, and the one function that runs a call safely.
 * Side effects. Not imported by machines/.
 */
import { z } from 'zod'
import type { ToolCall } from '../machines/threadEvents.js'
import { describeError, isToolRefusal } from '../src/base/errors.js'
import { CAPABILITY } from '../src/base/permissions.js'
import { atDeadline } from '../src/base/clock.js'
import type { ToolDefinition } from './model.js'
import type { Clock } from '../src/base/clock.js'

export interface ToolContext {
  /** Aborted on cancel, on timeout and when the runtime closes. */
  signal: AbortSignal
  /**
   * Stable across crashes and retries of this call: `<threadId>:<turn>:<callId>`. Pass it to any
   * external system that deduplicates requests.
   */
  idempotencyKey: string
  threadId: string
}

/**
 * Whether a call needs a person's approval before it runs: always, never, or as a function of its
 * (validated) input and the calling thread decides.
 */
export type NeedsApproval<Input> = boolean | ((input: Input, context: { threadId: string; directive: string }) => boolean | Promise<boolean>)

/**
 * What a tool returns to hand its call to the outside world and wait (see `waitForAnswer`). The
 * thread suspends at the call; the answer someone gives (`rt.answer`, `spindle answer`, the
 * inspector, a request file) becomes the call's result.
 */
export class AnswerWait {
  constructor(
    /** What is asked or awaited, as JSON: shown to whoever answers, kept in the request file. */
    readonly request: unknown,
    /** How long to wait, in ms, before the call ends with a timeout result; undefined: no limit. */
    readonly deadlineMs: number | undefined,
  ) {}
}

/**
 * Ends a tool's `execute` by waiting for an answer from outside: a person's reply, a webhook, a CI
 * run finishing. The thread waits durably (suspended, `waiting`: no process needs to keep it in
 * memory); whoever answers, from any process, gives the call its result. After `deadlineMs` the
 * call gets a WAIT_TIMED_OUT error result instead and the thread goes on.
 *
 * @example
 * execute: async ({ pr }, { idempotencyKey }) => {
 *   await ci.start(pr, { key: idempotencyKey })
 *   return waitForAnswer({ awaiting: 'ci', pr }, { deadlineMs: 3_600_000 })
 * }
 */
export function waitForAnswer(request: unknown, options: { deadlineMs?: number } = {}): AnswerWait {
  const ms = options.deadlineMs
  if (ms !== undefined && (typeof ms !== 'number' || Number.isNaN(ms) || ms <= 0)) {
    throw new TypeError(`waitForAnswer: deadlineMs must be a positive number of ms (got ${ms})`)
  }
  return new AnswerWait(request, ms === Infinity ? undefined : ms)
}

export interface Tool<Input = unknown> {
  readonly name: string
  readonly description: string
  readonly input: z.ZodType<Input>
  /**
   * Whether running the call twice is harmless. After a crash between a call's start and its
   * recorded result, an idempotent tool is run again; any other tool is not, and the model gets an
   * error result saying the call was interrupted.
   */
  readonly idempotent: boolean
  /** Its own timeout in ms; when absent the runtime's configured default (timeouts.toolMs) applies. */
  readonly timeoutMs: number | undefined
  /**
   * The capabilities a call needs (`network`, `process`, `fs.write` …): a thread whose directive's
   * `permissions` do not grant one of them gets PERMISSION_DENIED and the tool does not run.
   */
  readonly permissions: readonly string[]
  /**
   * Whether a call must be approved by a person (or a `tool_approval` hook) before it runs: a
   * constant, or a function of the validated input (declared as a method's type, so that a tool of
   * a narrower input still is a `Tool<unknown>`).
   */
  readonly needsApproval: boolean | { decide(input: Input, context: { threadId: string; directive: string }): boolean | Promise<boolean> }['decide']
  execute(input: Input, context: ToolContext): unknown
}

export interface ToolSpec<S extends z.ZodType> {
  name: string
  description: string
  input: S
  /** @default false */
  idempotent?: boolean
  /**
   * `Infinity`: no timeout, for a tool that keeps its own deadline (the built-in `wait_threads`).
   * @default the runtime's `timeouts.toolMs` (120 000 in the shipped defaults)
   */
  timeoutMs?: number
  /** Capabilities a call needs, checked against the thread's `permissions`. @default [] */
  permissions?: readonly string[]
  /**
   * `true`, or a function of the call's input: the thread suspends at the call (`tool_approval`)
   * until a person approves it — possibly with edited input, checked by `input` — or denies it, in
   * which case the model gets the denial as the call's result. Configuration (`approvals.tools`)
   * and a directive's `approve` name more tools that need it. @default false
   */
  needsApproval?: NeedsApproval<z.infer<S>>
  execute(input: z.infer<S>, context: ToolContext): unknown
}

const TOOL_NAME = /^[a-zA-Z][a-zA-Z0-9_-]{0,63}$/

/**
 * Defines a tool. Its input is validated with the zod schema before `execute` runs; invalid input,
 * a throw and a timeout each become an error result for the model, and the thread goes on.
 *
 * @example
 * const lookup = defineTool({
 *   name: 'lookup', description: 'Look a term up', input: z.object({ q: z.string() }),
 *   idempotent: true, execute: ({ q }) => ({ q, answer: 42 }),
 * })
 */
export function defineTool<S extends z.ZodType>(spec: ToolSpec<S>): Tool<z.infer<S>> {
  if (!TOOL_NAME.test(spec.name)) {
    throw new TypeError(`defineTool: name must match ${TOOL_NAME} (got ${JSON.stringify(spec.name)})`)
  }
  const timeoutMs = spec.timeoutMs
  if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || Number.isNaN(timeoutMs) || timeoutMs <= 0)) {
    throw new TypeError(`defineTool: timeoutMs of "${spec.name}" must be a positive number of ms, or Infinity for none (got ${timeoutMs})`)
  }
  const permissions = spec.permissions ?? []
  const badCapability = permissions.find((c) => typeof c !== 'string' || !CAPABILITY.test(c))
  if (badCapability !== undefined) {
    throw new TypeError(`defineTool: permissions of "${spec.name}" must be capability names like "network" or "fs.write" (got ${JSON.stringify(badCapability)})`)
  }
  return {
    name: spec.name,
    description: spec.description,
    input: spec.input as z.ZodType<z.infer<S>>,
    idempotent: spec.idempotent ?? false,
    timeoutMs,
    permissions: [...new Set(permissions)],
    needsApproval: spec.needsApproval ?? false,
    execute: spec.execute,
  }
}

export function toolDefinition(tool: Tool): ToolDefinition {
  let inputSchema: Record<string, unknown>
  try {
    inputSchema = z.toJSONSchema(tool.input) as Record<string, unknown>
  } catch {
    // Some zod types (transforms, custom) have no JSON Schema; the model then gets an open object.
    inputSchema = { type: 'object' }
  }
  return { name: tool.name, description: tool.description, inputSchema }
}

export interface ToolOutcome {
  ok: boolean
  /** What the model sees: the tool's return value, or `{ error, message }`. */
  output: unknown
  /** The tool handed its call to the outside world (`waitForAnswer`): the result is the answer. */
  wait?: { request: unknown; deadlineMs: number | undefined }
}

/**
 * The most characters of JSON one tool result may take. A bigger one is not recorded: it would be
 * written to the transcript, kept in memory and sent to the model on every later turn (and past
 * about 512 MiB a JavaScript string cannot hold it at all). The model gets TOOL_OUTPUT_TOO_LARGE.
 */
export const MAX_TOOL_OUTPUT_CHARS = 16 * 1024 * 1024

/** The most characters of a thrown value's message that an error result quotes. */
const MAX_ERROR_MESSAGE_CHARS = 16 * 1024

/** Tool timeouts run on the monotonic clock: a wall-clock step must not stop or stretch a call. */
const monotonicClock: Clock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
}

function errorOutcome(error: string, message: string): ToolOutcome {
  return { ok: false, output: { error, message } }
}

/**
 * The message of whatever a tool (or its schema, or its result's `toJSON`) threw, as a string of
 * bounded length. Never throws: a thrown Proxy, an object without a prototype, a throwing `message`
 * getter or `toString` is described by its type instead.
 */
function thrownMessage(value: unknown): string {
  let message: string
  try {
    const described = describeError(value).message as unknown
    message = typeof described === 'string' ? described : String(described)
  } catch {
    message = `a thrown ${value === null ? 'null' : typeof value} that cannot be described`
  }
  if (message.length <= MAX_ERROR_MESSAGE_CHARS) return message
  return `${message.slice(0, MAX_ERROR_MESSAGE_CHARS)}… [${message.length - MAX_ERROR_MESSAGE_CHARS} more characters not shown]`
}

/**
 * The error result of a tool's deliberate refusal (a `ToolRefusal`): its own code and details,
 * in their JSON form. Null for anything else a tool threw.
 */
function refusalOutcome(thrown: unknown): ToolOutcome | null {
  try {
    if (!isToolRefusal(thrown)) return null
    return { ok: false, output: JSON.parse(JSON.stringify({ ...thrown.details, error: thrown.code, message: thrownMessage(thrown) })) as unknown }
  } catch {
    // A thrown Proxy posing as one, or details without a JSON form: a failure like any other throw.
    return null
  }
}

/**
 * A result is recorded in the transcript as JSON: one that cannot be is an error for the model, not
 * a crash. The outcome holds the JSON form, not the live value, so what the model sees now is what
 * the transcript gives back after a restart (a getter, `toJSON`, a Date or a Map would differ).
 */
function recordable(toolName: string, output: unknown): ToolOutcome {
  let json: string | undefined
  try {
    json = JSON.stringify(output)
  } catch (error) {
    return errorOutcome('TOOL_OUTPUT_INVALID', `Tool "${toolName}" returned a value that cannot be recorded as JSON: ${thrownMessage(error)}`)
  }
  if (json === undefined) {
    // A function, a symbol, or an object whose toJSON returns undefined: JSON has nothing for it.
    return errorOutcome('TOOL_OUTPUT_INVALID', `Tool "${toolName}" returned a value (${typeof output}) that has no JSON form, so it cannot be recorded.`)
  }
  if (json.length > MAX_TOOL_OUTPUT_CHARS) {
    return errorOutcome(
      'TOOL_OUTPUT_TOO_LARGE',
      `Tool "${toolName}" returned ${json.length} characters of JSON, more than the ${MAX_TOOL_OUTPUT_CHARS} a tool result may take; it was not recorded.`,
    )
  }
  return { ok: true, output: JSON.parse(json) as unknown }
}

/**
 * A throw from inside the tool's input schema (a refinement or transform): a bug in the tool's own
 * code outside `execute`, which crashes the thread for its supervisor rather than becoming a result.
 * `crash` is what was thrown, or an Error describing it when it is a value (a Proxy, an object
 * without a prototype …) that describing would throw on: the crash handler must be able to read it.
 */
class SchemaCrash {
  readonly crash: unknown
  constructor(toolName: string, thrown: unknown) {
    let describable = true
    try {
      describeError(thrown)
    } catch {
      describable = false
    }
    this.crash = describable ? thrown : new Error(`The input schema of tool "${toolName}" threw ${thrownMessage(thrown)}`)
  }
}

/**
 * Runs one tool call: look-up, input validation, execution under a timeout. Every failure of the
 * tool — a throw of any value, a timeout, a result that cannot be recorded — becomes an error
 * outcome for the model; so do invalid input and an unknown tool. It throws only what the tool's
 * input schema throws while checking (a bug outside `execute`: the thread crashes and its
 * supervisor restarts it), and then always something describeError can read.
 * Validation runs under the timeout too (a schema may have async refinements).
 * @param own the controller of `context.signal` when it is private to this call: the timeout
 *   aborts it directly instead of a second controller chained to it.
 */
export async function executeToolCall(
  tools: ReadonlyMap<string, Tool>,
  call: ToolCall,
  context: { signal: AbortSignal; idempotencyKey: string; threadId: string },
  defaultTimeoutMs: number,
  own?: AbortController,
): Promise<ToolOutcome> {
  const tool = tools.get(call.name)
  if (!tool) {
    const known = [...tools.keys()].join(', ') || 'none'
    return errorOutcome('TOOL_UNKNOWN', `There is no tool named "${call.name}". Available tools: ${known}.`)
  }
  const controller = own ?? new AbortController()
  const onOuterAbort = (): void => controller.abort(context.signal.reason)
  if (!own) context.signal.addEventListener('abort', onOuterAbort, { once: true })
  const timeoutMs = tool.timeoutMs ?? defaultTimeoutMs
  let stopTimer: (() => void) | undefined
  let schemaCrash: SchemaCrash | undefined
  const timedOut = new Promise<ToolOutcome>((resolve) => {
    if (timeoutMs === Infinity) return
    // On the monotonic clock; a timeout past a timer's range is armed in steps.
    stopTimer = atDeadline(monotonicClock, monotonicClock.now() + timeoutMs, () => {
      controller.abort(new Error(`tool "${tool.name}" timed out`))
      resolve(errorOutcome('TOOL_TIMEOUT', `Tool "${tool.name}" did not finish within ${timeoutMs} ms and was stopped.`))
    })
  })
  try {
    const run = (async (): Promise<ToolOutcome> => {
      let parsed: z.ZodSafeParseResult<unknown>
      try {
        // Async, so a schema with async refinements works (safeParse throws on those).
        parsed = await tool.input.safeParseAsync(call.input)
      } catch (error) {
        schemaCrash = new SchemaCrash(tool.name, error)
        throw schemaCrash
      }
      if (!parsed.success) {
        return errorOutcome('TOOL_INPUT_INVALID', `Invalid input for tool "${tool.name}":\n${z.prettifyError(parsed.error)}`)
      }
      const output = await tool.execute(parsed.data, { signal: controller.signal, idempotencyKey: context.idempotencyKey, threadId: context.threadId })
      if (output instanceof AnswerWait) {
        const request = recordable(tool.name, output.request === undefined ? null : output.request)
        return request.ok ? { ok: true, output: null, wait: { request: request.output, deadlineMs: output.deadlineMs } } : request
      }
      return recordable(tool.name, output === undefined ? null : output)
    })()
    return await Promise.race([run, timedOut])
  } catch (error) {
    // By identity: instanceof would run a thrown Proxy's getPrototypeOf trap.
    if (schemaCrash !== undefined && error === schemaCrash) throw schemaCrash.crash
    const refused = refusalOutcome(error)
    if (refused) return refused
    return errorOutcome('TOOL_FAILED', `Tool "${tool.name}" failed: ${thrownMessage(error)}`)
  } finally {
    stopTimer?.()
    if (!own) context.signal.removeEventListener('abort', onOuterAbort)
  }
}
