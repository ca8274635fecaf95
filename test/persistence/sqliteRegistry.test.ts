import fs from 'node:fs'
import path from 'node:path'
import Database from 'better-sqlite3'
import { describe, expect, it } from 'vitest'
import { MIGRATIONS, openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import { registryContract } from '../contract/registry.contract.js'
import { tempDir } from '../helpers/dirs.js'

registryContract('sqlite :memory:', () => ({ registry: openSqliteRegistry({ path: ':memory:', durability: 'fsync' }) }))
registryContract('sqlite file', () => {
  const dir = tempDir()
  return { registry: openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' }), destroy: () => fs.rmSync(dir, { recursive: true }) }
})

describe('sqlite registry file', () => {
  for (const [durability, synchronous] of [['fsync', 2], ['process', 1]] as const) {
    it(`should set WAL, synchronous ${synchronous}, foreign keys and the schema version for '${durability}'`, () => {
      const file = path.join(tempDir(), 'registry.db')
      openSqliteRegistry({ path: file, durability }).close()
      const db = new Database(file)
      expect(db.pragma('journal_mode', { simple: true })).toBe('wal')
      expect(db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length)
      db.close()
      // synchronous and foreign_keys are per connection: check them on the registry's own.
      const registry = openSqliteRegistry({ path: file, durability })
      const own = (registry as unknown as { db: Database.Database }).db
      expect(own.pragma('synchronous', { simple: true })).toBe(synchronous)
      expect(own.pragma('foreign_keys', { simple: true })).toBe(1)
      registry.close()
    })
  }

  it('should keep its rows across close and reopen without re-running migrations', () => {
    const file = path.join(tempDir(), 'registry.db')
    const first = openSqliteRegistry({ path: file, durability: 'fsync' })
    first.register({ id: 'keep-aaaaaaaaaaaa', directiveName: 'keep', directive: {}, nonce: 'n', createdAt: 1 })
    first.close()
    const second = openSqliteRegistry({ path: file, durability: 'fsync' })
    expect(second.get('keep-aaaaaaaaaaaa')?.status).toBe('created')
    second.close()
  })

  it('should refuse a file that is not a database, naming it', () => {
    const file = path.join(tempDir(), 'registry.db')
    fs.writeFileSync(file, 'this is not sqlite '.repeat(100))
    expect(() => openSqliteRegistry({ path: file, durability: 'fsync' })).toThrow(
      expect.objectContaining({ code: 'REGISTRY_FAILED', message: expect.stringContaining(file) }),
    )
  })

  it('should return a row whose JSON cell is damaged, with that field null', () => {
    const file = path.join(tempDir(), 'registry.db')
    const registry = openSqliteRegistry({ path: file, durability: 'fsync' })
    registry.register({ id: 'dmg-aaaaaaaaaaaa', directiveName: 'dmg', directive: { a: 1 }, nonce: 'n', createdAt: 1 })
    const db = new Database(file)
    db.prepare("UPDATE threads SET cost = '{broken' WHERE id = ?").run('dmg-aaaaaaaaaaaa')
    db.close()
    expect(registry.list()[0]).toMatchObject({ id: 'dmg-aaaaaaaaaaaa', cost: null, directive: { a: 1 } })
    registry.close()
  })
})
