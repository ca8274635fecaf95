import { createMemoryLedger } from '../../persistence/memoryLedger.js'
import { ledgerContract } from '../contract/ledger.contract.js'

ledgerContract('memory', () => ({ ledger: createMemoryLedger() }))
