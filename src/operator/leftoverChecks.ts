/**
 * Doctor's findings of files a process killed at an unlucky moment left in the data directory
 * (persistence/leftovers.ts): what each is, who left it, and what becomes of it. Files of writers
 * still at work (a write under way) are not findings.
 */
import path from 'node:path'
import type { Leftover, LeftoverKind } from '../../persistence/leftovers.js'
import { findLeftovers, threadFolderLeftovers } from '../../persistence/leftovers.js'
import type { DataPaths } from '../../persistence/paths.js'
import { threadDir } from '../../persistence/paths.js'
import type { Finding } from './approvalChecks.js'

/** Where a leftover that names no thread lies, as the finding's thread column says. */
const PLACE: Record<LeftoverKind, string> = { temp: '(tmp)', claim: '(tmp)', journal: '(journal)', probe: '(journal)', bell: '(requests)' }

/** The request file a claimed request was written as, in its thread's folder. */
function requestFileOf(paths: DataPaths, leftover: Leftover): string {
  const name = path.basename(leftover.file).includes('resume.requested') ? 'resume.requested' : 'cancel.requested'
  return path.join(threadDir(paths, leftover.threadId!), name)
}

/** What becomes of a leftover whose writer is gone. */
function repairOfGone(paths: DataPaths, leftover: Leftover, inThreadFolder: boolean): string {
  if (leftover.kind === 'claim') {
    return inThreadFolder
      ? `Rename it to ${requestFileOf(paths, leftover)} to have the request carried out, or remove it.`
      : 'Opening a runtime on this directory carries the request out: a cancel at once; a resume if the thread is still suspended (else it was resumed before the kill).'
  }
  if (inThreadFolder) return 'Remove it: nothing reads it.'
  return 'Opening a runtime on this directory removes it (or remove it yourself: nothing reads it).'
}

function finding(paths: DataPaths, leftover: Leftover, inThreadFolder: boolean): Finding {
  const who = leftover.pid === null ? 'its process' : `its process (pid ${leftover.pid})`
  if (leftover.writer === 'gone') {
    return {
      threadId: leftover.threadId ?? PLACE[leftover.kind],
      kind: 'stray',
      code: 'LEFTOVER_FILE',
      message: `${leftover.file} is ${leftover.what}; ${who} is gone.`,
      repair: repairOfGone(paths, leftover, inThreadFolder),
    }
  }
  const once = `Once no process ${leftover.pid ?? 'that wrote it'} runs on any host that shares this directory,`
  return {
    threadId: leftover.threadId ?? PLACE[leftover.kind],
    kind: 'stray',
    code: 'LEFTOVER_FILE',
    message:
      `${leftover.file} is ${leftover.what}; whether ${who} still runs cannot be told from this host ` +
      '(it ran on another host sharing the directory, or it was written by an older version of spindle, whose names give no host).',
    repair: leftover.kind === 'claim' ? `${once} rename it to ${requestFileOf(paths, leftover)} to have the request carried out, or remove it.` : `${once} remove it: nothing reads it.`,
  }
}

/**
 * Leftovers in `tmp/`, `journal/` and the directory's root, and in the folders of `threadIds`.
 * Reads only.
 */
export function leftoverFindings(paths: DataPaths, threadIds: readonly string[]): Finding[] {
  const findings: Finding[] = []
  for (const leftover of findLeftovers(paths)) if (leftover.writer !== 'alive') findings.push(finding(paths, leftover, false))
  for (const id of threadIds) {
    for (const leftover of threadFolderLeftovers(threadDir(paths, id), id)) findings.push(finding(paths, leftover, true))
  }
  return findings
}
