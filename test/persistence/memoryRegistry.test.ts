import { createMemoryRegistry } from '../../persistence/memoryRegistry.js'
import { registryContract } from '../contract/registry.contract.js'

registryContract('memory', () => ({ registry: createMemoryRegistry() }))
