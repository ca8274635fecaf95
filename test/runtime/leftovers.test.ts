/**
 * Leftovers of killed processes that no kill in this test can make (issue 22, item 8), planted
 * exactly as they are left: files of a process on another host sharing the directory, of a boot
 * before this one, and of older versions (whose names give a pid but no host).
 * (test/crash/leftovers.test.ts kills real processes for the rest.)
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { writerMark } from '../../src/base/processes.js'
import type { Runtime } from '../../src/index.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { doctor } from '../../src/operator/operator.js'
import { tempDir } from '../helpers/dirs.js'

const model = scriptedModel([{ text: 'done' }])
const open: Runtime[] = []
afterEach(async () => {
  while (open.length) await open.pop()!.close()
})

/** The pid of a process that ran and is gone. */
function deadPid(): number {
  const run = spawnSync(process.execPath, ['-e', ''])
  return run.pid!
}

/** This process's mark with its parts replaced: `[pid, start, host key, boot key]`. */
function markWith(parts: Partial<Record<0 | 1 | 2 | 3, string>>): string {
  const mine = writerMark().split('-')
  return [0, 1, 2, 3].map((i) => parts[i as 0] ?? mine[i]).join('-')
}

describe('leftovers whose writer cannot be told from this host', () => {
  it("should leave another host's and older versions' files alone, remove a file of an earlier boot, and doctor should name what it leaves", async () => {
    const dir = tempDir('spindle-leftovers-planted')
    const rt = await createRuntime({ dir, model, userConfig: null })
    const thread = await rt.spawn({ directive: { name: 'done', prompt: 'p' } })
    await thread.done
    await rt.close()
    const gone = deadPid()
    const tmp = path.join(dir, 'tmp')
    fs.mkdirSync(tmp, { recursive: true })
    const plant = (file: string, text = ''): string => (fs.writeFileSync(file, text), file)
    // A sibling container (same boot, another host name): its pid means nothing here.
    const otherHost = markWith({ 0: String(gone), 2: '00000000' })
    const siblingTemp = plant(path.join(tmp, `state.json.tmp-${otherHost}-1-0a1b2c3d`), '{}')
    const siblingClaim = plant(path.join(tmp, `${thread.id}.cancel.requested.claimed-${otherHost}-a1b2c3`), '{"nonce":"n"}')
    // Older versions named the pid only: an empty journal, a probe, and in the thread's folder a claimed cancel and a temp file.
    const oldJournal = plant(path.join(dir, 'journal', `${gone}-AbCdEfGhIj.000001.journal`))
    const oldProbe = plant(path.join(dir, 'journal', `.birth-probe-${gone}-Ab_dEf`))
    const oldClaim = plant(path.join(dir, 'threads', thread.id, `cancel.requested.${gone}.claimed`), '{"nonce":"n"}')
    const oldTemp = plant(path.join(dir, 'threads', thread.id, `state.json.tmp-${gone}-3-0a1b2c3d`), '{}')
    // A boot before this one: its writer is gone, whoever has its pid now (this very process).
    const otherBoot = writerMark().split('-')[3] === 'ffffffff' ? 'eeeeeeee' : 'ffffffff'
    const earlierBoot = plant(path.join(tmp, `escalation.request.json.tmp-${markWith({ 3: otherBoot })}-1-0a1b2c3d`), '{}')

    const before = doctor(dir).findings.filter((f) => f.code === 'LEFTOVER_FILE')
    const unjudged = [siblingTemp, siblingClaim, oldJournal, oldProbe, oldClaim, oldTemp]
    for (const file of unjudged) {
      expect(before, file).toContainEqual(expect.objectContaining({ kind: 'stray', message: expect.stringContaining(`${file} is `) }))
      const found = before.find((f) => f.message.startsWith(`${file} is `))!
      expect(found.message).toContain(`(pid ${gone})`)
      expect(found.message).toContain('cannot be told from this host')
      expect(found.repair).toContain(`Once no process ${gone} runs on any host that shares this directory`)
    }
    expect(before.find((f) => f.message.startsWith(`${oldClaim} is `))!.repair).toContain(`rename it to ${path.join(dir, 'threads', thread.id, 'cancel.requested')}`)
    expect(before.find((f) => f.message.startsWith(`${earlierBoot} is `))).toMatchObject({ repair: expect.stringContaining('Opening a runtime on this directory removes it') })

    const next = await createRuntime({ dir, model, userConfig: null })
    open.push(next)
    await next.checkRequests({ sweep: true })

    for (const file of unjudged) expect(fs.existsSync(file), file).toBe(true)
    expect(fs.existsSync(earlierBoot)).toBe(false)
  })

  it('should leave a file in tmp/ whose name gives no thread id alone, and doctor should not choke on it', async () => {
    const dir = tempDir('spindle-leftovers-planted')
    await (await createRuntime({ dir, model, userConfig: null })).close()
    fs.mkdirSync(path.join(dir, 'tmp'), { recursive: true })
    // Upper case: no thread has such an id, so the file is none of spindle's.
    const planted = path.join(dir, 'tmp', `Not-A-Thread.cancel.requested.claimed-${markWith({ 0: String(deadPid()), 2: '00000000' })}-a1b2c3`)
    fs.writeFileSync(planted, '{"nonce":"n"}')

    expect(doctor(dir).findings.filter((f) => f.code === 'LEFTOVER_FILE')).toEqual([])
    const next = await createRuntime({ dir, model, userConfig: null })
    open.push(next)
    await next.checkRequests({ sweep: true })
    expect(fs.existsSync(planted)).toBe(true)
  })
})
