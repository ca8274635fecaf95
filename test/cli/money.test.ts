/**
 * Issue 22: one amount reads the same in `spindle ls`, `tree`, `show` and the approval message,
 * to a thousandth of a cent — a small model's turn no longer reads $0.0000 (or $0.0001 in one
 * place and $0.00011 in the next). A real host leaves a thread at its limit; the compiled CLI reads it.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { formatUsd } from '../../src/base/money.js'
import { pendingApprovals } from '../../src/thread/requests.js'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

describe('money in the CLI', () => {
  it('should print a thread’s spend the same way in ls, tree, show and its approval message', () => {
    const dir = tempDir('spindle-money')
    const host = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, 'limit'], { encoding: 'utf8' })
    expect(host.status, host.stderr).toBe(0)
    const id = host.stdout.trim()
    const [row] = JSON.parse(spindle('ls', '--dir', dir, '--json').stdout)
    const spend = formatUsd(row.cost.spend)
    // Two turns of the scripted model cost about a hundredth of a cent: four decimals hid a digit.
    expect(spend).toMatch(/^\$0\.000\d[1-9]$/)
    expect(spindle('ls', '--dir', dir).stdout).toContain(`  ${spend}  `)
    expect(spindle('tree', '--dir', dir).stdout).toContain(`  ${spend}  `)
    expect(spindle('show', id, '--dir', dir).stdout).toMatch(new RegExp(`^usage +2 turns, \\d+\\+\\d+ tokens, \\${spend}$`, 'm'))
    expect(pendingApprovals(dir, id)[0]!.message).toContain(`Spend so far: ${spend}\n`)
  })
})
