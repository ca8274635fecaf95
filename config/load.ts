/**
 * Reading configuration: read a file, parse its YAML, validate it, merge the layers.
 */
import fs from 'node:fs'
import os from 'node:os'
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

/** Per-key records (byReason, byDirective) merge key by key, each entry field by field. */
function mergeRecords<T extends object>(base: Record<string, T>, layer: Record<string, T> | undefined): Record<string, T> {
  if (!layer) return base
  const out: Record<string, T> = { ...base }
  for (const [key, value] of Object.entries(layer)) out[key] = { ...(base[key] ?? {}), ...value } as T
  return out
}

/** Layers merged in order, later ones winning field by field; a later layer's error patterns are tried first. */
export function mergeConfig(base: Config, ...layers: ReadonlyArray<ConfigLayer | undefined>): Config {
  let merged = base
  for (const layer of layers) {
    if (!layer) continue
    merged = {
      limits: { ...merged.limits, ...layer.limits },
      retry: { ...merged.retry, ...layer.retry },
      timeouts: { ...merged.timeouts, ...layer.timeouts },
      errors: { patterns: [...(layer.errors?.patterns ?? []), ...merged.errors.patterns] },
      escalation: { ...merged.escalation, ...layer.escalation },
      orphans: { ...merged.orphans, ...layer.orphans },
      requests: { ...merged.requests, ...layer.requests },
      context: { ...merged.context, ...layer.context },
      supervision: { ...merged.supervision, ...layer.supervision },
      children: { ...merged.children, ...layer.children },
      recovery: {
        ...merged.recovery,
        ...layer.recovery,
        byReason: mergeRecords(merged.recovery.byReason, layer.recovery?.byReason),
      },
      governance: {
        ...merged.governance,
        ...layer.governance,
        byDirective: mergeRecords(merged.governance.byDirective, layer.governance?.byDirective),
      },
      waits: { ...merged.waits, ...layer.waits },
      hooks: [...merged.hooks, ...(layer.hooks ?? [])],
    }
  }
  return merged
}

/** Where the user's configuration lives: $XDG_CONFIG_HOME/spindle/config.yaml, else ~/.config/spindle/config.yaml. */
export function userConfigFile(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(os.homedir(), '.config')
  return path.join(base, 'spindle', 'config.yaml')
}

/** The project layer of a data directory. */
export function projectConfigFile(dir: string): string {
  return path.join(dir, 'config.yaml')
}

/** A layer read from `file` if it exists; a file that exists but is invalid fails, naming it. */
export function readOptionalLayer(file: string): ConfigLayer | undefined {
  if (!fs.existsSync(file)) return undefined
  return readConfigLayer(file)
}

export interface FileLayer {
  kind: 'user' | 'project'
  file: string
  layer: ConfigLayer
}

/**
 * System defaults, then the user's file, then the project's file (`<dir>/config.yaml`).
 * `userFile: null` skips the user layer (tests, sandboxes). Files that do not exist are skipped.
 */
export function loadFileLayers(dir: string, userFile: string | null = userConfigFile()): { config: Config; layers: FileLayer[] } {
  const layers: FileLayer[] = []
  const candidates: Array<[FileLayer['kind'], string | null]> = [
    ['user', userFile],
    ['project', projectConfigFile(dir)],
  ]
  for (const [kind, file] of candidates) {
    if (file === null) continue
    const layer = readOptionalLayer(file)
    if (layer) layers.push({ kind, file, layer })
  }
  return { config: mergeConfig(systemDefaults(), ...layers.map((l) => l.layer)), layers }
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
