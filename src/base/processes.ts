/** Other processes of this host, as leases and journals need to know them. */
import fs from 'node:fs'

/**
 * Whether process `pid` on this host still runs. A zombie — killed, but not yet reaped by a parent
 * that never waits (a container's PID 1 often) — answers signal 0 like a live one; on Linux its
 * /proc state says it is dead.
 */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (error) {
    // ESRCH: no such process. EPERM: it exists (another user's), so it is alive.
    return (error as NodeJS.ErrnoException).code !== 'ESRCH'
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1')
    // The state follows the command name in parentheses, which may itself hold ')'.
    return stat[stat.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return true
  }
}
