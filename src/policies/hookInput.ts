/**
 * What a hook's condition and handler see (`HookInput`), the CEL type of every variable and field
 * (`HOOK_VARIABLES`), and how an input becomes the context a condition is evaluated in
 * (`celContext`). Apart from the compiling of conditions (hookConditions.ts) and the hook table
 * (hooks.ts), which both read these declarations.
 *
 * Numbers. CEL keeps `int` and `double` apart, JavaScript does not. Every field below has a
 * declared CEL type, and values are converted to it before evaluation: counts (turns, tokens,
 * status …) are ints, money and ratios are doubles. Comparisons (`<`, `>=` …) between an int and
 * a double are CEL's own; `==` and `!=` between them are registered with the CEL environment
 * (hookConditions.ts), so `thread.cost.spend == 2` and `error.status == 429.0` work too.
 * Arithmetic keeps CEL's rule that both sides have the same type: write `thread.cost.spend * 2.0`,
 * not `* 2` (caught when the hooks compile). A limit that is unlimited is null:
 * `thread.limits.spend == null`.
 */
import type { Limits } from '../../machines/threadPolicy.js'

/**
 * The variables a `when` sees, as plain JSON data. Only `thread` and the variable of the event
 * being decided are filled in; the others are empty, so a condition about another event fails to
 * evaluate (reported) and does not match.
 */
export interface HookInput {
  thread: {
    id: string
    /** The directive's name. */
    directive: string
    /** Turns completed so far. */
    turn: number
    /** Attempt number of the current model call within this turn, from 1. */
    attempt: number
    /** Level in the thread tree (0 for a root). */
    depth: number
    state: string
    cost: { turns: number; inputTokens: number; outputTokens: number; tokens: number; spend: number }
    /** null is unlimited. */
    limits: Limits
  }
  /** For `error`. `status` and `code` are null when the failure has none. */
  error?: { category: string; message: string; status?: number | null; code?: string | null; attempt: number; retryInMs: number }
  /** For `limit`. `proposed` is null when the escalation policy proposes nothing. */
  limit?: { name: string; used: number; max: number; proposed: number | null }
  /** For `context_window_pressure`. */
  pressure?: { ratio: number; promptTokens: number; contextWindow: number }
  /** For `after_step`. */
  step?: { turn: number; toolCalls: number }
  /** For `after_complete`. */
  outcome?: { status: string; result: string | null }
  /** For `tool_approval`: the call that needs approval. */
  tool?: { name: string; callId: string; input: unknown }
}

// ── the CEL variables ─────────────────────────────────────────────────────────────────────────

/** A field's type: `?` marks one that may be null; `json` is any JSON value. */
export type Kind = 'int' | 'double' | 'string' | 'int?' | 'double?' | 'string?' | 'json'
export interface Shape {
  readonly [field: string]: Kind | Shape
}

/** Every variable and field a `when` may use, with its CEL type. Mirrors HookInput. */
export const HOOK_VARIABLES = {
  thread: {
    id: 'string',
    directive: 'string',
    turn: 'int',
    attempt: 'int',
    depth: 'int',
    state: 'string',
    cost: { turns: 'int', inputTokens: 'int', outputTokens: 'int', tokens: 'int', spend: 'double' },
    limits: { turns: 'int?', tokens: 'int?', spend: 'double?', durationMs: 'int?', spawns: 'int?', depth: 'int?' },
  },
  error: { category: 'string', message: 'string', status: 'int?', code: 'string?', attempt: 'int', retryInMs: 'int' },
  limit: { name: 'string', used: 'double', max: 'double', proposed: 'double?' },
  pressure: { ratio: 'double', promptTokens: 'int', contextWindow: 'int' },
  step: { turn: 'int', toolCalls: 'int' },
  outcome: { status: 'string', result: 'json' },
  tool: { name: 'string', callId: 'string', input: 'json' },
} as const satisfies Record<string, Shape>

type VariableName = keyof typeof HOOK_VARIABLES
export const VARIABLE_NAMES = Object.keys(HOOK_VARIABLES) as VariableName[]

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** A JSON value with integral numbers as CEL ints. */
function celJson(value: unknown, depth = 0): unknown {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt(value) : value
  if (depth > 32 || typeof value !== 'object' || value === null) return value
  if (Array.isArray(value)) return value.map((item) => celJson(item, depth + 1))
  const out: Record<string, unknown> = {}
  for (const [key, item] of Object.entries(value)) {
    // defineProperty: a key "__proto__" (JSON.parse makes it an own key) stays a key, not a prototype.
    if (item !== undefined) Object.defineProperty(out, key, { value: celJson(item, depth + 1), enumerable: true, writable: true, configurable: true })
  }
  return out
}

/**
 * A field converted to its declared CEL type. undefined: leave the field out (it is missing).
 * A value of the wrong type is passed as it is, so that CEL names the mismatch when it is used.
 */
function celField(value: unknown, kind: Kind): unknown {
  if (value === undefined || value === null) return kind.endsWith('?') || kind === 'json' ? null : undefined
  switch (kind) {
    case 'int':
    case 'int?':
      return typeof value === 'number' && Number.isFinite(value) ? BigInt(Math.round(value)) : value
    case 'double':
    case 'double?':
      return typeof value === 'bigint' ? Number(value) : value
    case 'json':
      return celJson(value)
    default:
      return value
  }
}

function celObject(value: unknown, shape: Shape): Record<string, unknown> {
  const source = isRecord(value) ? value : {}
  const out: Record<string, unknown> = {}
  for (const [field, kind] of Object.entries(shape)) {
    const converted = typeof kind === 'object' ? celObject(source[field], kind) : celField(source[field], kind)
    if (converted !== undefined) out[field] = converted
  }
  return out
}

/** The CEL context for an input: every variable present, those the input lacks empty. */
export function celContext(input: HookInput): Record<string, unknown> {
  const raw: Record<string, unknown> = isRecord(input) ? input : {}
  const context: Record<string, unknown> = {}
  for (const name of VARIABLE_NAMES) context[name] = isRecord(raw[name]) ? celObject(raw[name], HOOK_VARIABLES[name]) : {}
  return context
}
