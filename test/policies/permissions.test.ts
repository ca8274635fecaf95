/**
 * Directive permissions: tools declare the capabilities they need, directives grant or deny them,
 * children are capped by their parents, and a refused call never runs the tool.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { ModelRequest } from '../../src/index.js'
import { commandTool, defineTool, scriptedModel } from '../../src/index.js'
import type { TestRuntime } from '../../src/testing.js'
import { loadDirectiveFile, renderDirective } from '../../src/operator/directiveFile.js'
import { capPermissions, deniedCapability, permits } from '../../src/base/permissions.js'
import { tempDir } from '../helpers/dirs.js'
import { inState, until } from '../helpers/threads.js'
import { testRuntimes } from '../helpers/testRuntimes.js'

const runtime = testRuntimes()

function toolResults(rt: TestRuntime, id: string): Array<{ ok: boolean; output: any }> {
  return fs
    .readFileSync(path.join(rt.dir, 'threads', id, 'transcript.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line))
    .filter((e) => e.type === 'TOOL_DONE')
    .map((e) => e.data)
}

/** A network tool that counts its runs: a refused call must leave the count unchanged. */
function fetchTool() {
  const runs: string[] = []
  const tool = defineTool({
    name: 'fetch_page',
    description: 'Fetch a web page',
    input: z.object({ url: z.string() }),
    idempotent: true,
    permissions: ['network'],
    execute: ({ url }) => {
      runs.push(url)
      return `<html>${url}</html>`
    },
  })
  return { tool, runs }
}

const note = defineTool({ name: 'note', description: 'Take a note', input: z.object({}), idempotent: true, execute: () => 'noted' })

describe('permission rules', () => {
  it('should grant what is not named, unless `*` says otherwise', () => {
    expect(permits(undefined, 'network')).toBe(true)
    expect(permits({ network: false }, 'network')).toBe(false)
    expect(permits({ network: false }, 'process')).toBe(true)
    expect(permits({ '*': false, network: true }, 'network')).toBe(true)
    expect(permits({ '*': false, network: true }, 'process')).toBe(false)
    expect(deniedCapability({ '*': false, network: true }, ['network', 'fs.write'])).toBe('fs.write')
    expect(deniedCapability(undefined, ['anything'])).toBeNull()
  })

  it('should cap a child by its parent: granted only where both grant', () => {
    const capped = capPermissions({ network: false }, { '*': false, network: true, process: true })!
    expect(permits(capped, 'network')).toBe(false)
    expect(permits(capped, 'process')).toBe(true)
    expect(permits(capped, 'fs.write')).toBe(false)
    const underDenyAll = capPermissions({ '*': false, network: true }, { process: true })!
    expect(permits(underDenyAll, 'process')).toBe(false)
    expect(permits(underDenyAll, 'network')).toBe(true)
    expect(capPermissions(undefined, { network: false })).toEqual({ network: false })
  })

  it('should refuse a tool declaring a capability that is not a capability name', () => {
    expect(() => defineTool({ name: 't', description: 't', input: z.object({}), permissions: ['Network!'], execute: () => null })).toThrow(/permissions of "t"/)
    expect(commandTool({ name: 'sh', description: 'run', input: z.object({}), command: () => ({ command: 'true', args: [] }) }).permissions).toEqual(['process'])
  })
})

describe('a thread without a permission', () => {
  it('should hide the tools that need it and refuse a call to one without running it', async () => {
    const { tool, runs } = fetchTool()
    const shown: string[][] = []
    const rt = await runtime({
      model: scriptedModel((r) => {
        shown.push(r.tools.map((t) => t.name))
        return r.turn === 1 ? { toolCalls: [{ name: 'fetch_page', input: { url: 'https://example.test' } }, { name: 'note', input: {} }] } : { text: 'done' }
      }),
      tools: [tool, note],
      builtinTools: false,
    })
    const thread = await rt.spawn({ directive: { name: 'offline', prompt: 'p', permissions: { network: false } } })
    expect((await thread.done).status).toBe('completed')
    expect(shown[0]).toEqual(['note'])
    expect(runs).toEqual([])
    const [refused, ran] = toolResults(rt, thread.id)
    expect(refused).toMatchObject({ ok: false, output: { error: 'PERMISSION_DENIED', message: expect.stringContaining('"network"') } })
    expect(ran).toMatchObject({ ok: true, output: 'noted' })
    // Nothing was about to run, so nothing was recorded as about to run.
    const intents = fs.readFileSync(path.join(rt.dir, 'threads', thread.id, 'transcript.jsonl'), 'utf8').split('\n').filter((l) => l.includes('"tool_intent"'))
    expect(intents).toHaveLength(1)
    expect(intents[0]).toContain('"note"')
    expect(rt.checkReplay(thread.id).matches).toBe(true)
  })

  it('should run the tool for a thread whose permissions grant it, and for one that sets none', async () => {
    const { tool, runs } = fetchTool()
    const rt = await runtime({
      model: scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'fetch_page', input: { url: r.threadId } }] } : { text: 'done' })),
      tools: [tool],
      builtinTools: false,
    })
    const granted = await rt.spawn({ directive: { name: 'online', prompt: 'p', permissions: { '*': false, network: true } } })
    const plain = await rt.spawn({ directive: { name: 'plain', prompt: 'p' } })
    await Promise.all([granted.done, plain.done])
    expect(runs.sort()).toEqual([granted.id, plain.id].sort())
  })

  it('should keep its permissions across a restart of the process (they live in state.json)', async () => {
    const { tool, runs } = fetchTool()
    const dir = tempDir('spindle-permissions-restart')
    // The first process stops while the thread waits on its first model call.
    const first = await runtime({ dir, model: scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: { text: 'never' } })), tools: [tool], builtinTools: false })
    const thread = await first.spawn({ directive: { name: 'offline', prompt: 'p', permissions: { network: false } } })
    await until(thread, inState('callingModel'))
    await first.close()
    const state = JSON.parse(fs.readFileSync(path.join(dir, 'threads', thread.id, 'state.json'), 'utf8'))
    expect(JSON.stringify(state)).toContain('"permissions":{"network":false}')

    const second = await runtime({
      dir,
      model: scriptedModel((r: ModelRequest) => (r.turn === 1 ? { toolCalls: [{ name: 'fetch_page', input: { url: 'x' } }] } : { text: 'done' })),
      tools: [tool],
      builtinTools: false,
    })
    expect(second.lastRecovery.resumed).toEqual([thread.id])
    expect((await second.get(thread.id).done).status).toBe('completed')
    expect(runs).toEqual([])
    expect(toolResults(second, thread.id)[0]).toMatchObject({ output: { error: 'PERMISSION_DENIED' } })
  })
})

