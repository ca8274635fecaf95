/**
 * The architecture, checked: every source file sits on a floor, imports only the floors below it
 * (test/architecture/importRules.ts states which), and no import circle exists. A change that
 * breaks a rule fails here, naming the import and the rule. So does a source file grown past 600
 * lines: one part, one job.
 */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { checkImports, circlesOf, floorOf, sourceFiles } from './importRules.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

describe('the import rules', () => {
  it('should hold for every source file of the repository', () => {
    const files = sourceFiles(root)
    expect(files.size).toBeGreaterThan(100)
    expect(checkImports(files)).toEqual([])
  })

  it("should build the runtime's parts in its composition root alone, so their ports are wired in one place", () => {
    const files = sourceFiles(root)
    const runtime = [...files].filter(([file]) => floorOf(file) === 'runtime')
    // StoredThread is a handle host code is given, not a part.
    const parts = runtime.flatMap(([, text]) => [...text.matchAll(/^export class (\w+)/gm)].map((m) => m[1]!)).filter((name) => name !== 'StoredThread')
    expect(parts).toEqual(expect.arrayContaining(['ThreadTable', 'Leases', 'Budgets', 'Parking', 'Supervisor', 'Waiting', 'Decisions', 'Recovery']))
    const builtElsewhere = [...files].flatMap(([file, text]) =>
      file === 'src/runtime/createRuntime.ts' ? [] : parts.filter((part) => new RegExp(`new ${part}\\(`).test(text)).map((part) => `${file} builds ${part}`),
    )
    expect(builtElsewhere).toEqual([])
  })

  it('should keep every source file under 600 lines, and the composition root under 400', () => {
    const lines = (text: string) => text.split('\n').length - (text.endsWith('\n') ? 1 : 0)
    const tooLong = [...sourceFiles(root)].filter(([, text]) => lines(text) > 600).map(([file, text]) => `${file}: ${lines(text)} lines`)
    expect(tooLong).toEqual([])
    expect(lines(sourceFiles(root).get('src/runtime/createRuntime.ts')!)).toBeLessThan(400)
  })

  describe('what it catches', () => {
    const sample = (files: Record<string, string>) => checkImports(new Map(Object.entries(files)))

    it('should refuse persistence importing the CLI', () => {
      expect(
        sample({
          'persistence/journal.ts': "import { pidAlive } from '../src/operator/locks.js'\n",
          'src/operator/locks.ts': 'export const pidAlive = () => true\n',
        }),
      ).toEqual(['persistence/journal.ts (persistence) imports src/operator/locks.ts (operator): persistence may import only persistence, base, machines'])
    })

    it('should refuse machines importing configuration, even for a type', () => {
      expect(
        sample({
          'machines/thread.machine.ts': "import type { Config } from '../config/schema.js'\n",
          'config/schema.ts': 'export type Config = {}\n',
        }),
      ).toEqual(['machines/thread.machine.ts (machines) imports config/schema.ts (config): machines may import only machines, base'])
    })

    it('should refuse a package a pure statechart may not use', () => {
      expect(sample({ 'machines/m.ts': "import fs from 'node:fs'\nimport { nanoid } from 'nanoid'\n" })).toEqual([
        'machines/m.ts imports the package nanoid, but machines may import only xstate of npm packages',
      ])
    })

    it('should name every circle, type-only imports included', () => {
      expect(
        sample({
          'actors/deadline.ts': "import type { Clock } from './threadEffects.js'\n",
          'actors/threadEffects.ts': "import { atDeadline } from './deadline.js'\n",
        }),
      ).toEqual(['import circle: actors/deadline.ts -> actors/threadEffects.ts -> actors/deadline.ts'])
    })

    it('should not take an import-shaped line inside a string for an import', () => {
      expect(sample({ 'persistence/prefetch.ts': "const worker = `import fs from '../src/operator/cli.js'`\n" })).toEqual([])
    })

    it('should refuse a file on no floor', () => {
      expect(sample({ 'scripts/x.ts': '' })).toEqual([expect.stringContaining('scripts/x.ts is in no floor')])
    })

    it('should find a circle of three and leave a chain alone', () => {
      expect(circlesOf(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]))).toEqual([['a', 'b', 'c']])
    })
  })
})
