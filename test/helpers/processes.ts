/** What the tests that kill and watch real processes share. */
import fs from 'node:fs'

/** Alive and not a zombie: a reparented zombie nobody reaps (some container inits don't) is dead enough. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false
    throw error
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z'
  } catch {
    return !fs.existsSync('/proc/self/stat') // no /proc (macOS): kill(pid, 0) is all there is
  }
}
