/** Tables of the request inbox (see schema.ts). */
export const INBOX_TABLES: readonly string[] = []
