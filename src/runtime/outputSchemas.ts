/**
 * The output schemas of the threads this process runs: the zod schema host code spawned a thread
 * with (kept in memory only: a schema is code), else a validator built once from the JSON Schema
 * the thread keeps. A thread carried on by another process validates with its JSON Schema.
 */
import type { z } from 'zod'
import { jsonSchemaValidator, zodValidator } from '../../actors/outputSchema.js'
import type { JsonSchema, OutputValidator } from '../../actors/outputSchema.js'

export class OutputSchemas {
  private readonly zod = new Map<string, z.ZodType>()
  private readonly validators = new Map<string, OutputValidator>()

  /** Thread `threadId` was spawned here with this zod schema. */
  remember(threadId: string, schema: z.ZodType): void {
    this.zod.set(threadId, schema)
    this.validators.delete(threadId)
  }

  /** What checks a final answer of thread `threadId`, whose directive keeps `schema`. */
  validator(threadId: string, directive: string, schema: JsonSchema): OutputValidator {
    let validate = this.validators.get(threadId)
    if (!validate) {
      const zod = this.zod.get(threadId)
      validate = zod ? zodValidator(zod) : jsonSchemaValidator(schema, directive)
      this.validators.set(threadId, validate)
    }
    return validate
  }

  /** The value `done` gives for a valid answer: zod's parse where this process has the schema, else the JSON. */
  parse(threadId: string, json: unknown): unknown {
    const zod = this.zod.get(threadId)
    if (!zod) return json
    const parsed = zod.safeParse(json)
    return parsed.success ? parsed.data : json
  }

  forget(threadId: string): void {
    this.zod.delete(threadId)
    this.validators.delete(threadId)
  }
}
