/**
 * The package as a user gets it. A copy of the working tree is packed with `npm pack` (its prepack
 * and prepare build the library alone, as an install from git does), the tarball is installed into
 * a fresh project, and there: `npx spindle demo`, a host program importing the three entry points
 * by name, and a TypeScript host checked against the shipped declarations.
 */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/dirs.js'
import type { OpenAIServer } from '../helpers/openaiServer.js'
import { startOpenAIServer } from '../helpers/openaiServer.js'

const ROOT = path.resolve(import.meta.dirname, '../..')
/** What `files` may bring into the tarball; anything else is a leak (a test, a TypeScript source). */
const SHIPPED = /^(package\.json|README\.md|LICENSE|docs\/[^/]+\.md|visualizations\/[^/]+\.(svg|md)|config\/[^/]+\.yaml|config\/directives\/[^/]+\.md|dist\/(src|machines|actors|persistence|config)\/.+\.(js|d\.ts|js\.map))$/

interface Ran {
  code: number | null
  stdout: string
  stderr: string
}

/** Runs a command to its end without blocking the event loop (the loopback model server lives in it). */
function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = childEnv()): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d))
    child.stderr.on('data', (d: Buffer) => (stderr += d))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

function ranOk(what: string, ran: Ran, hint = ''): Ran {
  if (ran.code !== 0) throw new Error(`${what} exited with ${ran.code}.${hint ? ` ${hint}` : ''}\n--- stdout\n${ran.stdout.slice(-4000)}\n--- stderr\n${ran.stderr.slice(-4000)}`)
  return ran
}

/**
 * The environment without what `npm test` hands its children about this repository (its package,
 * its prefix, the running script): an npm run inside the fresh project must see that project only.
 */
function childEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env }
  for (const key of Object.keys(env)) {
    if (/^npm_(package_|lifecycle_|command$|config_local_prefix$)/i.test(key) || key === 'INIT_CWD') delete env[key]
  }
  return env
}

/** The working tree as git sees it (tracked and new files, nothing ignored): what a clone holds. */
function copyWorkingTree(into: string): void {
  const listed = spawnSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, encoding: 'utf8' })
  if (listed.status !== 0) throw new Error(`git ls-files failed in ${ROOT}: this test packs a copy of the git working tree.\n${listed.stderr}`)
  for (const file of listed.stdout.split('\0')) {
    // node_modules is untracked in a worktree where it is a symlink; deleted files are still listed.
    if (file === '' || file === 'node_modules' || !fs.existsSync(path.join(ROOT, file))) continue
    fs.mkdirSync(path.dirname(path.join(into, file)), { recursive: true })
    fs.cpSync(path.join(ROOT, file), path.join(into, file), { verbatimSymlinks: true })
  }
  // The build needs the repository's typescript and @types, as a clone gets them from `npm install`.
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(into, 'node_modules'))
}

function npmCache(): string {
  const cache = ranOkSync('npm config get cache', spawnSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8', env: childEnv() })).trim()
  if (!fs.existsSync(path.join(cache, '_cacache'))) {
    throw new Error(
      `No npm cache at ${cache}/_cacache. This test installs the packed spindle and its dependencies from the npm cache ` +
        '(npm install --prefer-offline): run `npm ci` in the repository first (CI does), then run this test again.',
    )
  }
  return cache
}

function ranOkSync(what: string, ran: ReturnType<typeof spawnSync>): string {
  if (ran.status !== 0) throw new Error(`${what} exited with ${ran.status}: ${String(ran.stderr)}`)
  return String(ran.stdout)
}

/** The version the repository's lockfile pins, so the fresh project gets the one the cache holds. */
function lockedVersion(name: string): string {
  const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version?: string }> }
  const version = lock.packages[`node_modules/${name}`]?.version
  if (!version) throw new Error(`${name} is not in package-lock.json`)
  return version
}

/** Relative specifiers a compiled module imports (static and dynamic). */
function relativeImports(source: string): string[] {
  return [...source.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)'(\.{1,2}\/[^']+)'/g)].map((m) => m[1]!)
}

let work: string
let app: string
let files: string[]
let manifest: { bin: Record<string, string>; main: string; types: string; exports: Record<string, Record<string, string>> }
let server: OpenAIServer

// Installing compiles better-sqlite3 from source wherever no prebuilt binary can be fetched (this
// machine has no network but the npm registry): 1–3 minutes on 2 busy cores, plus ~30 s to pack.
const INSTALL_TIMEOUT_MS = 15 * 60_000
const RUN_TIMEOUT_MS = 3 * 60_000

