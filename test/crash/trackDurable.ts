/**
 * For the crash test's power-loss row: records, for every transcript and journal file, how many
 * bytes a completed fdatasync (or fsync) made durable, in `<dir>/durable.log`. Imported before
 * spindle, it wraps the `fs` functions spindle calls at call time. The parent then cuts each file
 * back to what was durable when it killed the process, which is what a power loss could leave.
 */
import fs from 'node:fs'

export function trackDurable(dir: string): void {
  const log = `${dir}/durable.log`
  const tracked = (fd: number): { file: string; size: number } | null => {
    try {
      const file = fs.readlinkSync(`/proc/self/fd/${fd}`)
      if (!file.startsWith(dir) || !(file.endsWith('/transcript.jsonl') || file.endsWith('.journal'))) return null
      return { file, size: fs.fstatSync(fd).size }
    } catch {
      return null
    }
  }
  // A journal fdatasync vouches for every transcript line appended before it began (the journal
  // writes its records, then calls fdatasync, in one synchronous step): those are acknowledged.
  const transcriptSizes = (): string[] => {
    const threads = `${dir}/threads`
    const sizes: string[] = []
    for (const id of fs.existsSync(threads) ? fs.readdirSync(threads) : []) {
      const file = `${threads}/${id}/transcript.jsonl`
      try {
        sizes.push(`ack\t${file}\t${fs.statSync(file).size}\n`)
      } catch {
        // Not created yet.
      }
    }
    return sizes
  }
  const note = (t: { file: string; size: number } | null, acked: string[] | null): void => {
    if (t) fs.appendFileSync(log, `${t.file}\t${t.size}\n${acked ? acked.join('') : ''}`)
  }
  // A cut (a torn line moved aside, a write-back) shrinks what is on disk; what a later sync
  // vouches for starts again from there.
  const originalTruncate = fs.ftruncateSync
  fs.ftruncateSync = ((fd: number, length?: number) => {
    const t = tracked(fd)
    originalTruncate(fd, length)
    if (t) fs.appendFileSync(log, `cut\t${t.file}\t${length ?? 0}\n`)
  }) as typeof fs.ftruncateSync
  for (const name of ['fdatasync', 'fsync'] as const) {
    const original = fs[name]
    fs[name] = ((fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      // What was written before the call is what it makes durable.
      const t = tracked(fd)
      const acked = t?.file.endsWith('.journal') ? transcriptSizes() : null
      original(fd, (error) => {
        if (!error) note(t, acked)
        callback(error)
      })
    }) as typeof original
    const originalSync = fs[`${name}Sync`]
    fs[`${name}Sync`] = ((fd: number) => {
      const t = tracked(fd)
      originalSync(fd)
      note(t, null)
    }) as typeof originalSync
  }
}

/**
 * What `trackDurable` recorded: the durable size of each file (the largest any sync vouched for),
 * and how much of each transcript was acknowledged (a journal sync vouched for it).
 */
export function durableSizes(dir: string): { durable: Map<string, number>; acknowledged: Map<string, number> } {
  const durable = new Map<string, number>()
  const acknowledged = new Map<string, number>()
  const log = `${dir}/durable.log`
  if (!fs.existsSync(log)) return { durable, acknowledged }
  for (const line of fs.readFileSync(log, 'utf8').split('\n')) {
    const fields = line.split('\t')
    if (fields[0] === 'cut') {
      // Bytes past a cut are on disk only once a later sync vouches for them.
      const [, file, size] = fields
      if (file && size !== undefined) durable.set(file, Math.min(durable.get(file) ?? 0, Number(size)))
      continue
    }
    const [map, file, size] = fields[0] === 'ack' ? [acknowledged, fields[1], fields[2]] : [durable, fields[0], fields[1]]
    if (!file || size === undefined) continue
    map.set(file, Math.max(map.get(file) ?? 0, Number(size)))
  }
  return { durable, acknowledged }
}
