import { createMemoryRecovery } from '../../persistence/memoryRecovery.js'
import { recoveryContract } from '../contract/recovery.contract.js'

recoveryContract('memory', () => ({ recovery: createMemoryRecovery() }))
