/**
 * visualizations/ is generated from machines/: the checked-in diagrams must match the code.
 * Mermaid renders them in vizMermaid.test.ts, xstate builds the Stately source in
 * vizStately.test.ts, and statechartSvg.test.ts checks where the SVG's labels sit.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { svgVisualizations, visualizations, writeVisualizations } from '../../src/operator/visualize.js'
import { compiled, tempDir } from '../helpers/dirs.js'

const checkedIn = path.resolve(import.meta.dirname, '../../visualizations')

describe('visualizations', () => {
  it('should be up to date with machines/ (run `spindle viz` after changing a machine)', async () => {
    expect(await writeVisualizations(checkedIn, { check: true })).toEqual([])
  })

  it('should draw each state of the thread machine as an SVG group a page can highlight, inside its parent', async () => {
    const svg = (await svgVisualizations())['thread.machine.svg']!
    for (const state of ['created', 'running', 'running.checkingLimits', 'running.callingModel', 'running.runningTools', 'running.waitingToRetry', 'running.limitReached', 'cancelling', 'suspended', 'completed', 'error', 'cancelled', 'continued']) {
      expect(svg).toContain(`data-state="${state}"`)
    }
    // callingModel is drawn inside the running box.
    const box = (state: string) => {
      const m = new RegExp(`data-state="${state.replace('.', '\\.')}"><rect x="([\\d.]+)" y="([\\d.]+)" width="([\\d.]+)" height="([\\d.]+)"`).exec(svg)!
      const [x, y, w, h] = m.slice(1).map(Number) as [number, number, number, number]
      return { x, y, w, h }
    }
    const outer = box('running')
    const inner = box('running.callingModel')
    expect(inner.x).toBeGreaterThan(outer.x)
    expect(inner.y).toBeGreaterThan(outer.y)
    expect(inner.x + inner.w).toBeLessThan(outer.x + outer.w)
    expect(inner.y + inner.h).toBeLessThan(outer.y + outer.h)
    expect(svg).toContain('MODEL_REPLIED')
    expect(svg).toContain('class="state final"')
  })

  it('should draw every state, eventless decision and guard of the thread machine', () => {
    const text = visualizations()['thread.machine.mmd']!
    for (const state of ['created', 'checkingLimits', 'suspended', 'completed', 'error', 'cancelled', 'continued']) {
      expect(text).toContain(`"${state}"`)
    }
    // The machine invokes nothing: the effect the runtime runs in a state is named beside it.
    for (const [state, effect] of [['callingModel', 'callModel'], ['runningTools', 'runTool'], ['limitReached', 'decideLimit'], ['waitingToRetry', 'waitUntil'], ['cancelling', 'settleChildren']]) {
      expect(text).toContain(`"${state} (runs ${effect})"`)
    }
    expect(text).toContain('always [limitExceeded]')
    expect(text).toContain('LIMIT_DECIDED [limitRaisedEnough] / raiseLimits')
    expect(text).toContain('MODEL_FAILED [errorHookRetries] / scheduleRetry')
    expect(text).toContain('MODEL_FAILED [isCurrentFailure && canRetry] / scheduleRetry')
  })

  it('should make `spindle viz --check` fail on a stale diagram and `spindle viz` repair it', () => {
    const out = tempDir()
    fs.writeFileSync(path.join(out, 'thread.machine.mmd'), 'stateDiagram-v2\n  [*] --> old\n')
    const cli = compiled('src/cli.js')
    expect(() => execFileSync(process.execPath, [cli, 'viz', '--out', out, '--check'], { stdio: 'pipe' })).toThrow()
    execFileSync(process.execPath, [cli, 'viz', '--out', out])
    execFileSync(process.execPath, [cli, 'viz', '--out', out, '--check'])
    expect(fs.readFileSync(path.join(out, 'thread.machine.mmd'), 'utf8')).toBe(visualizations()['thread.machine.mmd'])
  })

  it('should make the --out directory when it does not exist yet', () => {
    const out = path.join(tempDir(), 'new', 'diagrams')
    execFileSync(process.execPath, [compiled('src/cli.js'), 'viz', '--out', out], { stdio: 'pipe' })
    expect(fs.readFileSync(path.join(out, 'thread.machine.mmd'), 'utf8')).toBe(visualizations()['thread.machine.mmd'])
  })
})
