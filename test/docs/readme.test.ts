/**
 * The README and docs/ say what is true: the README stays a ten-minute read, every relative link
 * lands on a file (and heading) that exists, every TypeScript block type-checks against the built
 * package under the repository's strict settings, and the README's host program, run with node,
 * prints what the README says and closes the runtime on SIGTERM. Needs dist/ (`npx tsc -p tsconfig.json`).
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { afterAll, describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'
import { brokenLinks, codeBlocks } from './markdown.js'
import type { CodeBlock } from './markdown.js'

const root = path.resolve(import.meta.dirname, '../..')
const readme = path.join(root, 'README.md')
const docsDir = path.join(root, 'docs')
const docPages = (): string[] => fs.readdirSync(docsDir).filter((f) => f.endsWith('.md')).sort().map((f) => path.join(docsDir, f))
const markdownFiles = (): string[] => [readme, ...docPages()]
const rel = (file: string): string => path.relative(root, file)

/** Pages the README map and other pages link to that other authors write: this test fails until they land. */
const WRITTEN_ELSEWHERE = ['docs/errors.md', 'docs/architecture.md', 'docs/configuration-reference.md']

/** `<!-- fragment -->` before a TypeScript block: a piece of a program, not type-checked. */
const FRAGMENT = 'fragment'

const TYPESCRIPT = new Set(['ts', 'typescript'])

function onlyBlock(blocks: CodeBlock[], marker: string): CodeBlock {
  const marked = blocks.filter((b) => b.marker === marker)
  if (marked.length !== 1) throw new Error(`README.md should have exactly one block marked <!-- ${marker} --> (found ${marked.length})`)
  return marked[0]!
}

/** Folders this file made; removed at the end (rm does not follow their links into the repository). */
const made: string[] = []
afterAll(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true })
})

/**
 * A folder outside the repository where a user's program would live: `spindle` installed (a link
 * to this repository, resolved through its package.json exports like an installed copy) beside
 * spindle's own dependencies, and `"type": "module"`.
 */
function userProject(): string {
  const dir = tempDir('spindle-docs-project')
  made.push(dir)
  const modules = path.join(dir, 'node_modules')
  fs.mkdirSync(modules)
  for (const name of fs.readdirSync(path.join(root, 'node_modules'))) {
    if (name.startsWith('.')) continue
    fs.symlinkSync(path.join(root, 'node_modules', name), path.join(modules, name))
  }
  fs.symlinkSync(root, path.join(modules, 'spindle'))
  fs.writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n')
  return dir
}

/** The repository's compiler options, with spindle's entry points mapped to the built package. */
function strictOptions(): ts.CompilerOptions {
  const parsed = ts.getParsedCommandLineOfConfigFile(path.join(root, 'tsconfig.json'), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'))
    },
  })!
  const { rootDir: _rootDir, outDir: _outDir, declaration: _declaration, sourceMap: _sourceMap, ...options } = parsed.options
  return {
    ...options,
    noEmit: true,
    typeRoots: [path.join(root, 'node_modules/@types')],
    paths: {
      spindle: [compiled('src/index.d.ts')],
      'spindle/testing': [compiled('src/testing.d.ts')],
      'spindle/ai-sdk': [compiled('src/aiSdk.d.ts')],
    },
  }
}

/** Type errors of every TypeScript block that is not a fragment, each named by its Markdown file and line. */
function typeErrors(files: string[]): string[] {
  const project = userProject()
  const origin = new Map<string, string>()
  for (const file of files) {
    for (const block of codeBlocks(fs.readFileSync(file, 'utf8'))) {
      if (!TYPESCRIPT.has(block.lang) || block.marker === FRAGMENT) continue
      const name = path.join(project, `${rel(file).replace(/[/.]/g, '_')}_L${block.line}.ts`)
      // `export {}` keeps blocks without imports modules of their own, not one shared script scope.
      fs.writeFileSync(name, `${block.code}export {}\n`)
      origin.set(name, `${rel(file)}, the block at line ${block.line}`)
    }
  }
  const program = ts.createProgram([...origin.keys()], strictOptions())
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const where = d.file ? (origin.get(d.file.fileName) ?? d.file.fileName) : '(program)'
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0
    return `${where}, its line ${line}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`
  })
}

