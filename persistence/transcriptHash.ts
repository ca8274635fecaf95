/**
 * The transcript's hash chain, in pure functions shared by every backend and by offline tools
 * (replay, inspect, a future `spindle rebuild`). Pure. No I/O.
 *
 * Changing what goes into the hash invalidates every stored transcript: treat it like a file format.
 */
import { hash } from 'node:crypto'

/**
 * The hash of one transcript entry: sha256 (hex) of the previous entry's hash ('' before the first
 * entry), a newline, and `JSON.stringify([seq, ts, type, data])`.
 *
 * @param prevHash hash of the entry before (`''` for seq 1)
 * @param seq the entry's seq (1, 2, 3 …)
 * @param ts the entry's ISO timestamp, exactly as stored
 * @param type the entry's type
 * @param data the entry's data as a reader parses it back from the line (plain JSON)
 * @example
 * const first = entryHash('', 1, '2025-01-01T00:00:00.000Z', 'spawn', { input: 'hi' })
 * const second = entryHash(first, 2, '2025-01-01T00:00:01.000Z', 'START', null)
 * @see hashText for the same hash over text already serialised.
 */
export function entryHash(prevHash: string, seq: number, ts: string, type: string, data: unknown): string {
  return hashText(prevHash, JSON.stringify([seq, ts, type, data]))
}

/**
 * The same hash over an already serialised `[seq, ts, type, data]`, for writers that serialise
 * `data` once (the text must be exactly what `JSON.stringify([seq, ts, type, data])` gives).
 */
export function hashText(prevHash: string, serialised: string): string {
  // One-shot hash (Node >= 20.12): half the cost of a Hash object per entry, same digest.
  return hash('sha256', `${prevHash}\n${serialised}`, 'hex')
}
