/** Tables of the lease store (leases, waits) and the ledger (see schema.ts). */
export const LEASE_TABLES: readonly string[] = []
export const LEDGER_TABLES: readonly string[] = []
