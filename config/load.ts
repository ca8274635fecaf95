/**
 * Reading configuration: read a file, parse its YAML, validate it, merge the layers.
 */
import fs from 'node:fs'
import path from 'node:path'
import { parseDocument } from 'yaml'
import { z } from 'zod'
import { SpindleError } from '../src/errors.js'
import type { Config, ConfigLayer } from './schema.js'
import { ConfigLayerSchema, ConfigSchema } from './schema.js'

function invalid(file: string, message: string, details: Record<string, unknown> = {}): SpindleError {
  return new SpindleError('CONFIG_INVALID', `${file}: ${message}`, { details: { file, ...details } })
}

/** Parses YAML text, reporting a syntax error with its line and column. */
export function parseYaml(text: string, file: string): unknown {
  const doc = parseDocument(text, { prettyErrors: true })
  const error = doc.errors[0]
  if (error) {
    const [line, column] = error.linePos?.[0] ? [error.linePos[0].line, error.linePos[0].col] : [undefined, undefined]
    throw invalid(file, `invalid YAML${line ? ` at line ${line}, column ${column}` : ''}: ${error.message.split('\n')[0]}`, { line, column })
  }
  return doc.toJS() ?? {}
}

function validate<T>(schema: z.ZodType<T>, value: unknown, file: string): T {
  const result = schema.safeParse(value)
  if (result.success) return result.data
  const issue = result.error.issues[0]!
  const at = issue.path.length ? issue.path.join('.') : '(top level)'
  throw invalid(file, `${at}: ${issue.message}.\n${z.prettifyError(result.error)}`, { path: at })
}

/** Reads and validates one configuration layer from a YAML file. */
export function readConfigLayer(file: string): ConfigLayer {
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (error) {
    throw invalid(file, `cannot be read (${(error as Error).message})`)
  }
  return validate(ConfigLayerSchema, parseYaml(text, file), file)
}

/** Layers merged in order, later ones winning field by field. */
export function mergeConfig(base: Config, ...layers: ReadonlyArray<ConfigLayer | undefined>): Config {
  let merged = base
  for (const layer of layers) {
    if (!layer) continue
    merged = {
      limits: { ...merged.limits, ...layer.limits },
      retry: { ...merged.retry, ...layer.retry },
      timeouts: { ...merged.timeouts, ...layer.timeouts },
    }
  }
  return merged
}

// Found next to this module in the sources, and two levels up from the compiled dist/config/.
function defaultsFile(): string {
  const candidates = [path.join(import.meta.dirname, 'defaults.yaml'), path.join(import.meta.dirname, '../../config/defaults.yaml')]
  const found = candidates.find((file) => fs.existsSync(file))
  if (!found) throw invalid(candidates[0]!, 'the system defaults shipped with spindle are missing; reinstall the package')
  return found
}

let cached: Config | null = null

/** The system defaults shipped as config/defaults.yaml. */
export function systemDefaults(): Config {
  if (!cached) {
    const file = defaultsFile()
    cached = validate(ConfigSchema, parseYaml(fs.readFileSync(file, 'utf8'), file), file)
  }
  return cached
}
