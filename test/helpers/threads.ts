import type { ThreadHandle, ThreadView } from '../../src/index.js'

/** Resolves with the first view of `thread` that satisfies `predicate` (checked at every transition). */
export function until(thread: ThreadHandle, predicate: (view: ThreadView) => boolean): Promise<ThreadView> {
  return new Promise((resolve, reject) => {
    let stop = (): void => {}
    let settled = false
    stop = thread.subscribe((view) => {
      if (!settled && predicate(view)) {
        settled = true
        queueMicrotask(() => stop())
        resolve(view)
      }
    })
    thread.done.then(
      () => {
        if (!settled) reject(new Error(`thread ${thread.id} stopped before the awaited state`))
      },
      reject,
    )
  })
}

export const inState = (name: string) => (view: ThreadView) => JSON.stringify(view.state).includes(name)

/**
 * Settles `rt` until `condition` holds, for up to `ms` of wall-clock time: a count of event-loop
 * turns alone runs out early on a machine busy with other work, while file I/O is slow.
 */
export async function eventually(rt: { settle(): Promise<void> }, condition: () => boolean, ms = 20_000): Promise<boolean> {
  const deadline = Date.now() + ms
  while (!condition()) {
    if (Date.now() > deadline) return false
    await rt.settle()
    await new Promise((resolve) => setTimeout(resolve, 2))
  }
  return true
}
