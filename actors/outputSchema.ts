/**
 * Structured results: a directive's output schema as the JSON Schema a thread keeps, the check a
 * final answer goes through, and what the model is told when its answer fails it. Side effects
 * (none, but the spawner and the model call use it). Not imported by machines/.
 */
import { z } from 'zod'
import { SpindleError } from '../src/base/errors.js'

/** A JSON Schema object, as a directive file or host code gives it. */
export type JsonSchema = Record<string, unknown>

/** What checking a final answer found: its value, or what is wrong with it (one line per problem). */
export type OutputCheck = { ok: true; value: unknown } | { ok: false; errors: string[] }

/** Checks a parsed value against the output schema. */
export type OutputValidator = (value: unknown) => OutputCheck

function isZodSchema(schema: unknown): schema is z.ZodType {
  return typeof schema === 'object' && schema !== null && typeof (schema as { safeParse?: unknown }).safeParse === 'function' && '_zod' in schema
}

function refused(directive: string, why: string, cause?: unknown): SpindleError {
  return new SpindleError(
    'OUTPUT_SCHEMA_INVALID',
    `directive "${directive}": its output schema ${why}. Give a zod object schema, or a JSON Schema of the types, formats and bounds zod's fromJSONSchema takes (no if/then/else, no external $ref).`,
    { details: { field: 'directive.output', directive }, ...(cause !== undefined ? { cause } : {}) },
  )
}

/**
 * The JSON Schema a thread keeps for `schema` (zod, or JSON Schema already), checked so that any
 * process can validate with it. Zod gives its input side: what the model must write, before any
 * transform. Throws OUTPUT_SCHEMA_INVALID for what cannot be a JSON Schema or cannot be validated.
 */
export function outputJsonSchema(directive: string, schema: unknown): JsonSchema {
  let json: JsonSchema
  if (isZodSchema(schema)) {
    try {
      json = z.toJSONSchema(schema, { io: 'input' }) as JsonSchema
    } catch (error) {
      throw refused(directive, `cannot be written as JSON Schema (${(error as Error).message})`, error)
    }
  } else if (typeof schema === 'object' && schema !== null && !Array.isArray(schema)) {
    try {
      json = JSON.parse(JSON.stringify(schema)) as JsonSchema
    } catch (error) {
      throw refused(directive, 'is not plain JSON', error)
    }
  } else {
    throw refused(directive, `must be a zod schema or a JSON Schema object, not ${Array.isArray(schema) ? 'an array' : typeof schema}`)
  }
  jsonSchemaValidator(json, directive)
  return json
}

/** A zod schema the host gave, or undefined for a JSON Schema. */
export function zodOutputSchema(schema: unknown): z.ZodType | undefined {
  return isZodSchema(schema) ? schema : undefined
}

function issuesOf(error: z.ZodError): string[] {
  return error.issues.map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(the answer)'}: ${issue.message}`)
}

/** A validator over a zod schema: the value it gives is zod's parse of the answer. */
export function zodValidator(schema: z.ZodType): OutputValidator {
  return (value) => {
    const parsed = schema.safeParse(value)
    return parsed.success ? { ok: true, value: parsed.data } : { ok: false, errors: issuesOf(parsed.error) }
  }
}

/** A validator over a JSON Schema (through zod's fromJSONSchema); OUTPUT_SCHEMA_INVALID if it cannot be one. */
export function jsonSchemaValidator(schema: JsonSchema, directive: string): OutputValidator {
  let compiled: z.ZodType
  try {
    compiled = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0])
  } catch (error) {
    throw refused(directive, `cannot be validated (${(error as Error).message})`, error)
  }
  return (value) => {
    const parsed = compiled.safeParse(value)
    // The answer as the model wrote it: what a process without the host's zod schema can give.
    return parsed.success ? { ok: true, value } : { ok: false, errors: issuesOf(parsed.error) }
  }
}

/** The JSON text of a final answer: the answer, or the inside of the one ```json fence it is wrapped in. */
function jsonText(text: string): string {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n?```\s*$/i.exec(text)
  return fenced ? fenced[1]! : text
}

/**
 * Parses and validates a final answer. The value kept is always the JSON the model wrote, so the
 * transcript replays without any schema; `value` is what the validator made of it.
 */
export function checkFinalAnswer(text: string, validate: OutputValidator): { ok: true; json: unknown; value: unknown } | { ok: false; errors: string[] } {
  let json: unknown
  try {
    json = JSON.parse(jsonText(text))
  } catch (error) {
    return { ok: false, errors: [`(the answer): not JSON (${(error as Error).message})`] }
  }
  const checked = validate(json)
  return checked.ok ? { ok: true, json, value: checked.value } : checked
}
