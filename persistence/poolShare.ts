/**
 * How much of the libuv threadpool (src/threadpool.ts: 32 threads unless the host set another
 * size) one batch of file operations may hold at once. A checkpoint round writes hundreds of
 * files; given the whole pool, a transcript-journal fdatasync that every waiting effect needs
 * queues behind all of them (measured: 25 ms of waiting for a 0.7 ms fdatasync). Two batches may
 * run at once (state.json temp files, and the thread files they point into), so each takes at
 * most a quarter of the pool and the rest stays free for the journal and for the host.
 */
export function poolShare(): number {
  const size = Number(process.env.UV_THREADPOOL_SIZE) || 4
  return Math.max(2, Math.floor(size / 4))
}

/** Runs `fn` over `items` with at most `limit` calls in flight. */
export async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++]!)
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker))
}
