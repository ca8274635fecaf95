/**
 * Other processes of this host, as leases and the files they leave need to know them: whether a
 * process runs, and whether the writer of a file is gone for good — named in the file (a journal's
 * header) or in its name (`writerMark`), for files a kill can leave before they hold anything.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'

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

/** The start time of process `pid` (clock ticks since boot), or null where /proc cannot say. */
export function processStart(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'latin1')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null
  } catch {
    return null
  }
}

let bootId: string | null | undefined
/** This boot of the kernel (Linux), or null where it cannot be read. */
export function currentBoot(): string | null {
  if (bootId === undefined) {
    try {
      bootId = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || null
    } catch {
      bootId = null
    }
  }
  return bootId
}

/** What is known of the process that wrote a file. */
export interface Writer {
  pid: number | null
  /** Its start time (`processStart`), or null when unknown. */
  start: string | null
  /** Whether it ran on this host: its host name is this one's (false: another, or unknown). */
  thisHost: boolean
  /** Whether it ran under another boot of the kernel (true), this one (false), or unknown (null). */
  otherBoot: boolean | null
}

/**
 * Whether the writer of a file is gone for good: a boot of the kernel before this one (whatever
 * the host was called then), or on this host a dead pid or a live pid that is another process
 * (reused, or this one as PID 1 of a restarted container).
 *
 * Another boot is judged even under another host name: a data directory lives on one host, since
 * SQLite's WAL (registry.db, leases.db) does not work across hosts, so a writer that booted another
 * kernel is this machine before a restart, or a machine the directory was moved from. A writer of
 * this boot under another host name (a sibling container sharing the volume) may be alive: its pid
 * cannot be looked up from here.
 */
export function writerGone(writer: Writer): boolean {
  if (writer.otherBoot === true) return true
  if (!writer.thisHost || writer.pid === null) return false
  if (writer.pid !== process.pid && !pidAlive(writer.pid)) return true
  const start = processStart(writer.pid)
  return writer.start !== null && start !== null && start !== writer.start
}

/** A short key of a host name or boot id, for file names: 8 hex digits of its SHA-256. */
function key(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 8)
}

let mark: string | undefined
/**
 * This process as the names of the files it makes say it:
 * `<pid>-<start time>-<host key>-<boot key>` (`x` for what cannot be read). A file a kill leaves
 * before anything is written in it (an empty journal, a temp file) names its writer this way, so
 * the next runtime can tell a dead process's file from a live one's (`markedWriter`).
 */
export function writerMark(): string {
  mark ??= `${process.pid}-${processStart(process.pid) ?? 'x'}-${key(os.hostname())}-${currentBoot() === null ? 'x' : key(currentBoot()!)}`
  return mark
}

const MARK = /^(\d+)-(\d+|x)-([0-9a-f]{8})-([0-9a-f]{8}|x)(?=$|[-.])/

/** The writer a `writerMark` at the start of `text` names, or null when `text` does not start with one. */
export function markedWriter(text: string): Writer | null {
  const found = MARK.exec(text)
  if (!found) return null
  const boot = currentBoot()
  return {
    pid: Number(found[1]),
    start: found[2] === 'x' ? null : found[2]!,
    thisHost: found[3] === key(os.hostname()),
    otherBoot: found[4] === 'x' || boot === null ? null : found[4] !== key(boot),
  }
}
