/**
 * Issue 22, item 11: `--inspect` streamed every snapshot of every thread to a third-party relay
 * and said only that it "needs network access". Sending threads off the machine is now a flag
 * named for it, which says where the data goes before anything is sent; the old flag is refused.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { createRequire } from 'node:module'
import { describe, expect, it } from 'vitest'
import { STATELY_RELAY_HOST, STATELY_SESSION_PAGE } from '../../src/operator/statelyInspector.js'
import { compiled, tempDir } from '../helpers/dirs.js'

/** The CLI with every connection off the machine fenced off and logged to stderr (networkFence.ts). */
function fenced(...args: string[]) {
  const run = spawnSync(process.execPath, ['--import', compiled('test/cli/networkFence.js'), compiled('src/cli.js'), ...args], { encoding: 'utf8', timeout: 50_000 })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

describe('spindle demo and run: the Stately inspector', () => {
  it('should refuse the old --inspect, starting nothing, and name the local inspector and --inspect-stately', () => {
    for (const command of [['demo'], ['run', 'research', '--input', 'topic=tides']]) {
      const dir = tempDir('spindle-inspect-refused')
      const run = fenced(...command, '--dir', dir, '--inspect')
      expect(run.code, run.stderr).toBe(3)
      expect(run.stderr).toContain('--inspect-stately')
      expect(run.stderr).toContain('`spindle inspect`')
      expect(run.stderr).toContain('stately.ai')
      expect(run.stderr).not.toContain('network: connect')
      // No thread was started: the directory holds no registry.
      expect(fs.existsSync(path.join(dir, 'registry.db'))).toBe(false)
    }
  })

  it('should say where every snapshot goes before it tries to send one, then run the thread all the same', () => {
    const dir = tempDir('spindle-inspect-stately')
    const run = fenced('run', 'research', '--input', 'topic=tides', '--dir', dir, '--inspect-stately', '--json')
    expect(run.code, run.stderr).toBe(0)
    const notice = run.stderr.indexOf(`sent over the internet to ${STATELY_RELAY_HOST}`)
    const firstSend = run.stderr.indexOf('network: connect')
    expect(notice).toBeGreaterThanOrEqual(0)
    expect(run.stderr).toContain('prompts, model replies, tool inputs and results')
    // The relay was tried (and fenced off), and only after the notice.
    expect(firstSend).toBeGreaterThan(notice)
    expect(run.stderr).toContain(`network: connect ${STATELY_RELAY_HOST}`)
    expect(JSON.parse(run.stdout)).toMatchObject({ status: 'completed' })
  })

  it('should name the relay and the page the installed @statelyai/inspect really uses', () => {
    const require = createRequire(import.meta.url)
    const library = fs.readFileSync(path.join(path.dirname(require.resolve('@statelyai/inspect')), 'index.mjs'), 'utf8')
    expect(library).toContain(`"${STATELY_RELAY_HOST}"`)
    expect(library).toContain('"https://stately.ai/registry/api/sky"')
    expect(STATELY_SESSION_PAGE).toBe('https://stately.ai/registry/inspect/')
  })
})
