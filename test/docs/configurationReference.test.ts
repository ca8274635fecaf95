import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { systemDefaults } from '../../config/load.js'
import { configKeys, renderConfigReference, undocumentedKeys } from '../../config/reference.js'
import { ConfigSchema } from '../../config/schema.js'

const PAGE = path.join(import.meta.dirname, '../../docs/configuration-reference.md')

/** Every key path of a plain value: `retry.maxRetries`, … (lists and maps are leaves). */
function valuePaths(value: unknown, prefix = ''): string[] {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return [prefix]
  const entries = Object.entries(value)
  if (entries.length === 0) return [prefix]
  return entries.flatMap(([key, child]) => [...(prefix ? [prefix] : []), ...valuePaths(child, prefix ? `${prefix}.${key}` : key)])
}

describe('configuration reference', () => {
  it('should be what the generator renders from the schema and the shipped defaults', () => {
    const rendered = renderConfigReference(ConfigSchema, systemDefaults())
    const committed = fs.existsSync(PAGE) ? fs.readFileSync(PAGE, 'utf8') : null
    if (committed === null) expect.fail('docs/configuration-reference.md is missing: run `npm run docs` and commit it.')
    // Not toEqual: a diff of two whole pages hides the one thing to do.
    if (committed !== rendered) {
      const [was, now] = [committed.split('\n'), rendered.split('\n')]
      const line = was.findIndex((text, i) => text !== now[i])
      const at = line === -1 ? was.length : line
      expect.fail(
        'docs/configuration-reference.md differs from what config/schema.ts and config/defaults.yaml render: run `npm run docs` and commit the result. ' +
          `First difference, line ${at + 1}:\n  page:     ${was[at] ?? '(end)'}\n  rendered: ${now[at] ?? '(end)'}`,
      )
    }
  })

  it('should find a description in the schema for every key', () => {
    expect(undocumentedKeys(ConfigSchema), 'keys without .describe() in config/schema.ts (or config/hookSchema.ts)').toEqual([])
  })

  it('should give a row to every key the shipped defaults set', () => {
    const page = renderConfigReference(ConfigSchema, systemDefaults())
    const paths = [...new Set(valuePaths(systemDefaults()))]
    expect(paths.length).toBeGreaterThan(50)
    expect(paths.filter((key) => !page.includes(`| \`${key}\` |`) && !page.includes(`## ${key}\n`))).toEqual([])
  })

  it('should give each key its shipped default', () => {
    const keys = new Map(configKeys(ConfigSchema, systemDefaults()).map((key) => [key.path, key]))
    expect(keys.get('retry.maxRetries')?.shipped).toEqual({ value: systemDefaults().retry.maxRetries })
    expect(keys.get('orphans.heartbeatMs')?.shipped).toEqual({ value: null })
    expect(keys.get('recovery.byReason.<code>.chain')?.shipped).toBeNull()
  })

  it('should name a key without a description and refuse to render the page', () => {
    const schema = z.strictObject({
      section: z.strictObject({ told: z.number().describe('Said.'), untold: z.boolean() }).describe('A section.'),
      list: z.array(z.strictObject({ inner: z.string() })).describe('A list.'),
    })
    expect(undocumentedKeys(schema)).toEqual(['section.untold', 'list[].inner'])
    expect(() => renderConfigReference(schema, { section: { told: 1, untold: true }, list: [] })).toThrow(/section\.untold, list\[\]\.inner/)
  })

  it('should render types with their ranges, enums and null', () => {
    const keys = new Map(configKeys(ConfigSchema, systemDefaults()).map((key) => [key.path, key.type]))
    expect(keys.get('retry.maxRetries')).toBe('integer ≥ 0')
    expect(keys.get('retry.jitter')).toBe('number from 0 to 1')
    expect(keys.get('context.pressureRatio')).toBe('number > 0 and ≤ 1')
    expect(keys.get('orphans.heartbeatMs')).toBe('integer > 0, or `null`')
    expect(keys.get('supervision.restart')).toBe('one of `permanent`, `transient`, `temporary`')
    expect(keys.get('escalation.turns.amount')).toBe('number > 0, optional')
  })
})
