/**
 * Configuration and directive files a careless or hostile author wrote: each must fail with
 * CONFIG_INVALID / DIRECTIVE_INVALID naming the file and the path inside it, never hang or
 * crash with a stack trace.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { readConfigLayer, systemDefaults } from '../../config/load.js'
import { regexHazard } from '../../config/schema.js'
import { classifyError } from '../../src/policies/classifyError.js'
import { proposeLimit } from '../../src/policies/escalation.js'
import { loadDirectiveFile } from '../../src/operator/directiveFile.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'

function write(dir: string, name: string, text: string): string {
  const file = path.join(dir, name)
  fs.writeFileSync(file, text)
  return file
}

/** Nine levels of nine aliases each: 9^9 (387 million) nodes once expanded. */
function aliasBomb(): string {
  let text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
  let previous = 'a'
  for (const name of 'bcdefghi') {
    text += `${name}: &${name} [${Array.from({ length: 9 }, () => `*${previous}`).join(',')}]\n`
    previous = name
  }
  return text
}

function mkfifo(file: string): void {
  execFileSync('mkfifo', [file])
}

const directive = (frontMatter: string, body = 'Do it.') => `---\n${frontMatter}\n---\n${body}\n`

describe('configuration files: hostile input', () => {
  it('should refuse a YAML alias bomb in the project config.yaml with CONFIG_INVALID naming the file', async () => {
    const dir = tempDir()
    const file = write(dir, 'config.yaml', aliasBomb())
    await expect(createRuntime({ dir, userConfig: null, model: scriptedModel([]) })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(new RegExp(`^${escape(file)}: expands too many aliases`)),
      details: { file },
    })
  })

  it('should refuse a FIFO in place of config.yaml without blocking on it', async () => {
    const dir = tempDir()
    const file = path.join(dir, 'config.yaml')
    mkfifo(file)
    // Nobody writes to the FIFO: a plain read would wait for ever.
    await expect(createRuntime({ dir, userConfig: null, model: scriptedModel([]) })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: `${file}: is a FIFO, socket or device, not a file`,
    })
  })

  it('should refuse a directory, or a symlink to a device, in place of a config file', () => {
    const dir = tempDir()
    const asDir = path.join(dir, 'dir.yaml')
    fs.mkdirSync(asDir)
    expect(() => readConfigLayer(asDir)).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID', message: `${asDir}: is a directory, not a file` }))
    // /dev/null reads as an empty file, which would silently be an empty layer.
    const toDevice = path.join(dir, 'device.yaml')
    fs.symlinkSync('/dev/null', toDevice)
    expect(() => readConfigLayer(toDevice)).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID', message: `${toDevice}: is a FIFO, socket or device, not a file` }))
  })

  it('should follow a symlink to a real file (a dotfiles manager), but report one to a missing file', async () => {
    const dir = tempDir()
    const real = write(tempDir(), 'real.yaml', 'limits:\n  turns: 7\n')
    const user = path.join(dir, 'user.yaml')
    fs.symlinkSync(real, user)
    const rt = await createRuntime({ dir, userConfig: user, model: scriptedModel([]) })
    expect(rt.config.limits.turns).toBe(7)
    await rt.close()
    fs.rmSync(real)
    // Before: silently no user layer at all, so a person's limits quietly stopped applying.
    await expect(createRuntime({ dir, userConfig: user, model: scriptedModel([]) })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: `${user}: is a symbolic link to ${real}, which does not exist`,
    })
  })

  it('should refuse a config file over 1 MiB instead of reading it whole', () => {
    const file = write(tempDir(), 'big.yaml', `${'# padding padding padding padding padding padding\n'.repeat(30_000)}limits:\n  turns: 3\n`)
    expect(() => readConfigLayer(file)).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringMatching(/big\.yaml: is \d+ bytes; a configuration file may have at most 1048576/) }))
  })

  it('should suggest the key a typo meant, naming the file and the full path of the unknown key', () => {
    const dir = tempDir()
    const nested = write(dir, 'nested.yaml', 'retry:\n  maxRetrys: 5\n')
    expect(() => readConfigLayer(nested)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining(`${nested}: retry.maxRetrys: unknown key (did you mean maxRetries?). retry has: maxRetries, baseMs`),
        details: { file: nested, path: 'retry.maxRetrys' },
      }),
    )
    const top = write(dir, 'top.yaml', 'limit:\n  turns: 5\n')
    expect(() => readConfigLayer(top)).toThrow(expect.objectContaining({ message: expect.stringContaining('limit: unknown key (did you mean limits?)'), details: { file: top, path: 'limit' } }))
    const hook = write(dir, 'hook.yaml', 'hooks:\n  - id: h\n    evnt: error\n    event: error\n    action: fail\n')
    expect(() => readConfigLayer(hook)).toThrow(expect.objectContaining({ message: expect.stringContaining('hooks.0.evnt: unknown key (did you mean event?)'), details: { file: hook, path: 'hooks.0.evnt' } }))
  })

  it('should say that the top level must be a mapping, when it is a list or a scalar', () => {
    const dir = tempDir()
    for (const [name, text, got] of [['list.yaml', '- limits\n- retry\n', 'a list'], ['scalar.yaml', 'limits turns 5\n', 'a string']] as const) {
      const file = write(dir, name, text)
      expect(() => readConfigLayer(file)).toThrow(
        expect.objectContaining({ code: 'CONFIG_INVALID', message: `${file}: (top level): must be a mapping of sections (limits:, retry:, hooks: …), not ${got}.` }),
      )
    }
  })

  it('should refuse an error pattern that backtracks exponentially, naming its path', () => {
    const file = write(tempDir(), 'patterns.yaml', 'errors:\n  patterns:\n    - { match: "rate limit", category: rate_limited }\n    - { match: "^(\\\\w+\\\\s?)*$", category: transient }\n')
    expect(() => readConfigLayer(file)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringContaining('errors.patterns.1.match: repeats `\\w+` inside another repetition'), details: expect.objectContaining({ path: 'errors.patterns.1.match' }) }),
    )
  })

  it('should refuse an error pattern with two unbounded gaps that trade the same characters, naming its path', () => {
    // Against "status" and 2000 "=", this pattern took seconds (cubic); a message is tried up to 16 KiB.
    const file = write(tempDir(), 'gaps.yaml', 'errors:\n  patterns:\n    - { match: "rate.{0,80}limit", category: rate_limited }\n    - { match: "status.*=.*=.*failed", category: transient }\n')
    expect(() => readConfigLayer(file)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('errors.patterns.1.match: has two repetitions, `.*` and `.*`, that can both match a long run of'),
        details: expect.objectContaining({ path: 'errors.patterns.1.match' }),
      }),
    )
  })

  it('should accept a single unbounded gap, whose cost the 16 KiB cap on messages bounds', () => {
    const file = write(tempDir(), 'gap.yaml', 'errors:\n  patterns:\n    - { match: "overloaded.*later", category: transient }\n    - { match: "\\\\d+\\\\s*ms", category: transient }\n')
    expect(readConfigLayer(file).errors?.patterns?.map((p) => p.match)).toEqual(['overloaded.*later', '\\d+\\s*ms'])
  })

  it('should ship error patterns whose gaps are bounded, so a long message costs linear time', () => {
    // `quota.*(exceeded|exhausted)` on a 300 KB message of "quota quota …" took 16 s of blocked event loop.
    for (const { match } of systemDefaults().errors.patterns) expect(match).not.toMatch(/\.[*+]/)
    // Loading the defaults skips scslre's analysis of them (trustingShippedPatterns): here they get it.
    for (const { match } of systemDefaults().errors.patterns) expect(regexHazard(match), match).toBeNull()
    const patterns = systemDefaults().errors.patterns
    expect(classifyError(new Error('Your quota for this project has been exceeded'), 0, patterns).failure.category).toBe('quota')
    expect(classifyError(new Error('Invalid API key provided'), 0, patterns).failure.category).toBe('permanent')
    expect(classifyError(new Error('connect ECONN: connection was reset by peer'), 0, patterns).failure.category).toBe('transient')
    expect(classifyError(new Error(`quota ${'quota '.repeat(50_000)}`), 0, patterns).failure.category).toBe('permanent')
  })

  it('should refuse strings for numbers, NaN, Infinity, negative limits, duplicate keys and a null section, naming the path', () => {
    const dir = tempDir()
    const cases: Array<[string, string]> = [
      ['retry:\n  maxRetries: "5"\n', 'retry.maxRetries'],
      ['retry:\n  baseMs: .nan\n', 'retry.baseMs'],
      ['limits:\n  spend: .inf\n', 'limits.spend'],
      ['limits:\n  turns: -1\n', 'limits.turns'],
      ['retry:\n', 'retry'],
    ]
    cases.forEach(([text, at], i) => {
      const file = write(dir, `case${i}.yaml`, text)
      expect(() => readConfigLayer(file), text).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringContaining(`${file}: ${at}: `), details: { file, path: at } }))
    })
    const dup = write(dir, 'dup.yaml', 'limits:\n  turns: 1\nlimits:\n  turns: 2\n')
    expect(() => readConfigLayer(dup)).toThrow(expect.objectContaining({ message: expect.stringMatching(/dup\.yaml: invalid YAML at line 3, column 1: Map keys must be unique/) }))
  })

  it('should read a config file with a BOM and CRLF line ends, and null as unlimited', () => {
    const file = write(tempDir(), 'windows.yaml', '\uFEFFlimits:\r\n  turns: 9\r\n  spend: null\r\n')
    expect(readConfigLayer(file)).toEqual({ limits: { turns: 9, spend: null } })
  })
})