describe('children and permissions', () => {
  it("should cap a spawn_thread child by its parent's permissions", async () => {
    const { tool, runs } = fetchTool()
    const rt = await runtime({
      model: scriptedModel((r) => {
        if (r.directiveName === 'parent') {
          return r.turn === 1 ? { toolCalls: [{ name: 'spawn_thread', input: { name: 'child', prompt: 'fetch it' } }] } : { text: 'parent done' }
        }
        return r.turn === 1 ? { toolCalls: [{ name: 'fetch_page', input: { url: 'x' } }] } : { text: 'child done' }
      }),
      tools: [tool],
    })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p', permissions: { network: false } } })
    await parent.done
    const child = rt.list().find((r) => r.parentId === parent.id)!
    expect(child).toBeDefined()
    await rt.get(child.id).done.catch(() => {})
    await rt.settle()
    expect(runs).toEqual([])
    expect(toolResults(rt, child.id)[0]).toMatchObject({ output: { error: 'PERMISSION_DENIED' } })
  })

  it('should refuse spawn_thread to a thread without `spawn`, and start no child', async () => {
    const rt = await runtime({
      model: scriptedModel((r) => (r.turn === 1 ? { toolCalls: [{ name: 'spawn_thread', input: { name: 'child', prompt: 'x' } }] } : { text: 'done' })),
    })
    const parent = await rt.spawn({ directive: { name: 'solo', prompt: 'p', permissions: { spawn: false } } })
    expect((await parent.done).status).toBe('completed')
    expect(toolResults(rt, parent.id)[0]).toMatchObject({ output: { error: 'PERMISSION_DENIED', message: expect.stringContaining('"spawn"') } })
    expect(rt.list()).toHaveLength(1)
  })

  it('should cap a child spawned by host code with parentId too', async () => {
    const rt = await runtime({ model: scriptedModel(() => ({ faults: [{ fault: 'hang' }], reply: { text: 'never' } })) })
    const parent = await rt.spawn({ directive: { name: 'parent', prompt: 'p', permissions: { network: false } } })
    const child = await rt.spawn({ directive: { name: 'child', prompt: 'c', permissions: { '*': true, process: false } }, parentId: parent.id })
    await rt.settle()
    const state = JSON.parse(fs.readFileSync(path.join(rt.dir, 'threads', child.id, 'state.json'), 'utf8'))
    const permissions = JSON.stringify(state).match(/"permissions":(\{[^}]*\})/)![1]!
    expect(JSON.parse(permissions)).toEqual({ network: false, '*': true, process: false })
  })
})

describe('declaring permissions', () => {
  it('should refuse a spawn whose permissions are not capability → boolean', async () => {
    const rt = await runtime({ model: scriptedModel([{ text: 'x' }]) })
    await expect(rt.spawn({ directive: { name: 'bad', prompt: 'p', permissions: { network: 'no' as unknown as boolean } } })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      message: expect.stringContaining('permissions.network'),
    })
    await expect(rt.spawn({ directive: { name: 'bad', prompt: 'p', permissions: { 'Net Work': false } } })).rejects.toMatchObject({ code: 'INVALID_OPTIONS' })
    expect(rt.list()).toHaveLength(0)
  })

  it('should carry a directive file\'s permissions to the spawn, and name the file and field when one is invalid', () => {
    const dir = tempDir('spindle-permissions-directive')
    const good = path.join(dir, 'offline.md')
    fs.writeFileSync(good, '---\nname: offline\npermissions: { network: false, "*": true }\n---\nWork offline.\n')
    expect(renderDirective(loadDirectiveFile(good), {}).permissions).toEqual({ network: false, '*': true })
    const bad = path.join(dir, 'bad.md')
    fs.writeFileSync(bad, '---\nname: bad\npermissions: { network: maybe }\n---\nx\n')
    expect(() => loadDirectiveFile(bad)).toThrow(new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: permissions\\.network`))
  })
})
