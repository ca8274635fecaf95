import fs from 'node:fs'
import path from 'node:path'
import { openSqliteRecovery } from '../../persistence/sqliteRecovery.js'
import { recoveryContract } from '../contract/recovery.contract.js'
import { tempDir } from '../helpers/dirs.js'

recoveryContract('sqlite :memory:', () => ({ recovery: openSqliteRecovery({ path: ':memory:', durability: 'fsync' }) }))
recoveryContract('sqlite file', () => {
  const dir = tempDir('spindle-recovery')
  return { recovery: openSqliteRecovery({ path: path.join(dir, 'recovery.db'), durability: 'fsync' }), destroy: () => fs.rmSync(dir, { recursive: true, force: true }) }
})
