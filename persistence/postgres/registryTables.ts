/** Tables of the registry, its event log and the recovery store (see schema.ts). */
export const REGISTRY_TABLES: readonly string[] = []
export const EVENT_TABLES: readonly string[] = []
export const RECOVERY_TABLES: readonly string[] = []
