/**
 * The front matter of a directive file (markdown: YAML front matter, then the prompt). One zod
 * schema is the shape and the TypeScript type.
 */
import { z } from 'zod'
import { ConfigLayerSchema } from './schema.js'
import { PermissionsSchema } from '../src/base/permissions.js'

export const DirectiveInputSchema = z.strictObject({
  type: z.enum(['string', 'number', 'boolean']).default('string'),
  description: z.string().optional(),
  required: z.boolean().default(true),
  default: z.union([z.string(), z.number(), z.boolean()]).optional(),
})

export const DirectiveFrontMatterSchema = z.strictObject({
  /** The directive's name: thread ids start with it. */
  name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$/, 'letters, digits, "-" and "_", starting with a letter or digit'),
  description: z.string().optional(),
  /**
   * The system prompt: the agent's role and how it works, given to the model on every call. Inputs
   * are filled in as in the prompt ({{name}}). A YAML block (`instructions: |`) keeps line breaks.
   */
  instructions: z.string().min(1).optional(),
  /** The name of one of the runtime's models (`createRuntime({ models })`) to run it on; the CLI runs every directive on its scripted model. */
  model: z.string().min(1).optional(),
  limits: ConfigLayerSchema.shape.limits,
  retry: ConfigLayerSchema.shape.retry,
  escalation: ConfigLayerSchema.shape.escalation,
  hooks: ConfigLayerSchema.shape.hooks,
  /** Tools whose calls wait for a person's approval, and how long a request waits (adds to the configuration's). */
  approvals: ConfigLayerSchema.shape.approvals,
  /** Names of tools the thread is meant to use (each must be known to the runtime that runs it). */
  tools: z.array(z.string().min(1)).optional(),
  /**
   * Capabilities the thread's tools may use (`network: false`, `'*': false` to deny all not named);
   * a tool needing a denied one is hidden and its calls are refused with PERMISSION_DENIED.
   */
  permissions: PermissionsSchema.optional(),
  /**
   * The JSON Schema the thread's final answer must match (structured results): the answer is
   * parsed, validated, sent back with the errors while `output.maxTries` allows, and `done` gives
   * the value as `output`.
   */
  output: z.record(z.string(), z.unknown()).optional(),
  /** Inputs, filled into the prompt and the instructions as {{name}}. */
  input: z.record(z.string().regex(/^[a-zA-Z_][a-zA-Z0-9_]*$/, 'a name of letters, digits and "_"'), DirectiveInputSchema).optional(),
})

export type DirectiveFrontMatter = z.infer<typeof DirectiveFrontMatterSchema>
