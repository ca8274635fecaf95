import { createHash } from 'node:crypto'

/** sha256 (hex) chaining an entry to the one before it ('' before the first). */
export function entryHash(prevHash: string, seq: number, ts: string, type: string, data: unknown): string {
  return createHash('sha256').update(prevHash).update('\n').update(JSON.stringify([seq, ts, type, data])).digest('hex')
}
