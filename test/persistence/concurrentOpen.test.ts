/**
 * Several runtime processes opening one fresh data directory at the same moment: each creates the
 * SQLite files' schemas if it finds none, and none may fail because another just did.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { compiled, tempDir } from '../helpers/dirs.js'

function opener(dir: string, go: string): Promise<string> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [compiled('test/persistence/openWorker.js'), dir, go], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (out += d))
    child.on('exit', () => resolve(out.trim()))
  })
}

describe('a fresh data directory opened by several processes at once', () => {
  it('should open in every one of them, in round after round', async () => {
    for (let round = 0; round < 4; round++) {
      const root = tempDir('spindle-concurrent-open')
      const dir = path.join(root, 'data')
      const go = path.join(root, 'go')
      const openers = Array.from({ length: 4 }, () => opener(dir, go))
      // Let every process load and wait for the signal, so they open within a millisecond or two.
      await new Promise((r) => setTimeout(r, 800))
      fs.writeFileSync(go, '')
      expect(await Promise.all(openers)).toEqual(['ok', 'ok', 'ok', 'ok'])
    }
  })
})