beforeAll(async () => {
  npmCache()
  work = tempDir('spindle-package')
  const tree = path.join(work, 'tree')
  copyWorkingTree(tree)
  // A developer's tree as `npm test` leaves it: compiled tests, and the output of a module since
  // removed. Neither may reach the tarball (`files`; prepack's clean).
  for (const stale of ['dist/test/cli/demo.test.js', 'dist/src/removedModule.js']) {
    fs.mkdirSync(path.dirname(path.join(tree, stale)), { recursive: true })
    fs.writeFileSync(path.join(tree, stale), 'export {}\n')
  }
  const packed = ranOk('npm pack', await run('npm', ['pack', '--json', '--pack-destination', work], tree))
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }]
  const tarball = path.join(work, filename)
  const listing = ranOk('tar -tzf', await run('tar', ['-tzf', tarball], work))
  files = listing.stdout.split('\n').filter((line) => line !== '' && !line.endsWith('/')).map((line) => line.replace(/^package\//, ''))
  manifest = JSON.parse(ranOk('tar -xOzf', await run('tar', ['-xOzf', tarball, 'package/package.json'], work)).stdout) as typeof manifest

  // Named so, the fresh project is not "spindle": npm refuses to install a package into its namesake.
  app = path.join(work, 'host-app')
  fs.mkdirSync(app)
  ranOk('npm init -y', await run('npm', ['init', '-y'], app))
  ranOk('npm pkg set type=module', await run('npm', ['pkg', 'set', 'type=module'], app))
  ranOk(
    'npm install of the packed spindle',
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball, `@ai-sdk/openai@${lockedVersion('@ai-sdk/openai')}`], app),
    'Dependencies come from the npm cache (run `npm ci` in the repository first); better-sqlite3 compiles from source ' +
      'when no prebuilt binary can be fetched, which needs python3, make and a C++ compiler.',
  )
  server = await startOpenAIServer()
}, INSTALL_TIMEOUT_MS)

afterAll(async () => {
  await server?.close()
  if (work) fs.rmSync(work, { recursive: true, force: true })
})

