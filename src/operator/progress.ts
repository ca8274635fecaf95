/**
 * Live progress for long commands (demo, run, recovery): one line rewritten in place on a
 * terminal, plain lines — at most one a second, and the last — anywhere else (logs, CI, pipes).
 */
import type { LifecycleEvent } from '../runtime/api.js'
import type { ThreadStatus } from '../../persistence/types.js'
import { formatUsd as money } from '../base/money.js'

export interface ProgressOut {
  write(text: string): unknown
}

type RecoveryProgress = Extract<LifecycleEvent, { type: 'recovery_progress' }>

const PLAIN_EVERY_MS = 1000

const count = (n: number): string => n.toLocaleString('en-US')

/** `1,200/10,000 threads: 1,150 resumed, 40 settled, 10 failed; $3.21000 spent so far` */
export function recoveryLine(p: RecoveryProgress): string {
  const parts = (
    [
      ['resumed', p.resumed],
      ['settled', p.settled],
      ['rebuilt from transcript', p.rebuilt],
      ['failed', p.failed],
      ['held by another process', p.elsewhere],
    ] as const
  )
    .filter(([, n]) => n > 0)
    .map(([label, n]) => `${count(n)} ${label}`)
  return `recovering ${count(p.done)}/${count(p.total)} unfinished ${p.total === 1 ? 'thread' : 'threads'}${parts.length ? `: ${parts.join(', ')}` : ''}; ${money(p.spend)} spent so far`
}

/**
 * A lifecycle listener that shows recovery as it goes. Pass it as `onLifecycle` (recovery at open
 * happens inside createRuntime, before `rt.on` could be called).
 */
export function showRecovery(out: ProgressOut, tty: boolean): (event: LifecycleEvent) => void {
  let lastPlain = -Infinity
  let shown = false
  return (event) => {
    if (event.type !== 'recovery_progress') return
    const final = event.done === event.total
    if (tty) {
      out.write(`\r\x1b[2K${recoveryLine(event)}${final ? '\n' : ''}`)
      return
    }
    const now = performance.now()
    if (final || !shown || now - lastPlain >= PLAIN_EVERY_MS) {
      out.write(`${recoveryLine(event)}\n`)
      lastPlain = now
      shown = true
    }
  }
}

const ORDER: ThreadStatus[] = ['created', 'running', 'suspended', 'completed', 'continued', 'cancelled', 'error']

/** `2 running, 1 suspended, 3 completed; $0.01230 spent` for threads as they are now. */
export function statusLine(threads: Iterable<{ status: ThreadStatus; spend: number }>): string {
  const by = new Map<ThreadStatus, number>()
  let spend = 0
  for (const t of threads) {
    by.set(t.status, (by.get(t.status) ?? 0) + 1)
    spend += t.spend
  }
  const parts = ORDER.filter((s) => by.has(s)).map((s) => `${count(by.get(s)!)} ${s}`)
  return `${parts.join(', ') || 'no threads'}; ${money(spend)} spent`
}
