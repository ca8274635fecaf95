/**
 * The configuration reference (docs/configuration-reference.md), rendered from the schema and the
 * shipped defaults: every key by its full path, with its type, its default and the description the
 * schema gives it (`.describe()`). Pure: config/writeReference.ts writes the page (`npm run docs`),
 * and a test fails when the committed page is not what this renders.
 */
import { stringify } from 'yaml'
import { z } from 'zod'

/** The part of JSON Schema that `z.toJSONSchema` writes for the configuration schema. */
interface Json {
  type?: string | string[]
  description?: string
  title?: string
  enum?: unknown[]
  anyOf?: Json[]
  properties?: Record<string, Json>
  required?: string[]
  additionalProperties?: boolean | Json
  propertyNames?: Json
  items?: Json
  minimum?: number
  maximum?: number
  exclusiveMinimum?: number
  exclusiveMaximum?: number
  minLength?: number
  minItems?: number
}

export interface ConfigKey {
  /** `retry.maxRetries`; `recovery.byReason.<code>.chain` inside a map, `hooks[].id` inside a list. */
  path: string
  /** Markdown: `integer ≥ 0`, ``one of `a`, `b` ``, ``number > 0, or `null` `` … */
  type: string
  description: string | undefined
  /** What spindle ships for the key; null for a key inside a list or a map, which has no value of its own. */
  shipped: { value: unknown } | null
}

/** Every key of `schema` (the configuration schema), depth first, with what `defaults` ships for it. */
export function configKeys(schema: z.ZodType, defaults: unknown): ConfigKey[] {
  const root = z.toJSONSchema(schema, { io: 'input' }) as Json
  const keys: ConfigKey[] = []
  for (const [name, node] of Object.entries(root.properties ?? {})) collect(node, name, { value: field(defaults, name) }, false, keys)
  return keys
}

/** The paths of the keys that have no description in the schema. */
export function undocumentedKeys(schema: z.ZodType): string[] {
  return configKeys(schema, {})
    .filter((key) => !key.description?.trim())
    .map((key) => key.path)
}

function field(value: unknown, key: string): unknown {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>)[key] : undefined
}

/** The schema without its `null` alternative, and whether it had one. */
function unwrapNull(node: Json): { inner: Json; nullable: boolean } {
  if (node.anyOf?.length === 2) {
    const other = node.anyOf.find((n) => n.type !== 'null')
    if (other && node.anyOf.some((n) => n.type === 'null')) return { inner: other, nullable: true }
  }
  if (Array.isArray(node.type) && node.type.includes('null')) {
    const rest = node.type.filter((t) => t !== 'null')
    return { inner: { ...node, type: rest.length === 1 ? rest[0]! : rest }, nullable: true }
  }
  return { inner: node, nullable: false }
}

function isMap(node: Json): node is Json & { additionalProperties: Json } {
  return !node.properties && typeof node.additionalProperties === 'object'
}

function collect(node: Json, path: string, shipped: { value: unknown } | null, optional: boolean, into: ConfigKey[]): void {
  const { inner } = unwrapNull(node)
  into.push({ path, type: `${typeOf(node)}${optional ? ', optional' : ''}`, description: node.description, shipped })
  const children = (of: Json, prefix: string, values: { value: unknown } | null): void => {
    for (const [name, child] of Object.entries(of.properties ?? {})) {
      const value = values && { value: field(values.value, name) }
      collect(child, `${prefix}.${name}`, value, !(of.required ?? []).includes(name), into)
    }
  }
  if (inner.properties) children(inner, path, shipped)
  else if (isMap(inner)) children(inner.additionalProperties, `${path}.<${inner.propertyNames?.title ?? 'name'}>`, null)
  else if (inner.items?.properties) children(inner.items, `${path}[]`, null)
}

const code = (value: unknown): string => `\`${typeof value === 'string' ? value : JSON.stringify(value)}\``