describe('directive files: hostile input', () => {
  it('should read a directive saved with a BOM and CRLF line ends', () => {
    const file = write(tempDir(), 'bom.md', `\uFEFF${directive('name: bom\nlimits: { turns: 3 }').replace(/\n/g, '\r\n')}`)
    expect(loadDirectiveFile(file)).toMatchObject({ frontMatter: { name: 'bom', limits: { turns: 3 } }, body: 'Do it.' })
  })

  it('should refuse an alias bomb in the front matter with DIRECTIVE_INVALID naming the file', () => {
    const file = write(tempDir(), 'bomb.md', directive(`name: bomb\n${aliasBomb()}`))
    expect(() => loadDirectiveFile(file)).toThrow(expect.objectContaining({ code: 'DIRECTIVE_INVALID', message: expect.stringMatching(new RegExp(`^${escape(file)}: the front matter expands too many aliases`)) }))
  })

  it('should refuse a FIFO named like a directive without blocking on it', () => {
    const file = path.join(tempDir(), 'fifo.md')
    mkfifo(file)
    expect(() => loadDirectiveFile(file)).toThrow(expect.objectContaining({ code: 'DIRECTIVE_INVALID', message: `${file}: is a FIFO, socket or device, not a file` }))
  })

  it('should suggest the field a typo in the front matter meant', () => {
    const file = write(tempDir(), 'typo.md', directive('name: typo\nlimts: { turns: 3 }'))
    expect(() => loadDirectiveFile(file)).toThrow(
      expect.objectContaining({ code: 'DIRECTIVE_INVALID', message: expect.stringContaining(`${file}: limts: unknown key (did you mean limits?)`), details: { file, field: 'limts' } }),
    )
  })

  it('should say that front matter must be a mapping when it is a list', () => {
    const file = write(tempDir(), 'list.md', directive('- name\n- limits'))
    expect(() => loadDirectiveFile(file)).toThrow(expect.objectContaining({ code: 'DIRECTIVE_INVALID', message: `${file}: (front matter): must be a mapping (name:, limits: …), not a list` }))
  })
})

describe('escalation: proposals stay finite', () => {
  it('should propose nothing rather than Infinity (written as null, i.e. unlimited) when doubling or adding overflows', () => {
    expect(proposeLimit(1e308, { policy: 'double' })).toBeNull()
    expect(proposeLimit(1.5e308, { policy: 'add', amount: 1e308 })).toBeNull()
    expect(proposeLimit(10, { policy: 'double' })).toBe(20)
  })
})

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')
}
