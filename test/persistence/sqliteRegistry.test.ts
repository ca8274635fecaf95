import fs from 'node:fs'
import path from 'node:path'
import Database from 'better-sqlite3'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { MIGRATIONS, openSqliteRegistry } from '../../persistence/sqliteRegistry.js'
import type { Registry } from '../../persistence/types.js'
import { registryContract } from '../contract/registry.contract.js'
import { tempDir } from '../helpers/dirs.js'

registryContract('sqlite :memory:', () => ({ registry: openSqliteRegistry({ path: ':memory:', durability: 'fsync' }) }))
registryContract('sqlite file', () => {
  const dir = tempDir()
  return {
    registry: openSqliteRegistry({ path: path.join(dir, 'registry.db'), durability: 'fsync' }),
    destroy: () => fs.rmSync(dir, { recursive: true, force: true }),
  }
})

describe('openSqliteRegistry on a file', () => {
  const dirs: string[] = []
  const freshFile = () => {
    const dir = tempDir()
    dirs.push(dir)
    return path.join(dir, 'registry.db')
  }
  const open = (file: string, durability: 'fsync' | 'process' = 'fsync') => openSqliteRegistry({ path: file, durability })
  // synchronous, foreign_keys and busy_timeout are per connection, so they can only be read on the
  // registry's own connection (a private field).
  const connectionOf = (registry: Registry) => (registry as unknown as { db: Database.Database }).db

  afterEach(() => {
    vi.restoreAllMocks()
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })

  for (const [durability, synchronous] of [['fsync', 2], ['process', 1]] as const) {
    it(`should set WAL, synchronous ${synchronous}, foreign keys and busy_timeout for durability '${durability}'`, () => {
      const registry = open(freshFile(), durability)
      const db = connectionOf(registry)
      expect(db.pragma('journal_mode', { simple: true })).toBe('wal')
      expect(db.pragma('synchronous', { simple: true })).toBe(synchronous)
      expect(db.pragma('foreign_keys', { simple: true })).toBe(1)
      expect(db.pragma('busy_timeout', { simple: true })).toBe(5000)
      registry.close()
    })
  }

  it('should record the number of migrations in user_version', () => {
    const file = freshFile()
    open(file).close()
    const db = new Database(file, { readonly: true })
    expect(db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.length)
    db.close()
  })

  it('should keep its rows across close and reopen', () => {
    const file = freshFile()
    const first = open(file)
    first.register({ id: 'keep-aaaaaaaaaaaa', directiveName: 'keep', directive: { x: 1 }, nonce: 'n', createdAt: 1 })
    first.updateStatus('keep-aaaaaaaaaaaa', 'suspended', 2)
    first.close()
    const second = open(file)
    expect(second.get('keep-aaaaaaaaaaaa')).toMatchObject({ status: 'suspended', directive: { x: 1 }, updatedAt: 2 })
    second.close()
  })

  it('should not re-run migrations when reopening a migrated file', () => {
    const file = freshFile()
    open(file).close()
    // Migrations are the only thing the registry runs through exec().
    const exec = vi.spyOn(Database.prototype, 'exec')
    const reopened = open(file)
    expect(exec).not.toHaveBeenCalled()
    expect(connectionOf(reopened).pragma('user_version', { simple: true })).toBe(MIGRATIONS.length)
    reopened.close()
  })

  it('should refuse a file that is not a database with REGISTRY_FAILED naming the path', () => {
    const file = freshFile()
    fs.writeFileSync(file, Buffer.from('this is not sqlite\0\xff\xfe'.repeat(64), 'latin1'))
    expect(() => open(file)).toThrow(
      expect.objectContaining({ name: 'SpindleError', code: 'REGISTRY_FAILED', message: expect.stringContaining(file), details: { path: file } }),
    )
  })

  it('should refuse a schema newer than its migrations with REGISTRY_FAILED', () => {
    const file = freshFile()
    const db = new Database(file)
    db.pragma(`user_version = ${MIGRATIONS.length + 1}`)
    db.close()
    expect(() => open(file)).toThrow(expect.objectContaining({ code: 'REGISTRY_FAILED', message: expect.stringContaining(file) }))
  })

  it('should migrate a registry written before crash-loop counts, keeping its rows', () => {
    const file = freshFile()
    // What a spindle that knew only the first migration left behind.
    const old = new Database(file)
    old.exec(MIGRATIONS[0]!)
    old.pragma('user_version = 1')
    old.prepare(
      "INSERT INTO threads (id, directive_name, directive, status, nonce, created_at, updated_at, cost) VALUES ('old-aaaaaaaaaaaa', 'old', '{\"name\":\"old\"}', 'running', 'n', 1, 2, '{\"turns\":3,\"inputTokens\":1,\"outputTokens\":1,\"spend\":0}')",
    ).run()
    old.close()

    const registry = open(file)
    expect(connectionOf(registry).pragma('user_version', { simple: true })).toBe(MIGRATIONS.length)
    expect(registry.get('old-aaaaaaaaaaaa')).toMatchObject({ status: 'running', directive: { name: 'old' }, cost: { turns: 3 }, updatedAt: 2 })
    expect(registry.listActive().map((t) => t.id)).toEqual(['old-aaaaaaaaaaaa'])
    expect(registry.recoveryCount('old-aaaaaaaaaaaa')).toEqual({ count: 0, seq: null })
    registry.setRecoveryCounts([{ id: 'old-aaaaaaaaaaaa', count: 2, seq: 9 }])
    registry.register({ id: 'new-aaaaaaaaaaaa', directiveName: 'new', directive: {}, nonce: 'n', createdAt: 3 })
    registry.close()

    const reopened = open(file)
    expect(reopened.recoveryCount('old-aaaaaaaaaaaa')).toEqual({ count: 2, seq: 9 })
    expect(reopened.recoveryCount('new-aaaaaaaaaaaa')).toEqual({ count: 0, seq: null })
    reopened.close()
  })

  it('should migrate a registry written before suspend reasons: its suspended rows read as null until their next status change', () => {
    const file = freshFile()
    // What a spindle that knew the first three migrations left behind.
    const old = new Database(file)
    for (const migration of MIGRATIONS.slice(0, 3)) old.exec(migration)
    old.pragma('user_version = 3')
    old.prepare("INSERT INTO threads (id, directive_name, directive, status, nonce, created_at, updated_at) VALUES ('old-aaaaaaaaaaaa', 'old', '{}', 'suspended', 'n', 1, 2)").run()
    old.close()

    const registry = open(file)
    expect(connectionOf(registry).pragma('user_version', { simple: true })).toBe(MIGRATIONS.length)
    expect(registry.get('old-aaaaaaaaaaaa')).toMatchObject({ status: 'suspended', suspendReason: null, updatedAt: 2 })
    registry.updateStatus('old-aaaaaaaaaaaa', 'suspended', 3, 'budget')
    registry.close()
    const reopened = open(file)
    expect(reopened.get('old-aaaaaaaaaaaa')).toMatchObject({ status: 'suspended', suspendReason: 'budget', updatedAt: 3 })
    reopened.close()
  })

  it('should migrate a registry written before the event log: its rows kept, its log empty, and events kept across a reopen', () => {
    const file = freshFile()
    // What a spindle that knew the first five migrations left behind.
    const old = new Database(file)
    for (const migration of MIGRATIONS.slice(0, 5)) old.exec(migration)
    old.pragma('user_version = 5')
    old.prepare("INSERT INTO threads (id, directive_name, directive, status, nonce, created_at, updated_at) VALUES ('old-aaaaaaaaaaaa', 'old', '{}', 'running', 'n', 1, 2)").run()
    old.close()

    const registry = open(file)
    expect(registry.get('old-aaaaaaaaaaaa')).toMatchObject({ status: 'running' })
    expect(registry.events.lastId()).toBe(0)
    registry.transaction(() => {
      registry.updateStatus('old-aaaaaaaaaaaa', 'completed', 3)
      registry.events.append([{ threadId: 'old-aaaaaaaaaaaa', type: 'thread.completed', at: 3, data: { result: 'done' } }])
    })
    registry.close()
    const reopened = open(file)
    expect(reopened.events.after(0, 10)).toEqual([{ id: 1, threadId: 'old-aaaaaaaaaaaa', type: 'thread.completed', at: 3, data: { result: 'done' } }])
    reopened.close()
  })

  it('should list a row whose JSON cell is damaged, with that field null', () => {
    const file = freshFile()
    const registry = open(file)
    registry.register({ id: 'dmg-aaaaaaaaaaaa', directiveName: 'dmg', directive: { a: 1 }, nonce: 'n', createdAt: 1 })
    registry.register({ id: 'ok-aaaaaaaaaaaa', directiveName: 'ok', directive: { b: 2 }, nonce: 'n', createdAt: 2 })
    const db = new Database(file)
    db.prepare("UPDATE threads SET cost = '{broken' WHERE id = ?").run('dmg-aaaaaaaaaaaa')
    db.close()
    const [damaged, intact] = registry.list()
    expect(damaged).toMatchObject({ id: 'dmg-aaaaaaaaaaaa', cost: null, directive: { a: 1 } })
    expect(intact).toMatchObject({ id: 'ok-aaaaaaaaaaaa', directive: { b: 2 } })
    registry.close()
  })
})
