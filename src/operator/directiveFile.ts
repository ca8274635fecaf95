/**
 * Directive files: markdown with YAML front matter (name, model, limits, tools, hooks,
 * permissions, inputs) and the prompt as the body. Found by name in the project, then the user,
 * then the system directory.
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseDocument } from 'yaml'
import type { DirectiveFrontMatter } from '../../config/directiveSchema.js'
import { DirectiveFrontMatterSchema } from '../../config/directiveSchema.js'
import { readConfigText, userConfigFile, yamlToJs } from '../../config/load.js'
import { closestKey, knownKeys } from '../../config/schema.js'
import { SpindleError } from '../base/errors.js'
import type { DirectiveSpec } from '../runtime/api.js'

/** `{{name}}`: an input filled into the prompt and the instructions. */
const PLACEHOLDER = /\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}/g

export interface DirectiveFile {
  file: string
  frontMatter: DirectiveFrontMatter
  /** The prompt template (the markdown body). */
  body: string
}

function invalid(file: string, message: string, field?: string): SpindleError {
  return new SpindleError('DIRECTIVE_INVALID', `${file}: ${field ? `${field}: ` : ''}${message}`, { details: { file, ...(field ? { field } : {}) } })
}

/** Reads and validates a directive file; errors name the file, the field and what was expected. */
export function loadDirectiveFile(file: string): DirectiveFile {
  let text: string
  try {
    // A regular file of at most 1 MiB (a FIFO would block, /dev/zero never end), without a BOM.
    text = readConfigText(file)
  } catch (error) {
    throw invalid(file, (error as Error).message)
  }
  const match = /^---\r?\n([\s\S]*?)\r?\n---\r?\n?([\s\S]*)$/.exec(text)
  if (!match) throw invalid(file, 'must start with YAML front matter between two "---" lines, followed by the prompt')
  const document = parseDocument(match[1]!, { prettyErrors: true })
  if (document.errors.length > 0) {
    const first = document.errors[0]!
    const line = first.linePos?.[0]
    throw invalid(file, `invalid YAML in the front matter${line ? ` at line ${line.line + 1}, column ${line.col}` : ''}: ${first.message.split('\n')[0]}`)
  }
  let data: unknown
  try {
    data = yamlToJs(document)
  } catch (error) {
    throw invalid(file, `the front matter ${(error as Error).message}`)
  }
  data ??= {}
  if (typeof data !== 'object' || Array.isArray(data)) {
    throw invalid(file, `must be a mapping (name:, limits: …), not ${Array.isArray(data) ? 'a list' : typeof data}`, '(front matter)')
  }
  const parsed = DirectiveFrontMatterSchema.safeParse(data)
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!
    if (issue.code === 'unrecognized_keys') {
      const known = knownKeys(DirectiveFrontMatterSchema, issue.path)
      const where = issue.path.join('.')
      const key = issue.keys[0]!
      const guess = closestKey(key, known)
      throw invalid(file, `unknown key${guess ? ` (did you mean ${guess}?)` : ''}${known.length ? `; ${where || 'the front matter'} has: ${known.join(', ')}` : ''}`, where ? `${where}.${key}` : key)
    }
    throw invalid(file, issue.message, issue.path.join('.') || '(front matter)')
  }
  const body = match[2]!.trim()
  if (body === '') throw invalid(file, 'has no prompt: write it after the front matter')
  for (const [where, text] of [['prompt', body], ['instructions', parsed.data.instructions ?? '']] as const) {
    for (const [, name] of text.matchAll(PLACEHOLDER)) {
      // Own keys only: `{{constructor}}` or `{{toString}}` are not declared by Object.prototype.
      if (!Object.hasOwn(parsed.data.input ?? {}, name!)) throw invalid(file, `the ${where} ${where === 'prompt' ? 'uses' : 'use'} {{${name}}}, which is not declared under input`, `input.${name}`)
    }
  }
  return { file, frontMatter: parsed.data, body }
}

/** The directives shipped with spindle: `config/directives` at the package root (from src/operator/ or dist/src/operator/). */
function systemDirectives(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 4; i++) {
    const candidate = path.join(dir, 'config', 'directives')
    if (fs.existsSync(candidate)) return candidate
    dir = path.dirname(dir)
  }
  return path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'config', 'directives')
}