function numberType(node: Json): string {
  const noun = node.type === 'integer' ? 'integer' : 'number'
  const low = node.exclusiveMinimum !== undefined ? ['>', node.exclusiveMinimum] : node.minimum !== undefined ? ['≥', node.minimum] : null
  // z.number().int() bounds an integer to the safe range, which says nothing to a user.
  const highValue = node.exclusiveMaximum ?? (node.maximum !== undefined && node.maximum < Number.MAX_SAFE_INTEGER ? node.maximum : undefined)
  const high = highValue === undefined ? null : [node.exclusiveMaximum !== undefined ? '<' : '≤', highValue]
  if (low && high && low[0] === '≥' && high[0] === '≤') return `${noun} from ${low[1]} to ${high[1]}`
  if (low && high) return `${noun} ${low[0]} ${low[1]} and ${high[0]} ${high[1]}`
  if (low) return `${noun} ${low[0]} ${low[1]}`
  if (high) return `${noun} ${high[0]} ${high[1]}`
  return noun
}

/** The type of a key as a user reads it. */
function typeOf(node: Json): string {
  const { inner, nullable } = unwrapNull(node)
  const orNull = nullable ? ', or `null`' : ''
  if (inner.enum) return `one of ${inner.enum.map(code).join(', ')}${orNull}`
  if (inner.properties) return `mapping (keys below)${orNull}`
  if (isMap(inner)) return `map from a ${inner.propertyNames?.title ?? 'name'} to a mapping (keys below)${orNull}`
  switch (inner.type) {
    case 'integer':
    case 'number':
      return `${numberType(inner)}${orNull}`
    case 'boolean':
      return `\`true\` or \`false\`${orNull}`
    case 'string':
      return `${(inner.minLength ?? 0) > 0 ? 'non-empty ' : ''}string${orNull}`
    case 'array': {
      const items = inner.items ?? {}
      const each = items.properties ? 'a mapping (keys below)' : items.enum ? typeOf(items) : `a ${typeOf(items)}`
      return `${(inner.minItems ?? 0) > 0 ? 'non-empty ' : ''}list, each ${each}${orNull}`
    }
    default:
      return `${JSON.stringify(inner.type ?? 'any')}${orNull}`
  }
}

/** "10 min" for 600000 ms: what a duration in ms or s amounts to, when it is a round number. */
function duration(path: string, value: unknown): string {
  if (typeof value !== 'number') return ''
  const ms = path.endsWith('Ms') ? value : path.endsWith('Seconds') ? value * 1000 : null
  if (ms === null || ms < (path.endsWith('Ms') ? 1000 : 60_000)) return ''
  for (const [unit, size] of [['h', 3_600_000], ['min', 60_000], ['s', 1000]] as const) {
    if (ms % size === 0) return ` (${ms / size} ${unit})`
  }
  return ` (${ms / 1000} s)`
}

function flow(value: unknown): string {
  return stringify(value, { collectionStyle: 'flow' }).trim()
}

/** A list of mappings is too wide for a table cell: it is shown after the table. */
function isWide(value: unknown): boolean {
  return Array.isArray(value) && value.some((v) => v !== null && typeof v === 'object')
}

function shippedText(key: ConfigKey): string {
  if (key.shipped === null) return '—'
  const { value } = key.shipped
  if (value === undefined) return 'not set'
  if (isWide(value)) return 'listed below'
  return `\`${flow(value)}\`${duration(key.path, value)}`
}

const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\s*\n\s*/g, ' ')