/** The README's host program as a user would run it: stripped of its types, in a project of its own. */
function hostProgram(): { file: string; expected: string } {
  const blocks = codeBlocks(fs.readFileSync(readme, 'utf8'))
  const project = userProject()
  const file = path.join(project, 'host.mjs')
  const { outputText } = ts.transpileModule(onlyBlock(blocks, 'host-program').code, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  })
  fs.writeFileSync(file, outputText)
  return { file, expected: onlyBlock(blocks, 'host-program-output').code }
}

function spindleCli(dir: string, ...args: string[]): unknown {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args, '--dir', dir, '--json'], { encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`spindle ${args.join(' ')} exited ${run.status}: ${run.stderr}`)
  return JSON.parse(run.stdout)
}

function runToEnd(file: string, cwd: string): { code: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, [file], { cwd, encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

describe('README.md', () => {
  it('should stay under 25 KB', () => {
    expect(fs.statSync(readme).size).toBeLessThan(25 * 1024)
  })

  it('should run its host program with node and print what it says the program prints', () => {
    const { file, expected } = hostProgram()
    const cwd = tempDir('spindle-docs-host')
    made.push(cwd)
    const run = runToEnd(file, cwd)
    expect(run.code, run.stderr).toBe(0)
    expect(run.stdout).toBe(expected)
  })

  it('should close the runtime and exit 0 when its host program gets SIGTERM, and carry the same thread on when run again', async () => {
    const { file, expected } = hostProgram()
    const cwd = tempDir('spindle-docs-sigterm')
    made.push(cwd)
    const dir = path.join(cwd, '.spindle')
    const child = spawn(process.execPath, [file], { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d))
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
    // Signalled once (a second signal would find the program's handler gone and kill it), while
    // the thread waits out its rate limit half way through its work.
    let signalled = false
    child.stdout.on('data', (d: Buffer) => {
      stdout += d
      if (!signalled && stdout.includes('"waitingToRetry"}')) {
        signalled = true
        child.kill('SIGTERM')
      }
    })
    const exit = await exited
    expect(exit, stderr).toEqual({ code: 0, signal: null })
    expect(stdout).toMatch(/^SIGTERM: closing; /m)
    expect(stdout).not.toMatch(/^done: /m)

    // Closed, not crashed: the thread is checkpointed mid-run and its lease was given back.
    expect(spindleCli(dir, 'ls')).toEqual([expect.objectContaining({ status: 'running' })])
    expect(spindleCli(dir, 'locks')).toMatchObject({ locks: [] })

    const again = runToEnd(file, cwd)
    expect(again.code, again.stderr).toBe(0)
    expect(again.stdout).not.toMatch(/^created/m)
    expect(again.stdout.trimEnd().split('\n').at(-1)).toBe(expected.trimEnd().split('\n').at(-1))
    expect(spindleCli(dir, 'ls')).toEqual([expect.objectContaining({ status: 'completed' })])
  })
})

describe('the documentation', () => {
  it('should point every relative link of README.md and docs/ at a file and heading that exist, apart from pages written elsewhere', () => {
    const broken = markdownFiles()
      .flatMap(brokenLinks)
      .filter((b) => !(b.why === 'no such file' && WRITTEN_ELSEWHERE.includes(rel(b.resolved))))
    expect(broken.map((b) => `${rel(b.file)}:${b.line} → ${b.target}: ${b.why}`)).toEqual([])
  })

  it('should find the pages written elsewhere that README.md and docs/ link to', () => {
    const missing = WRITTEN_ELSEWHERE.filter((page) => !fs.existsSync(path.join(root, page)))
    expect(missing, 'written by other tasks; this fails until they land').toEqual([])
  })

  it('should type-check every TypeScript block of README.md and docs/ that is not marked a fragment, against the built package', () => {
    expect(typeErrors(markdownFiles())).toEqual([])
  })
})
