/**
 * Issue 24: budgets and retries as the CLI shows them. A real host process leaves a parent under a
 * spend budget with two children, one retried twice; the compiled CLI reads the directory and
 * prints the same figures `rt.budget` gives.
 */
import { spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'

function spindle(...args: string[]) {
  const run = spawnSync(process.execPath, [compiled('src/cli.js'), ...args], { encoding: 'utf8' })
  return { code: run.status, stdout: run.stdout, stderr: run.stderr }
}

function budgetHost(dir: string): string {
  const run = spawnSync(process.execPath, [compiled('test/cli/hostWorker.js'), dir, 'budget'], { encoding: 'utf8' })
  expect(run.status, run.stderr).toBe(0)
  return run.stdout.trim()
}

describe('spindle show and tree with budgets', () => {
  it('should show a parent budget with its own and its children spend, and what is available', () => {
    const dir = tempDir('spindle-show-budget')
    const lead = budgetHost(dir)
    const show = spindle('show', lead, '--dir', dir)
    expect(show.code, show.stderr).toBe(0)
    expect(show.stdout).toMatch(/^budget {6}spend \$0\.13000 of \$1\.00000 spent \(\$0\.05000 itself\), \$0\.87000 available$/m)
    expect(show.stdout).toMatch(/^ {12}tokens 275 spent \(110 itself\), unlimited$/m)
    expect(show.stdout).not.toMatch(/^retries/m)
  })

  it('should show the retries of a child and its last error category, and that its unused budget went back', () => {
    const dir = tempDir('spindle-show-retries')
    budgetHost(dir)
    const show = spindle('show', 'first', '--dir', dir)
    expect(show.code, show.stderr).toBe(0)
    expect(show.stdout).toMatch(/^retries {5}2, the last model error transient: overloaded$/m)
    expect(show.stdout).toMatch(/^budget {6}spend \$0\.03000 of \$0\.30000 spent, ended: the \$0\.27000 left went back to its parent$/m)
    const json = JSON.parse(spindle('show', 'first', '--dir', dir, '--json').stdout)
    expect(json.budget).toMatchObject({ threadId: 'first', limit: { spend: 0.3, tokens: null }, released: true })
  })

  it('should show each node of the tree with its spend against its budget', () => {
    const dir = tempDir('spindle-tree-budget')
    const lead = budgetHost(dir)
    const tree = spindle('tree', lead, '--dir', dir)
    expect(tree.code, tree.stderr).toBe(0)
    expect(tree.stdout).toMatch(/^lead {2}lead {2}\S*completed\S* {2}\$0\.05000 {2}1 turn {2}budget \$0\.13000 of \$1\.00000$/m)
    expect(tree.stdout).toMatch(/^├─ first {2}retried {2}\S*completed\S* {2}\$0\.03000 {2}1 turn {2}budget \$0\.03000 of \$0\.30000$/m)
    expect(tree.stdout).toMatch(/^└─ second {2}second {2}\S*completed\S* {2}\$0\.05000 {2}1 turn {2}budget \$0\.05000 of \$0\.20000$/m)
    const [top] = JSON.parse(spindle('tree', '--dir', dir, '--json').stdout)
    expect(top.budget.limit).toBe(1)
    expect(top.budget.spent).toBeCloseTo(0.13)
  })
})
