/**
 * Hooks as data: what a YAML layer, a directive or a spawn call may say under `hooks:`.
 *
 * A hook names the event it listens to, an optional CEL condition (`when`) and the action to take
 * when the condition holds. The condition itself is parsed and type-checked by
 * src/policies/hookConditions.ts when the hooks are compiled; this schema only checks the shape.
 */
import { z } from 'zod'

export const HOOK_EVENTS = ['error', 'limit', 'after_step', 'after_complete', 'thread_started', 'context_window_pressure', 'tool_approval'] as const
export const HOOK_ACTIONS = ['retry', 'fail', 'abort', 'continue', 'approve', 'deny'] as const

/** The actions a hook on `event` may take: a tool approval is approved, denied or left to a person. */
export function actionFits(event: string, action: string): boolean {
  const forApproval = action === 'approve' || action === 'deny' || action === 'continue'
  return event === 'tool_approval' ? forApproval : action !== 'approve' && action !== 'deny'
}

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
  .strictObject({
    turns: newLimit.describe('The new `turns` limit. `null`: unlimited.'),
    tokens: newLimit.describe('The new `tokens` limit. `null`: unlimited.'),
    spend: newLimit.describe('The new `spend` limit, in US dollars. `null`: unlimited.'),
    durationMs: newLimit.describe('The new `durationMs` limit, in ms. `null`: unlimited.'),
    spawns: newLimit.describe('The new `spawns` limit. `null`: unlimited.'),
    depth: newLimit.describe('The new `depth` limit. `null`: unlimited.'),
  })
  .partial()

export const HookSpecSchema = z
  .strictObject({
    id: z
      .string()
      .min(1)
      .refine((id) => id.trim() !== '', { message: 'id must not be blank' })
      .describe('Names the hook in every error and decision; unique within its file, directive or options.'),
    event: HookEventSchema.describe(
      'The event it decides: `error` (a model call failed), `limit` (a limit was reached), `context_window_pressure` (the prompt nears the context window), `thread_started`, `after_step` (a turn and its tools are done), `after_complete` (the thread stopped), `tool_approval` (a tool call needs approval before it runs).',
    ),
    when: z
      .string()
      .min(1)
      .optional()
      .describe(
        "A CEL condition over `thread` (its cost, limits, turn …) and the event's own variable (`error`, `limit`, `pressure`, `step`, `outcome`, `tool`); the hook decides only when it is true. Not set: always.",
      ),
    action: HookActionSchema.describe(
      'What happens: `retry` (retry the failed call, or carry on past the limit or the pressure), `fail` (end the thread in `error`, HOOK_FAILED), `abort` (cancel it), `continue` (the default behaviour). On `tool_approval` only: `approve` (the call runs), `deny` (the model gets the denial, with `message`, as its result) or `continue` (a person decides).',
    ),
    message: z.string().optional().describe('Said in the outcome or the transcript when the hook decides.'),
    limits: HookLimitsSchema.optional().describe(
      'For `retry` on a `limit` event: the limits to carry on under; a limit not named stays as it is. Not set: the escalation proposal.',
    ),
  })
  .superRefine((hook, ctx) => {
    if (!actionFits(hook.event, hook.action)) {
      ctx.addIssue({
        code: 'custom',
        path: ['action'],
        message: hook.event === 'tool_approval' ? `a tool_approval hook approves, denies or continues (got ${hook.action})` : `approve and deny only apply to event tool_approval (this hook is on ${hook.event})`,
      })
    }
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
