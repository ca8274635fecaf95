import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { mergeConfig, readConfigLayer, systemDefaults } from '../../config/load.js'
import { createRuntime, scriptedModel } from '../../src/index.js'
import { tempDir } from '../helpers/dirs.js'

function yamlFile(text: string): string {
  const file = path.join(tempDir(), 'config.yaml')
  fs.writeFileSync(file, text)
  return file
}

describe('configuration', () => {
  it('should ship system defaults that satisfy the schema', () => {
    expect(systemDefaults()).toMatchObject({ retry: { maxRetries: 3, baseMs: 2000, capMs: 120000, jitter: 0.2 }, timeouts: { toolMs: 120000 } })
  })

  it('should report invalid YAML with the file, line and column', () => {
    const file = yamlFile('retry:\n  maxRetries: 3\n   baseMs: [\n')
    expect(() => readConfigLayer(file)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringMatching(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: invalid YAML at line \\d+, column \\d+`)) }),
    )
  })

  it('should name the file and the field that has the wrong type', () => {
    const file = yamlFile('retry:\n  maxRetries: many\n')
    expect(() => readConfigLayer(file)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID', details: expect.objectContaining({ file, path: 'retry.maxRetries' }) }),
    )
  })

  it('should refuse a key the schema does not know', () => {
    const file = yamlFile('retry:\n  maxRetrys: 5\n')
    expect(() => readConfigLayer(file)).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringContaining('maxRetrys') }))
  })

  it('should merge layers field by field, later layers winning', () => {
    const merged = mergeConfig(systemDefaults(), { retry: { maxRetries: 5 } }, { limits: { turns: 7 } }, { retry: { baseMs: 10 } })
    expect(merged.retry).toMatchObject({ maxRetries: 5, baseMs: 10, capMs: 120000 })
    expect(merged.limits).toMatchObject({ turns: 7, tokens: null })
  })

  it('should refuse runtime options that break the schema, naming the field', async () => {
    await expect(createRuntime({ dir: tempDir(), model: scriptedModel([]), retry: { jitter: 3 } })).rejects.toMatchObject({
      code: 'INVALID_OPTIONS',
      details: { field: 'retry.jitter' },
    })
  })

  it('should give threads the shipped default limits unless told otherwise', async () => {
    const rt = await createRuntime({ dir: tempDir(), model: scriptedModel([{ text: 'ok' }]) })
    const thread = await rt.spawn({ directive: { name: 'defaults', prompt: 'p' } })
    expect(thread.getSnapshot().limits).toEqual(systemDefaults().limits)
    const own = await rt.spawn({ directive: { name: 'own', prompt: 'p' }, limits: { turns: 3, spend: 1 } })
    expect(own.getSnapshot().limits).toMatchObject({ turns: 3, spend: 1, tokens: null })
    await Promise.all([thread.done, own.done])
    await rt.close()
  })
})
