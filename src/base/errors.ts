/**
 * spindle's error type. Callers branch on `code`, never on `message`; the CLI maps codes to exit
 * statuses. Codes are permanent: deprecate, never rename or delete.
 */

export const SPINDLE_ERROR_CODES = [
  'INVALID_OPTIONS',
  'INVALID_THREAD_ID',
  'THREAD_NOT_FOUND',
  'THREAD_NOT_ACTIVE',
  'STATE_CORRUPT',
  'STATE_VERSION_UNSUPPORTED',
  'TRANSCRIPT_CORRUPT',
  'TRANSCRIPT_CHAIN_BROKEN',
  'FILES_MISSING',
  'REGISTRY_FAILED',
  'TOOL_INPUT_INVALID',
  'TOOL_TIMEOUT',
  'TOOL_FAILED',
  'TOOL_UNKNOWN',
  'TOOL_INTERRUPTED',
  'TOOL_NOT_ALLOWED',
  'TOOL_DENIED',
  'WAIT_TIMED_OUT',
  'PERMISSION_DENIED',
  'MODEL_FAILED',
  'MODEL_SCRIPT_EXHAUSTED',
  'MODEL_NOT_FOUND',
  'FOLLOW_UP_REFUSED',
  'MODEL_TIMEOUT',
  'SUBSCRIBER_FAILED',
  'RUNTIME_CLOSED',
  'REPLAY_DIVERGED',
  'CONFIG_INVALID',
  'THREAD_NOT_SUSPENDED',
  'NO_PENDING_APPROVAL',
  'APPROVAL_NEEDS_LIMITS',
  'LIMIT_STILL_EXCEEDED',
  'APPROVAL_ALREADY_ANSWERED',
  'SPAWN_REFUSED',
  'CANCEL_REFUSED',
  'REQUEST_INVALID',
  'HOOK_FAILED',
  'BUDGET_EXCEEDED',
  'LEDGER_FAILED',
  'DIRECTIVE_INVALID',
  'DIRECTIVE_NOT_FOUND',
  'SUPERVISION_GAVE_UP',
  'WAIT_TIMEOUT',
  'CHILD_FAILED',
  'RECOVERY_FAILED',
  'LEASE_LOST',
  'THREAD_LEASED',
  'ORPHAN_MARKED',
  'TRANSCRIPT_BEHIND_JOURNAL',
  'TRANSCRIPT_FOREIGN_TAIL',
  'TRANSCRIPT_STALE_LINES',
  'JOURNAL_UNREADABLE',
  'DATA_DIR_INVALID',
  'DATA_DIR_NOT_FOUND',
  'CRASH_LOOP',
  'CRASH_LOOP_PROBATION_ENDED',
  'WAIT_CYCLE',
  'STORAGE_FAILED',
  'DESCRIPTORS_EXHAUSTED',
  'THREAD_ID_TAKEN',
  'OUTPUT_SCHEMA_INVALID',
  'OUTPUT_INVALID',
  'DATABASE_UNAVAILABLE',
  'DATABASE_SCHEMA_NEWER',
  'MIGRATION_TARGET_NOT_EMPTY',
  'MIGRATION_MISMATCH',
] as const

export type SpindleErrorCode = (typeof SPINDLE_ERROR_CODES)[number]

const BRAND = Symbol.for('spindle.error')

export interface SpindleErrorOptions {
  cause?: unknown
  /** Structured facts about the failure (file, seq, thread id …), safe to print and to serialise. */
  details?: Record<string, unknown>
}

export class SpindleError extends Error {
  readonly code: SpindleErrorCode
  readonly details: Record<string, unknown>
  readonly [BRAND] = true

  constructor(code: SpindleErrorCode, message: string, options: SpindleErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.code = code
    this.details = options.details ?? {}
  }

  toJSON(): { code: SpindleErrorCode; message: string; details: Record<string, unknown> } {
    return { code: this.code, message: this.message, details: this.details }
  }
}
SpindleError.prototype.name = 'SpindleError'

const REFUSAL = Symbol.for('spindle.toolRefusal')

/**
 * A tool's deliberate refusal of one call, meant for the model: its error result carries this
 * error's code and details rather than the TOOL_FAILED a tool that broke gets, so the model can
 * tell "not this, do something else" from a failure.
 */
export class ToolRefusal extends SpindleError {
  readonly [REFUSAL] = true
}
ToolRefusal.prototype.name = 'ToolRefusal'

/** Brand check, like {@link isSpindleError}. */
export function isToolRefusal(value: unknown): value is ToolRefusal {
  return isSpindleError(value) && (value as unknown as Record<symbol, unknown>)[REFUSAL] === true
}

/** Brand check that survives two copies of the package in one process (unlike `instanceof`). */
export function isSpindleError(value: unknown): value is SpindleError {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true
}

/** Plain data for any thrown value: what goes into transcripts, snapshots and outcomes. */
export function describeError(value: unknown): { code: string; message: string } {
  if (isSpindleError(value)) return { code: value.code, message: value.message }
  if (value instanceof Error) return { code: (value as { code?: string }).code ?? value.name, message: value.message }
  return { code: 'UNKNOWN', message: String(value) }
}

/**
 * A schema's complaint as the middle of a sentence: its first letter lowered, the rest as it is
 * (it may quote the keys the user wrote: `Unrecognized keys: "baseDelayMs"`).
 */
export function midSentence(message: string): string {
  return message.charAt(0).toLowerCase() + message.slice(1)
}
