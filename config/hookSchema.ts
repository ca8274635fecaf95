/**
 * Hooks as data: what a YAML layer, a directive or a spawn call may say under `hooks:`.
 *
 * A hook names the event it listens to, an optional CEL condition (`when`) and the action to take
 * when the condition holds. The condition itself is parsed and type-checked by
 * src/policies/hooks.ts when the hooks are compiled; this schema only checks the shape.
 */
import { z } from 'zod'

export const HOOK_EVENTS = ['error', 'limit', 'after_step', 'after_complete', 'thread_started', 'context_window_pressure'] as const
export const HOOK_ACTIONS = ['retry', 'fail', 'abort', 'continue'] as const

export type HookEvent = (typeof HOOK_EVENTS)[number]
export type HookAction = (typeof HOOK_ACTIONS)[number]

function oneOf(values: readonly string[]) {
  return (issue: { input?: unknown }) => `must be one of ${values.join(', ')} (got ${JSON.stringify(issue.input) ?? 'nothing'})`
}

export const HookEventSchema = z.enum(HOOK_EVENTS, { error: oneOf(HOOK_EVENTS) })
export const HookActionSchema = z.enum(HOOK_ACTIONS, { error: oneOf(HOOK_ACTIONS) })

const newLimit = z.number().nonnegative().nullable()

/** New limits for a `retry` on a `limit` event; null is unlimited, an absent limit is left as it is. */
export const HookLimitsSchema = z
  .strictObject({ turns: newLimit, tokens: newLimit, spend: newLimit, durationMs: newLimit, spawns: newLimit, depth: newLimit })
  .partial()

export const HookSpecSchema = z
  .strictObject({
    /** Unique within its source (file, directive, options); named in every error and decision. */
    id: z.string().min(1).refine((id) => id.trim() !== '', { message: 'id must not be blank' }),
    event: HookEventSchema,
    /** A CEL expression over `thread` and the event's own variable; absent means always. */
    when: z.string().min(1).optional(),
    action: HookActionSchema,
    /** Said in the outcome or the transcript when the hook decides. */
    message: z.string().optional(),
    /** For `retry` on a `limit` event: the limits to carry on under (default: the escalation proposal). */
    limits: HookLimitsSchema.optional(),
  })
  .superRefine((hook, ctx) => {
    if (hook.limits !== undefined && (hook.event !== 'limit' || hook.action !== 'retry')) {
      ctx.addIssue({
        code: 'custom',
        path: ['limits'],
        message: `limits only apply to action retry on event limit (this hook is ${hook.action} on ${hook.event})`,
      })
    }
  })

export type HookSpec = z.infer<typeof HookSpecSchema>
export type HookLimits = z.infer<typeof HookLimitsSchema>
