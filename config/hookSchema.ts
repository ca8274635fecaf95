/**
 * Hooks as data: what a YAML layer or a directive may say under `hooks:`.
 */
import { z } from 'zod'

export const HOOK_EVENTS = ['error', 'limit', 'after_step', 'after_complete', 'thread_started', 'context_window_pressure'] as const
export const HOOK_ACTIONS = ['retry', 'fail', 'abort', 'continue'] as const

const newLimit = z.number().nonnegative().nullable()

export const HookSpecSchema = z.strictObject({
  id: z.string().min(1),
  event: z.enum(HOOK_EVENTS),
  /** A CEL expression over `thread` and the event's own variable; absent means always. */
  when: z.string().min(1).optional(),
  action: z.enum(HOOK_ACTIONS),
  /** Said in the outcome or the transcript when the hook decides. */
  message: z.string().optional(),
  /** For `retry` on a `limit` event: the limits to carry on under (default: the escalation proposal). */
  limits: z
    .strictObject({ turns: newLimit, tokens: newLimit, spend: newLimit, durationMs: newLimit, spawns: newLimit, depth: newLimit })
    .partial()
    .optional(),
})

export type HookEvent = (typeof HOOK_EVENTS)[number]
export type HookAction = (typeof HOOK_ACTIONS)[number]
export type HookSpec = z.infer<typeof HookSpecSchema>
