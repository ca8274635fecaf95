/**
 * spindle's import rules, stated once: which floor each source folder is, and which floors each
 * may import. Imports go down; results come back up through ports wired in the composition root
 * (src/runtime/createRuntime.ts). `checkImports` reads every import of the source tree with the
 * TypeScript parser (type-only imports count: a type is a dependency too) and lists what breaks a
 * rule, and every import circle.
 */
import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'

/** The floors, bottom first. A file belongs to the first floor whose folder holds it. */
export const FLOORS = [
  { floor: 'base', folder: 'src/base', says: 'the ground floor: errors, ids, the clock, process liveness, capabilities' },
  { floor: 'machines', folder: 'machines', says: 'pure statecharts: no I/O, no configuration' },
  { floor: 'persistence', folder: 'persistence', says: 'stores behind interfaces, one implementation per backend' },
  { floor: 'actors', folder: 'actors', says: 'effects: model and tool calls, adapters' },
  { floor: 'config', folder: 'config', says: 'the configuration schema, its defaults and their loader' },
  { floor: 'policies', folder: 'src/policies', says: 'pure decisions: error classes, escalation, hooks, recovery, governance' },
  { floor: 'thread', folder: 'src/thread', says: "one thread: its live host, replay, conversation, waits, request protocol" },
  { floor: 'runtime', folder: 'src/runtime', says: "the runtime's parts and their composition root" },
  { floor: 'operator', folder: 'src/operator', says: 'what people run: CLI commands, inspector, demo, doctor' },
  { floor: 'entry', folder: 'src', says: 'the public entries: spindle, spindle/testing, spindle/ai-sdk, the CLI' },
] as const

export type Floor = (typeof FLOORS)[number]['floor']

/** Which floors each floor may import (itself included). */
export const MAY_IMPORT: Record<Floor, readonly Floor[]> = {
  base: ['base'],
  machines: ['machines', 'base'],
  persistence: ['persistence', 'base', 'machines'],
  actors: ['actors', 'base', 'machines'],
  config: ['config', 'base', 'machines', 'persistence'],
  policies: ['policies', 'base', 'machines', 'config'],
  thread: ['thread', 'base', 'machines', 'persistence', 'actors', 'config', 'policies'],
  runtime: ['runtime', 'base', 'machines', 'persistence', 'actors', 'config', 'policies', 'thread'],
  operator: ['operator', 'base', 'machines', 'persistence', 'actors', 'config', 'policies', 'thread', 'runtime'],
  entry: ['entry', 'base', 'machines', 'persistence', 'actors', 'config', 'policies', 'thread', 'runtime', 'operator'],
}

/** npm packages a floor may import, where it is restricted: pure statecharts know only XState. */
export const PACKAGES_ALLOWED: Partial<Record<Floor, readonly string[]>> = {
  machines: ['xstate'],
  base: ['zod', 'nanoid'],
}

export const SOURCE_FOLDERS = ['src', 'machines', 'actors', 'persistence', 'config'] as const

export function floorOf(file: string): Floor | null {
  for (const { floor, folder } of FLOORS) {
    if (floor === 'entry') {
      if (path.dirname(file) === folder) return floor
    } else if (file === folder || file.startsWith(`${folder}/`)) return floor
  }
  return null
}

export interface Import {
  from: string
  /** The module as written. */
  specifier: string
  /** The repository file it names, for a relative import; null for a package. */
  to: string | null
  typeOnly: boolean
}

/** Every import and re-export of a file, read by the TypeScript parser (so strings that look like imports are not). */
export function importsOf(file: string, text: string): Import[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS)
  const found: Import[] = []
  const add = (specifier: string, typeOnly: boolean): void => {
    const to = specifier.startsWith('.') ? path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier)).replace(/\.js$/, '.ts') : null
    found.push({ from: file, specifier, to, typeOnly })
  }
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node.moduleSpecifier.text, node.importClause?.isTypeOnly ?? false)
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node.moduleSpecifier.text, node.isTypeOnly)
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteral(node.arguments[0])) {
      add(node.arguments[0].text, false)
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      add(node.argument.literal.text, true)
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return found
}

/** The package an import names (`@scope/name` or `name`), without subpaths; node: built-ins are null. */
function packageOf(specifier: string): string | null {
  if (specifier.startsWith('node:')) return null
  const parts = specifier.split('/')
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!
}

/** What breaks the rules in `files` (path → text, paths relative to the repository root, with /). */
export function checkImports(files: ReadonlyMap<string, string>): string[] {
  const problems: string[] = []
  const graph = new Map<string, string[]>()
  for (const [file, text] of files) {
    const floor = floorOf(file)
    if (floor === null) {
      problems.push(`${file} is in no floor: put it in one of ${FLOORS.map((f) => f.folder).join(', ')}, or add a floor to test/architecture/importRules.ts`)
      continue
    }
    const edges: string[] = []
    for (const found of importsOf(file, text)) {
      if (found.to === null) {
        const allowed = PACKAGES_ALLOWED[floor]
        const name = packageOf(found.specifier)
        if (allowed && name !== null && !allowed.includes(name)) {
          problems.push(`${file} imports the package ${found.specifier}, but ${floor} may import only ${allowed.join(', ')} of npm packages`)
        }
        continue
      }
      if (!files.has(found.to)) {
        problems.push(`${file} imports ${found.specifier}, which is no source file (${found.to})`)
        continue
      }
      edges.push(found.to)
      const target = floorOf(found.to)
      if (target === null) continue
      if (!MAY_IMPORT[floor].includes(target)) {
        problems.push(`${file} (${floor}) imports ${found.to} (${target}): ${floor} may import only ${MAY_IMPORT[floor].join(', ')}`)
      }
    }
    graph.set(file, edges)
  }
  for (const circle of circlesOf(graph)) problems.push(`import circle: ${[...circle, circle[0]].join(' -> ')}`)
  return problems
}

/** Every strongly connected group of more than one file (or a file importing itself), each as one path round it. */
export function circlesOf(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  // Tarjan's algorithm: one pass, each group once.
  let index = 0
  const indexOf = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const circles: string[][] = []
  const connect = (node: string): void => {
    indexOf.set(node, index)
    low.set(node, index)
    index++
    stack.push(node)
    onStack.add(node)
    for (const next of graph.get(node) ?? []) {
      if (!indexOf.has(next)) {
        connect(next)
        low.set(node, Math.min(low.get(node)!, low.get(next)!))
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, indexOf.get(next)!))
    }
    if (low.get(node) === indexOf.get(node)) {
      const group: string[] = []
      let member: string
      do {
        member = stack.pop()!
        onStack.delete(member)
        group.push(member)
      } while (member !== node)
      if (group.length > 1 || (graph.get(node) ?? []).includes(node)) circles.push(group.reverse())
    }
  }
  for (const node of graph.keys()) if (!indexOf.has(node)) connect(node)
  return circles
}

/** The repository's source files, by path relative to `root`. */
export function sourceFiles(root: string): Map<string, string> {
  const files = new Map<string, string>()
  const walk = (dir: string): void => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = `${dir}/${entry.name}`
      if (entry.isDirectory()) walk(rel)
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) files.set(rel, fs.readFileSync(path.join(root, rel), 'utf8'))
    }
  }
  for (const folder of SOURCE_FOLDERS) walk(folder)
  return files
}
