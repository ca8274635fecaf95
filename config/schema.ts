/**
 * The shape of spindle's configuration. This schema is the single source of truth: the type is
 * inferred from it and every YAML layer is validated against it.
 */
import { z } from 'zod'

const limit = z.number().nonnegative().nullable()

export const LimitsSchema = z.strictObject({
  turns: limit,
  tokens: limit,
  spend: limit,
  durationMs: limit,
})

export const RetrySchema = z.strictObject({
  maxRetries: z.number().int().nonnegative(),
  baseMs: z.number().positive(),
  capMs: z.number().positive(),
  jitter: z.number().min(0).max(1),
  rateLimitDefaultMs: z.number().nonnegative(),
  quotaWaitMs: z.number().nonnegative(),
})

export const TimeoutsSchema = z.strictObject({
  modelMs: z.number().positive(),
  toolMs: z.number().positive(),
})

export const ConfigSchema = z.strictObject({
  limits: LimitsSchema,
  retry: RetrySchema,
  timeouts: TimeoutsSchema,
})

export type Config = z.infer<typeof ConfigSchema>

/** What one layer (a file, a directive, a spawn) may set: any subset of the full shape. */
export const ConfigLayerSchema = z.strictObject({
  limits: LimitsSchema.partial().optional(),
  retry: RetrySchema.partial().optional(),
  timeouts: TimeoutsSchema.partial().optional(),
})

export type ConfigLayer = z.infer<typeof ConfigLayerSchema>
