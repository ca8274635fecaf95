/**
 * Issue 22: the CLI as a script drives it. `--version` says which spindle it is; with `--json` a
 * failure is JSON on stderr with its code and the same exit status as in text; a data directory
 * that is not there is DATA_DIR_NOT_FOUND in every command (it was THREAD_NOT_FOUND, as if a
 * thread were missing), and nothing is created; counts of one read as one.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

const ID = 'ghost-aaaaaaaaaaaa'

describe('spindle --version', () => {
  it("should print the version of spindle's package.json", () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string }
    const run = spindle('--version')
    expect(run.code).toBe(0)
    expect(run.stdout).toBe(`${version}\n`)
  })
})

describe('errors with --json', () => {
  let dir: string
  beforeAll(async () => {
    dir = tempDir('spindle-json-errors')
    const rt = await createRuntime({ dir, model: scriptedModel([{ text: 'one' }]) })
    await (await rt.spawn({ directive: { name: 'one', prompt: 'p' } })).done
    await rt.close()
  })

  it('should write a spindle error as JSON on stderr with its code, exiting as it does in text', () => {
    const text = spindle('show', ID, '--dir', dir)
    const json = spindle('show', ID, '--dir', dir, '--json')
    expect(json.code).toBe(4)
    expect(json.code).toBe(text.code)
    expect(json.stdout).toBe('')
    expect(JSON.parse(json.stderr)).toEqual({ error: { code: 'THREAD_NOT_FOUND', message: expect.stringContaining(ID) } })
  })

  it('should write a usage error as JSON with the code USAGE and exit 2, printing no help', () => {
    const json = spindle('ls', '--dir', dir, '--frobnicate', '--json')
    expect(json.code).toBe(2)
    expect(JSON.parse(json.stderr)).toEqual({ error: { code: 'USAGE', message: "unknown option '--frobnicate'" } })
  })

  it('should say "1 turn" and "1 thread", not "1 turns"', () => {
    const [row] = JSON.parse(spindle('ls', '--dir', dir, '--json').stdout) as Array<{ id: string }>
    expect(spindle('show', row!.id, '--dir', dir).stdout).toMatch(/^usage +1 turn, /m)
    expect(spindle('tree', '--dir', dir).stdout).toMatch(/ 1 turn$/m)
    expect(spindle('doctor', '--dir', dir).stdout).toMatch(/^1 thread checked: no damage\.$/m)
  })
})

describe('a data directory that is not there', () => {
  const commands: string[][] = [
    ['ls'],
    ['show', ID],
    ['logs', ID],
    ['tree'],
    ['cancel', ID],
    ['approve', ID],
    ['deny', ID],
    ['resume', ID],
    ['doctor'],
    ['rebuild', ID],
    ['rebuild', ID, '--compact'],
    ['orphans'],
    ['orphans', 'recover', ID, '--action', 'mark_error'],
    ['orphans', 'auto'],
    ['locks'],
    ['inspect'],
  ]

  it('should be DATA_DIR_NOT_FOUND, exit 4, in every command, and create nothing', () => {
    const missing = path.join(tempDir('spindle-no-dir'), 'not-here')
    for (const command of commands) {
      const run = spindle(...command, '--dir', missing)
      expect(run.stderr, command.join(' ')).toContain('[DATA_DIR_NOT_FOUND]')
      expect(run.stderr, command.join(' ')).toContain(`${missing} does not exist`)
      expect(run.code, command.join(' ')).toBe(4)
      expect(fs.existsSync(missing), command.join(' ')).toBe(false)
    }
  })

  it('should be DATA_DIR_NOT_FOUND for a directory that holds no spindle data, as JSON with --json', () => {
    const empty = tempDir('spindle-empty-dir')
    for (const command of [['ls'], ['show', ID], ['cancel', ID], ['locks']]) {
      const run = spindle(...command, '--dir', empty, '--json')
      expect(run.code, command.join(' ')).toBe(4)
      expect(JSON.parse(run.stderr), command.join(' ')).toEqual({ error: { code: 'DATA_DIR_NOT_FOUND', message: expect.stringContaining('holds no spindle data') } })
    }
    expect(fs.readdirSync(empty)).toEqual([])
  })
})
