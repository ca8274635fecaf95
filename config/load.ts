/**
 * Reading configuration: read a file, parse its YAML, validate it, merge the layers.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Document } from 'yaml'
import { parseDocument } from 'yaml'
import { z } from 'zod'
import { FileTooLarge, NotRegularFile, readSmallRegular } from '../persistence/fdio.js'
import { SpindleError } from '../src/base/errors.js'
import type { Config, ConfigLayer } from './schema.js'
import { ConfigLayerSchema, ConfigSchema, closestKey, knownKeys, trustingShippedPatterns } from './schema.js'

function invalid(file: string, message: string, details: Record<string, unknown> = {}): SpindleError {
  return new SpindleError('CONFIG_INVALID', `${file}: ${message}`, { details: { file, ...details } })
}

/** Largest configuration or directive file read: they are a few KiB; anything near this is a mistake. */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024

/** Why a configuration or directive file cannot be read; its message completes "<file> …". */
export class UnreadableConfigFile extends Error {}

/**
 * The text of a configuration or directive file, without a byte order mark. It must be a regular
 * file (a symlink to one is fine) of at most MAX_CONFIG_FILE_BYTES: a FIFO, a device or a
 * directory in its place is refused without blocking on it or reading it whole. Throws
 * UnreadableConfigFile saying why.
 */
export function readConfigText(file: string): string {
  try {
    return readSmallRegular(file, MAX_CONFIG_FILE_BYTES)
  } catch (error) {
    if (error instanceof NotRegularFile) throw new UnreadableConfigFile(`is ${error.kind}, not a file`)
    if (error instanceof FileTooLarge) {
      throw new UnreadableConfigFile(
        error.size === null
          ? `is more than ${MAX_CONFIG_FILE_BYTES} bytes (1 MiB); a configuration file may have at most that`
          : `is ${error.size} bytes; a configuration file may have at most ${MAX_CONFIG_FILE_BYTES} (1 MiB)`,
      )
    }
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT' && isSymlink(file)) throw new UnreadableConfigFile(`is a symbolic link to ${readLink(file)}, which does not exist`)
    throw new UnreadableConfigFile(`cannot be read (${(error as Error).message})`)
  }
}

function isSymlink(file: string): boolean {
  try {
    return fs.lstatSync(file).isSymbolicLink()
  } catch {
    return false
  }
}

function readLink(file: string): string {
  try {
    return fs.readlinkSync(file)
  } catch {
    return 'a missing file'
  }
}

/**
 * The JavaScript value of a parsed YAML document. Turning it into data can fail on its own: an
 * alias bomb ("billion laughs") stops at the yaml package's alias limit, a document nested too
 * deeply overflows the stack. Throws an Error saying which.
 */
export function yamlToJs(doc: Document.Parsed): unknown {
  try {
    return doc.toJS({ maxAliasCount: 100 })
  } catch (error) {
    const message = (error as Error)?.message ?? String(error)
    if (error instanceof RangeError) throw new Error(`is nested too deeply to read (${message})`)
    if (/alias/i.test(message)) throw new Error(`expands too many aliases (${message}): refusing what looks like an alias bomb`)
    throw new Error(`cannot be turned into data (${message})`)
  }
}

/** Parses YAML text, reporting a syntax error with its line and column. */
export function parseYaml(text: string, file: string): unknown {
  const doc = parseDocument(text, { prettyErrors: true })
  const error = doc.errors[0]
  if (error) {
    const [line, column] = error.linePos?.[0] ? [error.linePos[0].line, error.linePos[0].col] : [undefined, undefined]
    throw invalid(file, `invalid YAML${line ? ` at line ${line}, column ${column}` : ''}: ${error.message.split('\n')[0]}`, { line, column })
  }
  let value: unknown
  try {
    value = yamlToJs(doc)
  } catch (error) {
    throw invalid(file, (error as Error).message)
  }
  return value ?? {}
}

/** "retry.maxRetrys: unknown key (did you mean maxRetries?)", for every key the schema does not know. */
function unknownKeys(schema: z.ZodType, issue: z.core.$ZodIssue): { at: string; message: string } | null {
  if (issue.code !== 'unrecognized_keys') return null
  const known = knownKeys(schema, issue.path)
  const where = issue.path.join('.')
  const parts = issue.keys.map((key) => {
    const guess = closestKey(key, known)
    return `${where ? `${where}.` : ''}${key}: unknown key${guess ? ` (did you mean ${guess}?)` : ''}`
  })
  const at = `${where ? `${where}.` : ''}${issue.keys[0]}`
  return { at, message: `${parts.join('; ')}${known.length ? `. ${where || 'The top level'} has: ${known.join(', ')}` : ''}` }
}

function validate<T>(schema: z.ZodType<T>, value: unknown, file: string): T {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    const got = Array.isArray(value) ? 'a list' : typeof value === 'string' ? 'a string' : typeof value
    throw invalid(file, `(top level): must be a mapping of sections (limits:, retry:, hooks: …), not ${got}.`, { path: '(top level)' })
  }
  const result = schema.safeParse(value)
  if (result.success) return result.data
  const issue = result.error.issues[0]!
  const unknown = unknownKeys(schema, issue)
  if (unknown) throw invalid(file, `${unknown.message}.`, { path: unknown.at })
  const at = issue.path.length ? issue.path.join('.') : '(top level)'
  throw invalid(file, `${at}: ${issue.message}.\n${z.prettifyError(result.error)}`, { path: at })
}

/** Reads and validates one configuration layer from a YAML file. */
export function readConfigLayer(file: string): ConfigLayer {
  let text: string
  try {
    text = readConfigText(file)
  } catch (error) {
    throw invalid(file, (error as Error).message)
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
      approvals: {
        ...merged.approvals,
        ...layer.approvals,
        // A layer adds tools to approve: a directive or a spawn cannot drop one the project requires.
        tools: [...new Set([...merged.approvals.tools, ...(layer.approvals?.tools ?? [])])],
      },
      escalation: { ...merged.escalation, ...layer.escalation },
      orphans: { ...merged.orphans, ...layer.orphans },
      requests: { ...merged.requests, ...layer.requests },
      events: { ...merged.events, ...layer.events },
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
      output: { ...merged.output, ...layer.output },
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
  // lstat, not exists: a symlink to a file that is gone is a mistake to report, not a missing layer.
  try {
    fs.lstatSync(file)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined
    throw invalid(file, `cannot be read (${(error as Error).message})`)
  }
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
    cached = trustingShippedPatterns(() => validate(ConfigSchema, parseYaml(readConfigText(file), file), file))
  }
  return cached
}