const INTRO = `# Configuration reference

<!-- Generated from the configuration schema and the shipped defaults by \`npm run docs\`: change those, not this page. -->

spindle reads its configuration in layers. Each layer sets only the keys it names, and a later
layer wins key by key:

1. **system**: the defaults shipped with spindle, given in the Default column below.
2. **user**: \`$XDG_CONFIG_HOME/spindle/config.yaml\`, else \`~/.config/spindle/config.yaml\`, for
   everything you run. \`createRuntime({ userConfig })\` names another file, or \`null\` to skip it.
3. **project**: \`config.yaml\` in the data directory (\`.spindle/config.yaml\` for the CLI unless
   \`--dir\` names another directory). Host code adds to it: the \`config\` option of
   \`createRuntime\` is a whole layer over the files, and its \`defaultLimits\`, \`retry\` and
   \`timeouts\` options go over that.
4. **directive**: a directive's own \`limits\`, \`retry\`, \`escalation\` and \`hooks\`, in the front
   matter of a directive file or in the \`directive\` given to \`rt.spawn\`.
5. **call**: the \`limits\`, \`retry\`, \`escalation\` and \`hooks\` of one \`rt.spawn(…)\` call, and its
   \`restart\` and \`childStrategy\` over \`supervision.restart\` and \`supervision.strategy\`.

Only those keys can differ from one thread to the next. Every other section applies to the whole
runtime: set it in a configuration file or in \`createRuntime\`. A few keys add up instead of being
replaced: the \`errors.patterns\` of a later layer are tried before the earlier ones, the \`hooks\` of
every layer apply, and \`recovery.byReason\` and \`governance.byDirective\` merge entry by entry. A
child thread's limits are also capped by its parent's.

In YAML, name the section and the keys to change:

\`\`\`yaml
# .spindle/config.yaml (project) or ~/.config/spindle/config.yaml (user)
limits:
  turns: 100   # the other limits keep the values of the layers under this one
  spend: 2.5
retry:
  maxRetries: 5
orphans:
  heartbeatMs: 5000
\`\`\`

In code, a whole layer goes into \`createRuntime\`, and the keys a thread can have of its own into
a directive or a spawn call:

\`\`\`ts
import { createRuntime, scriptedModel } from 'spindle'

const rt = await createRuntime({
  dir: '.spindle',
  model: scriptedModel([{ text: 'done' }]),
  config: { retry: { maxRetries: 5 }, orphans: { heartbeatMs: 5000 } },
})
await rt.spawn({
  directive: { name: 'research', prompt: 'Find out about X', limits: { turns: 20 } },
  limits: { spend: 1 },
})
\`\`\`

Every layer is checked against the same schema. An unknown key (a typo gets a suggestion), a value
of the wrong type or out of range stops spindle with \`CONFIG_INVALID\` for a configuration file,
\`DIRECTIVE_INVALID\` for a directive file and \`INVALID_OPTIONS\` for options given in code, naming
the file and the key; see [the error catalogue](errors.md).`

function section(name: string, keys: readonly ConfigKey[]): string[] {
  const [head, ...rest] = keys
  const lines = [`## ${name}`, '', head!.description!.trim(), '']
  // A section that is a mapping is only its keys; one that is a list (hooks) is a key of its own.
  if (!head!.type.startsWith('mapping')) lines.push(`Type: ${head!.type}. Default: ${shippedText(head!)}.`, '')
  if (rest.length) {
    lines.push('| Key | Type | Default | Description |', '| --- | --- | --- | --- |')
    for (const key of rest) lines.push(`| \`${key.path}\` | ${cell(key.type)} | ${cell(shippedText(key))} | ${cell(key.description!.trim())} |`)
    lines.push('')
  }
  for (const key of keys) {
    if (!key.shipped || !isWide(key.shipped.value)) continue
    lines.push(`Shipped \`${key.path}\`:`, '', '```yaml', stringify({ [key.path.split('.').pop()!]: key.shipped.value }, { lineWidth: 0 }).trim(), '```', '')
  }
  return lines
}

/**
 * The Markdown of the configuration reference. Throws, naming them, when keys have no description:
 * the page documents every key or is not written.
 */
export function renderConfigReference(schema: z.ZodType, defaults: unknown): string {
  const missing = undocumentedKeys(schema)
  if (missing.length) {
    throw new Error(`These configuration keys have no description: ${missing.join(', ')}. Give each one with .describe() in the schema.`)
  }
  const keys = configKeys(schema, defaults)
  const sections = [...new Set(keys.map((key) => key.path.split(/[.[]/)[0]!))]
  const contents = sections.map((name) => `[${name}](#${name.toLowerCase()})`).join(' · ')
  const lines = [INTRO, '', `Sections: ${contents}.`, '']
  for (const name of sections) lines.push(...section(name, keys.filter((key) => key.path === name || key.path.startsWith(`${name}.`) || key.path.startsWith(`${name}[`))))
  return `${lines.join('\n').trimEnd()}\n`
}