describe('the npm package', () => {
  it('should ship no compiled test and only what the package is made of', () => {
    expect(files.filter((file) => file.startsWith('dist/test/'))).toEqual([])
    expect(files.filter((file) => !SHIPPED.test(file))).toEqual([])
    expect(files).not.toContain('dist/src/removedModule.js')
  })

  it('should ship every file its manifest names, and the shipped configuration', () => {
    const named = [manifest.main, manifest.types, ...Object.values(manifest.bin), ...Object.values(manifest.exports).flatMap((e) => Object.values(e))]
    expect(named.length).toBeGreaterThan(8)
    for (const file of named) expect(files, file).toContain(path.posix.normalize(file))
    expect(files).toEqual(expect.arrayContaining(['config/defaults.yaml', 'config/directives/research.md', 'README.md', 'docs/api.md', 'visualizations/thread.machine.svg']))
  })

  it('should ship every module a shipped module imports, with its declarations', () => {
    const modules = files.filter((file) => file.endsWith('.js'))
    expect(modules.length).toBeGreaterThan(50)
    for (const file of modules) {
      expect(files, `${file}'s declarations`).toContain(file.replace(/\.js$/, '.d.ts'))
      const source = fs.readFileSync(path.join(app, 'node_modules/spindle', file), 'utf8')
      for (const specifier of relativeImports(source)) {
        expect(files, `${file} imports ${specifier}`).toContain(path.posix.join(path.posix.dirname(file), specifier))
      }
    }
  })

  it(
    'should run `npx spindle demo` in the fresh project to the end of its six threads',
    async () => {
      const demo = ranOk('npx spindle demo', await run('npx', ['--no', 'spindle', 'demo'], app))
      const out = demo.stdout
      const dir = path.join(fs.realpathSync(app), '.spindle')
      expect(out).toContain(`Starting 6 threads in ${dir} (durability: fsync).`)
      const done = out.slice(out.indexOf('\nDone:\n'))
      for (const topic of ['tides', 'glaciers', 'monsoons']) {
        expect(done).toMatch(new RegExp(`^  demo-${topic}-\\S+ +completed +turns 6 +\\$\\d+\\.\\d{5} +Five facts about ${topic}, checked and noted\\.$`, 'm'))
      }
      // Aurora stops at a call that needs approval, volcanoes at a question to a person.
      expect(done).toMatch(/^  demo-aurora-\S+ +suspended +turns 4 +\$\d+\.\d{5} +suspended \(tool_approval\)$/m)
      expect(done).toMatch(/^  demo-volcanoes-\S+ +suspended +turns 3 +\$\d+\.\d{5} +suspended \(waiting\)$/m)
      // The coral thread's tight turn limit suspends it for a person to approve.
      const coral = done.match(/^  (demo-coral-\S+) +suspended +turns 3 +\$\d+\.\d{5} +suspended \(limit\)$/m)?.[1]
      expect(coral).toBeDefined()
      expect(done).toContain(`${coral} waits for a person at its limit: spindle approve ${coral} --dir ${dir}, then run the demo again.`)
      const summaries = out.match(/^threads: .*$/gm) ?? []
      expect(summaries.at(-1)).toMatch(/^threads: 3 suspended, 3 completed; \$0\.\d{5} spent$/)
      expect(Number(done.match(/^Checkpoints written: (\d+) in \d+ group commits?\. Data: /m)?.[1])).toBeGreaterThan(0)
    },
    RUN_TIMEOUT_MS,
  )

  it(
    'should let a host program import spindle, spindle/testing and spindle/ai-sdk by name and run threads with each',
    async () => {
      server.push({ kind: 'text', text: 'Tides follow the moon.' })
      fs.copyFileSync(path.join(import.meta.dirname, 'host.mjs'), path.join(app, 'host.mjs'))
      const host = ranOk('node host.mjs', await run(process.execPath, ['host.mjs'], app, { ...childEnv(), MODEL_URL: `${server.url}/v1` }))
      const report = JSON.parse(host.stdout) as Record<string, any>

      // spindle: the directive shipped in the package, found by name.
      expect(report.directiveFile).toBe(path.join(app, 'node_modules/spindle/config/directives/research.md'))
      // spindle/ai-sdk: the thread ran on the loopback server through the real OpenAI provider.
      expect(report.aiSdk).toMatchObject({ status: 'completed', result: 'Tides follow the moon.', turns: 1 })
      expect(server.requests).toHaveLength(1)
      expect(JSON.stringify(server.requests[0]!.body)).toContain('Find out about tides. Go 2 levels deep')
      expect(report.listed).toEqual([{ id: report.aiSdk.threadId, status: 'completed' }])
      expect(report.unknownThread).toBe('THREAD_NOT_FOUND')
      // spindle/testing: simulated time and the replay check.
      expect(report.retryInMs).toBe(30_000)
      expect(report.testing).toEqual({ status: 'completed', result: 'after the wait', replays: true })
    },
    RUN_TIMEOUT_MS,
  )

  it(
    'should type-check a TypeScript host against the declarations of the three entry points',
    async () => {
      fs.writeFileSync(
        path.join(app, 'typed.ts'),
        [
          "import { createRuntime, scriptedModel } from 'spindle'",
          "import type { ModelAdapter, SpindleErrorCode, ThreadHandle } from 'spindle'",
          "import { aiSdkModel } from 'spindle/ai-sdk'",
          "import type { AiSdkModelOptions } from 'spindle/ai-sdk'",
          "import { createTestRuntime } from 'spindle/testing'",
          "import type { TestRuntime } from 'spindle/testing'",
          '',
          "const model: ModelAdapter = scriptedModel([{ text: 'hi' }])",
          "export const code: SpindleErrorCode = 'THREAD_NOT_FOUND'",
          'export async function run(): Promise<ThreadHandle> {',
          '  const rt: TestRuntime = await createTestRuntime({ model })',
          "  return rt.spawn({ directive: { name: 'typed', prompt: 'p' } })",
          '}',
          "export const pricing: AiSdkModelOptions['pricing'] = { inputPerMillion: 1, outputPerMillion: 2 }",
          'export const adapter = aiSdkModel',
          // Types that are really there, not `any`: a wrong option is an error tsc must report.
          '// @ts-expect-error dir is a string',
          'export const wrong = () => createRuntime({ dir: 1, model })',
          '',
        ].join('\n'),
      )
      // Declarations are checked too (no skipLibCheck): a type that stripInternal removed from under a
      // shipped one shows only so. @ai-sdk/provider's import 'json-schema', which has no types and
      // does not depend on @types/json-schema: a stand-in, as any user who checks libraries needs.
      fs.writeFileSync(
        path.join(app, 'json-schema.d.ts'),
        "declare module 'json-schema' {\n  export type JSONSchema7 = any\n  export type JSONSchema7Definition = any\n}\n",
      )
      fs.writeFileSync(
        path.join(app, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            target: 'ES2022',
            module: 'NodeNext',
            moduleResolution: 'NodeNext',
            strict: true,
            noEmit: true,
            types: ['node'],
            typeRoots: [path.join(ROOT, 'node_modules/@types')],
          },
          files: ['typed.ts', 'json-schema.d.ts'],
        }),
      )
      ranOk('tsc in the fresh project', await run(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], app))
    },
    RUN_TIMEOUT_MS,
  )
})
