import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { SPINDLE_ERROR_CODES } from '../../src/base/errors.js'

const ROOT = path.join(import.meta.dirname, '../..')
const CATALOGUE = path.join(ROOT, 'docs/errors.md')
const PARTS = ['What happened', 'Why', 'What to do', 'CLI exit status'] as const

/** Each `## CODE` section of the catalogue: its labelled parts (`**Why:** …`), the unlabelled text in none. */
function entriesOf(markdown: string): Array<{ code: string; parts: Map<string, string> }> {
  return markdown
    .split(/^## /m)
    .slice(1)
    .map((section) => {
      const [heading = '', ...body] = section.split('\n')
      const parts = new Map<string, string>()
      let current: string | null = null
      for (const paragraph of body.join('\n').split(/\n\s*\n/)) {
        const labelled = /^\*\*([^*]+):\*\*\s*([\s\S]*)$/.exec(paragraph.trim())
        if (labelled) {
          current = labelled[1]!
          parts.set(current, `${parts.get(current) ?? ''} ${labelled[2]!}`.trim())
        } else if (current !== null && paragraph.trim()) {
          parts.set(current, `${parts.get(current)!} ${paragraph.trim()}`)
        }
      }
      return { code: heading.trim(), parts }
    })
}

/** The CLI's code → exit status map, read from its source (the CLI runs on import). */
function cliExitStatuses(): Map<string, number> {
  const source = fs.readFileSync(path.join(ROOT, 'src/cli.ts'), 'utf8')
  const block = /const EXIT\b[^=]*=\s*\{([^}]*)\}/.exec(source)
  if (!block) throw new Error('src/cli.ts no longer has `const EXIT = { CODE: status, … }`: read the exit statuses from where they went.')
  return new Map([...block[1]!.matchAll(/\b([A-Z_]+):\s*(\d+)/g)].map((m) => [m[1]!, Number(m[2])]))
}

/** What is wrong with a catalogue, one line per problem; [] when nothing is. */
function catalogueProblems(markdown: string, codes: readonly string[], exits: ReadonlyMap<string, number>): string[] {
  const problems: string[] = []
  const entries = entriesOf(markdown)
  const seen = new Set<string>()
  for (const { code, parts } of entries) {
    if (!codes.includes(code)) problems.push(`## ${code}: names no code of SPINDLE_ERROR_CODES`)
    if (seen.has(code)) problems.push(`## ${code}: appears twice`)
    seen.add(code)
    for (const part of PARTS) {
      const text = parts.get(part)?.trim() ?? ''
      if (text === '') problems.push(`## ${code}: has no "**${part}:**" part`)
      else if (part !== 'CLI exit status' && text.length < 20) problems.push(`## ${code}: "${part}" says too little (${JSON.stringify(text)})`)
    }
    for (const label of parts.keys()) {
      if (!(PARTS as readonly string[]).includes(label)) problems.push(`## ${code}: has a part "${label}", not one of ${PARTS.join(', ')}`)
    }
    const status = parts.get('CLI exit status')?.trim()
    if (status) {
      const stated = /^(\d+)\b/.exec(status)?.[1]
      const mapped = exits.get(code)
      if (mapped !== undefined && stated !== String(mapped)) problems.push(`## ${code}: the CLI exits ${mapped}, the entry says ${JSON.stringify(status.slice(0, 40))}`)
      if (mapped === undefined && stated !== undefined && stated !== '1') problems.push(`## ${code}: the CLI has no status for it (it exits 1), the entry says ${stated}`)
      if (mapped === undefined && stated === undefined && !status.startsWith('None')) problems.push(`## ${code}: the exit status must start with a number or "None"`)
    }
    // Written for users: no source files, no design documents.
    const text = [...parts.values()].join(' ')
    const internal = /\b(?:src|config|persistence|actors|machines|test)\/[\w/.-]+\.ts\b|\bdesign \d{3}\b/i.exec(text)
    if (internal) problems.push(`## ${code}: names ${internal[0]}, which users do not have`)
  }
  for (const code of codes) if (!seen.has(code)) problems.push(`${code}: has no entry`)
  return problems
}

const entry = (code: string, parts: Partial<Record<(typeof PARTS)[number] | string, string>>): string =>
  [`## ${code}`, '', ...Object.entries(parts).flatMap(([label, text]) => [`**${label}:** ${text}`, ''])].join('\n')
const WHOLE = { 'What happened': 'Something went wrong here.', Why: 'Because of a cause worth naming.', 'What to do': 'Do the thing that fixes it.', 'CLI exit status': '3.' }

describe('error catalogue (docs/errors.md)', () => {
  const markdown = fs.readFileSync(CATALOGUE, 'utf8')
  const exits = cliExitStatuses()

  it('should read the exit statuses the CLI maps codes to', () => {
    expect(exits.size).toBeGreaterThan(10)
    expect([...exits.keys()].filter((code) => !(SPINDLE_ERROR_CODES as readonly string[]).includes(code))).toEqual([])
  })

  it('should have a whole entry for every code, name only codes that exist and state the CLI exit status', () => {
    expect(catalogueProblems(markdown, SPINDLE_ERROR_CODES, exits)).toEqual([])
  })

  it('should report a code that has no entry', () => {
    expect(catalogueProblems(entry('A', WHOLE), ['A', 'B'], new Map([['A', 3]]))).toEqual(['B: has no entry'])
  })

  it('should report an entry that names no code', () => {
    expect(catalogueProblems(entry('A', WHOLE) + entry('GONE', WHOLE), ['A'], new Map([['A', 3], ['GONE', 3]]))).toEqual([
      '## GONE: names no code of SPINDLE_ERROR_CODES',
    ])
  })

  it('should report an entry that lacks a part', () => {
    const { Why: _dropped, ...rest } = WHOLE
    expect(catalogueProblems(entry('A', rest), ['A'], new Map([['A', 3]]))).toEqual(['## A: has no "**Why:**" part'])
  })

  it('should report an exit status other than the one the CLI gives', () => {
    expect(catalogueProblems(entry('A', { ...WHOLE, 'CLI exit status': '5.' }), ['A'], new Map([['A', 3]]))).toEqual([
      '## A: the CLI exits 3, the entry says "5."',
    ])
    expect(catalogueProblems(entry('A', { ...WHOLE, 'CLI exit status': '4.' }), ['A'], new Map())).toEqual([
      '## A: the CLI has no status for it (it exits 1), the entry says 4',
    ])
  })

  it('should report an entry that names a source file', () => {
    const problems = catalogueProblems(entry('A', { ...WHOLE, Why: 'It is thrown in src/runtime.ts when it fails.' }), ['A'], new Map([['A', 3]]))
    expect(problems).toEqual(['## A: names src/runtime.ts, which users do not have'])
  })
})
