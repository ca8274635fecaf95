import { createMemoryLeases } from '../../persistence/memoryLeases.js'
import { leaseContract } from '../contract/leases.contract.js'

leaseContract('memory', () => ({ leases: createMemoryLeases() }))
