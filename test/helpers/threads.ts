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