/** Where directives named in commands are looked for, in order. */
export function directiveDirs(dataDir: string, env: NodeJS.ProcessEnv = process.env): Array<{ layer: 'project' | 'user' | 'system'; dir: string }> {
  return [
    { layer: 'project', dir: path.join(path.resolve(dataDir), 'directives') },
    { layer: 'user', dir: path.join(path.dirname(userConfigFile(env)), 'directives') },
    { layer: 'system', dir: systemDirectives() },
  ]
}

/** A directive file given by path, or found by name in the project, user and system directories. */
export function findDirective(nameOrFile: string, dataDir: string): DirectiveFile {
  if (nameOrFile.endsWith('.md') || nameOrFile.includes('/') || nameOrFile.includes(path.sep)) {
    if (!fs.existsSync(nameOrFile)) throw new SpindleError('DIRECTIVE_NOT_FOUND', `No directive file ${nameOrFile}.`, { details: { file: nameOrFile } })
    return loadDirectiveFile(nameOrFile)
  }
  if (!/^[a-zA-Z0-9][a-zA-Z0-9_-]{0,62}$/.test(nameOrFile)) {
    throw new SpindleError('DIRECTIVE_NOT_FOUND', `"${nameOrFile}" is not a directive name (letters, digits, "-" and "_").`, { details: { name: nameOrFile } })
  }
  const looked: string[] = []
  for (const { dir } of directiveDirs(dataDir)) {
    const file = path.join(dir, `${nameOrFile}.md`)
    looked.push(file)
    if (fs.existsSync(file)) return loadDirectiveFile(file)
  }
  throw new SpindleError('DIRECTIVE_NOT_FOUND', `No directive named "${nameOrFile}". Looked for: ${looked.join(', ')}.`, { details: { name: nameOrFile, looked } })
}

/** The directive a thread is spawned with: the prompt with its inputs filled in, and its configuration layer. */
export function renderDirective(directive: DirectiveFile, inputs: Record<string, string>): DirectiveSpec {
  const declared = directive.frontMatter.input ?? {}
  for (const key of Object.keys(inputs)) {
    if (!Object.hasOwn(declared, key)) {
      throw invalid(directive.file, `unknown input "${key}"; it declares ${Object.keys(declared).join(', ') || 'none'}`, `input.${key}`)
    }
  }
  const values = new Map<string, string>()
  for (const [key, spec] of Object.entries(declared)) {
    const given = inputs[key] ?? (spec.default !== undefined ? String(spec.default) : undefined)
    if (given === undefined) {
      if (spec.required) throw invalid(directive.file, `input "${key}" is required${spec.description ? ` (${spec.description})` : ''}: pass --input ${key}=…`, `input.${key}`)
      values.set(key, '')
      continue
    }
    if (spec.type === 'number' && !Number.isFinite(Number(given))) throw invalid(directive.file, `input "${key}" must be a number (got ${JSON.stringify(given)})`, `input.${key}`)
    if (spec.type === 'boolean' && given !== 'true' && given !== 'false') throw invalid(directive.file, `input "${key}" must be true or false (got ${JSON.stringify(given)})`, `input.${key}`)
    values.set(key, given)
  }
  const fill = (text: string): string => text.replace(PLACEHOLDER, (_, name: string) => values.get(name) ?? '')
  const fm = directive.frontMatter
  return {
    name: fm.name,
    prompt: fill(directive.body),
    ...(fm.instructions ? { instructions: fill(fm.instructions).trim() } : {}),
    ...(fm.model ? { model: fm.model } : {}),
    ...(fm.limits ? { limits: fm.limits } : {}),
    ...(fm.retry ? { retry: fm.retry } : {}),
    ...(fm.escalation ? { escalation: fm.escalation } : {}),
    ...(fm.hooks ? { hooks: fm.hooks } : {}),
    ...(fm.tools ? { tools: fm.tools } : {}),
    ...(fm.permissions ? { permissions: fm.permissions } : {}),
    ...(fm.output ? { output: fm.output } : {}),
  }
}
