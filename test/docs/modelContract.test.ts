/**
 * Issue 22: a person writing an adapter from the docs alone met `ModelRequest.directiveName`
 * nowhere, and read nowhere that a reply without tool calls ends the thread. Every field of
 * ModelRequest now has its TSDoc in actors/model.ts and its row in docs/models-and-tools.md, and
 * both pages that explain a thread's states say what a reply without tool calls does.
 */
import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const root = path.resolve(import.meta.dirname, '../..')
const read = (file: string): string => fs.readFileSync(path.join(root, file), 'utf8')

/** Each member of `interface name` in a TypeScript file, with its TSDoc ('' when it has none). */
function membersOf(file: string, name: string): Array<{ member: string; doc: string }> {
  const source = ts.createSourceFile(file, read(file), ts.ScriptTarget.Latest, true)
  const found = source.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === name)
  if (!found) throw new Error(`${file} declares no interface ${name}`)
  return found.members.map((m) => ({
    member: m.name!.getText(source),
    doc: ts.getJSDocCommentsAndTags(m).map((d) => d.getText(source)).join('\n'),
  }))
}

describe('the model adapter contract in the docs', () => {
  const fields = membersOf('actors/model.ts', 'ModelRequest')

  it('should document every field of ModelRequest in its TSDoc', () => {
    expect(fields.length).toBeGreaterThan(5)
    expect(fields.filter((f) => f.doc.trim() === '').map((f) => f.member)).toEqual([])
  })

  it('should document every field of ModelRequest in docs/models-and-tools.md', () => {
    const page = read('docs/models-and-tools.md')
    expect(fields.filter((f) => !page.includes(`\n| \`${f.member}\` | `)).map((f) => f.member)).toEqual([])
  })

  it('should say that a reply without tool calls ends the thread and becomes its result', () => {
    expect(read('docs/models-and-tools.md')).toMatch(/A reply without tool calls ends the thread\*\*: it completes, and the reply's `text` becomes its\s+`result`/)
    expect(read('README.md')).toMatch(/a reply without tool calls ends the thread, and its text becomes the thread's `result`/)
  })
})
