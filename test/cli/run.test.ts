/**
 * Directive files and `spindle run`: found by name across project, user and system directories,
 * validated with errors naming the file and the field, run as real child processes.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { findDirective, loadDirectiveFile, renderDirective } from '../../src/operator/directiveFile.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(env: Record<string, string>, ...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8', env: { ...process.env, ...env } })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function write(file: string, text: string): string {
  fs.mkdirSync(path.dirname(file), { recursive: true })
  fs.writeFileSync(file, text)
  return file
}

const noUser = { XDG_CONFIG_HOME: '/nonexistent/spindle-test-config' }

describe('directive files', () => {
  it('should run a directive file end to end, filling its inputs, and report the outcome as JSON', () => {
    const dir = tempDir('spindle-run')
    const file = write(
      path.join(dir, 'directives', 'summarise.md'),
      '---\nname: summarise\nlimits: { turns: 3 }\ninput:\n  doc: { description: the document }\n---\nSummarise {{doc}} in one line.\n',
    )
    const run = spindle(noUser, 'run', 'summarise', '--input', 'doc=README.md', '--dir', dir, '--json')
    expect(run.code, run.stderr).toBe(0)
    const outcome = JSON.parse(run.stdout)
    expect(outcome).toMatchObject({ status: 'completed', directive: file, result: expect.stringContaining('Summarise README.md in one line.') })
    expect(JSON.parse(spindle(noUser, 'ls', '--dir', dir, '--json').stdout)).toEqual([expect.objectContaining({ id: outcome.threadId, directiveName: 'summarise', status: 'completed' })])
  })

  it('should find a directive in the project before the user and the system directory', () => {
    const dir = tempDir('spindle-run-layers')
    const home = tempDir('spindle-home')
    write(path.join(home, 'spindle', 'directives', 'research.md'), '---\nname: research\n---\nthe user one\n')
    expect(findDirective('research', dir).file).toContain(path.join('config', 'directives', 'research.md'))
    const byUser = spindle({ XDG_CONFIG_HOME: home }, 'run', 'research', '--dir', dir, '--json')
    expect(JSON.parse(byUser.stdout).result).toContain('the user one')
    write(path.join(dir, 'directives', 'research.md'), '---\nname: research\n---\nthe project one\n')
    expect(JSON.parse(spindle({ XDG_CONFIG_HOME: home }, 'run', 'research', '--dir', dir, '--json').stdout).result).toContain('the project one')
  })

  it('should fail on an invalid directive naming the file and the field', () => {
    const dir = tempDir('spindle-run-invalid')
    const bad = write(path.join(dir, 'bad.md'), '---\nname: bad\nlimits: { turns: -1 }\n---\nprompt\n')
    const run = spindle(noUser, 'run', bad, '--dir', dir)
    expect(run.code).toBe(3)
    expect(run.stderr).toContain(`${bad}: limits.turns:`)
    expect(run.stderr).toContain('DIRECTIVE_INVALID')
    const undeclared = write(path.join(dir, 'undeclared.md'), '---\nname: u\n---\nUse {{thing}}\n')
    expect(() => loadDirectiveFile(undeclared)).toThrow(/input\.thing: the prompt uses \{\{thing\}\}, which is not declared under input/)
    const yamlError = write(path.join(dir, 'yaml.md'), '---\nname: [unclosed\n---\np\n')
    expect(() => loadDirectiveFile(yamlError)).toThrow(/invalid YAML in the front matter at line/)
    const missing = spindle(noUser, 'run', 'nothing-here', '--dir', dir)
    expect(missing.code).toBe(4)
    expect(missing.stderr).toContain(path.join(dir, 'directives', 'nothing-here.md'))
  })

  it('should refuse an input the directive does not declare, or of the wrong type', () => {
    const dir = tempDir('spindle-run-inputs')
    const file = write(path.join(dir, 'n.md'), '---\nname: n\ninput:\n  count: { type: number }\n---\nCount to {{count}}.\n')
    const directive = loadDirectiveFile(file)
    expect(renderDirective(directive, { count: '3' }).prompt).toBe('Count to 3.')
    expect(() => renderDirective(directive, { count: 'three' })).toThrow(/input\.count: input "count" must be a number/)
    expect(() => renderDirective(directive, { count: '3', extra: 'x' })).toThrow(/unknown input "extra"/)
  })
})
