/**
 * Tools a thread's model can call, and the one function that runs a call safely.
 * Side effects. Not imported by machines/.
 */
import { z } from 'zod'
import type { ToolCall } from '../machines/thread.machine.js'
import { describeError } from '../src/errors.js'
import { CAPABILITY } from '../src/policies/permissions.js'
import type { ToolDefinition } from './model.js'

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
  execute(input: Input, context: ToolContext): unknown
}

export interface ToolSpec<S extends z.ZodType> {
  name: string
  description: string
  input: S
  /** @default false */
  idempotent?: boolean
  /** @default the runtime's `timeouts.toolMs` (120 000 in the shipped defaults) */
  timeoutMs?: number
  /** Capabilities a call needs, checked against the thread's `permissions`. @default [] */
  permissions?: readonly string[]
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
  if (timeoutMs !== undefined && (!Number.isFinite(timeoutMs) || timeoutMs <= 0)) {
    throw new TypeError(`defineTool: timeoutMs of "${spec.name}" must be a positive number of ms (got ${timeoutMs})`)
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
}

function errorOutcome(error: string, message: string): ToolOutcome {
  return { ok: false, output: { error, message } }
}

/** A result is recorded in the transcript as JSON: one that cannot be is an error for the model, not a crash. */
function recordable(toolName: string, output: unknown): ToolOutcome {
  try {
    JSON.stringify(output)
    return { ok: true, output }
  } catch (error) {
    return errorOutcome('TOOL_OUTPUT_INVALID', `Tool "${toolName}" returned a value that cannot be recorded as JSON: ${describeError(error).message}`)
  }
}

/**
 * Runs one tool call: look-up, input validation, execution under a timeout. Never throws; every
 * failure becomes an error outcome for the model.
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
  const parsed = tool.input.safeParse(call.input)
  if (!parsed.success) {
    return errorOutcome('TOOL_INPUT_INVALID', `Invalid input for tool "${tool.name}":\n${z.prettifyError(parsed.error)}`)
  }
  const controller = own ?? new AbortController()
  const onOuterAbort = (): void => controller.abort(context.signal.reason)
  if (!own) context.signal.addEventListener('abort', onOuterAbort, { once: true })
  const timeoutMs = tool.timeoutMs ?? defaultTimeoutMs
  let timer: NodeJS.Timeout | undefined
  const timedOut = new Promise<ToolOutcome>((resolve) => {
    timer = setTimeout(() => {
      controller.abort(new Error(`tool "${tool.name}" timed out`))
      resolve(errorOutcome('TOOL_TIMEOUT', `Tool "${tool.name}" did not finish within ${timeoutMs} ms and was stopped.`))
    }, timeoutMs)
  })
  try {
    const run = (async (): Promise<ToolOutcome> => {
      const output = await tool.execute(parsed.data, { signal: controller.signal, idempotencyKey: context.idempotencyKey, threadId: context.threadId })
      return recordable(tool.name, output === undefined ? null : output)
    })()
    return await Promise.race([run, timedOut])
  } catch (error) {
    const { message } = describeError(error)
    return errorOutcome('TOOL_FAILED', `Tool "${tool.name}" failed: ${message}`)
  } finally {
    clearTimeout(timer)
    if (!own) context.signal.removeEventListener('abort', onOuterAbort)
  }
}
