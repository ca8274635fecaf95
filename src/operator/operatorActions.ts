/**
 * What `spindle cancel | approve | deny | answer | resume | tree` do. Decisions travel as request files
 * (nonce-checked cancel and resume files, approval responses) that the runtime running the
 * directory picks up within `requests.pollMs` — or the next runtime that opens it — because only
 * that process has the model and tools the thread carries on with.
 */
import type { Limits } from '../../machines/threadPolicy.js'
import { dataPaths } from '../../persistence/paths.js'
import type { ThreadRecord } from '../../persistence/types.js'
import { SpindleError } from '../base/errors.js'
import { assertThreadId } from '../base/ids.js'
import { locks } from './locks.js'
import type { LockView } from './locks.js'
import { recordOf, withRegistry } from './registryAccess.js'
import { listThreads } from './threadListing.js'
import type { ThreadListing } from './threadListing.js'
import { readBudgets } from './budgetFigures.js'
import type { BudgetView } from '../runtime/budgetView.js'
import { pendingApprovals, requestCancel, requestResume, respondToApproval } from '../thread/requests.js'
import type { ApprovalResponse, OpenRequest } from '../thread/requests.js'

export interface RequestWritten {
  threadId: string
  action: 'cancel' | 'approve' | 'deny' | 'answer' | 'resume'
  file: string
  /** What happens next, for a person. */
  next: string
}

const NEXT = 'The runtime running this directory acts on it within its poll interval (1 s by default); if none runs, the next one that opens the directory does.'

export function cancelThread(dir: string, id: string, reason: string | undefined, by: string): RequestWritten {
  const file = requestCancel(dir, id, { ...(reason !== undefined ? { reason } : {}), by })
  return { threadId: id, action: 'cancel', file, next: NEXT }
}

/** Throws THREAD_NOT_FOUND for a thread the directory does not have. */
function assertKnown(dir: string, id: string): void {
  withRegistry(dir, (registry) => recordOf(registry, dir, id))
}

/** What `spindle approve` (or the inspector) says with an approval. */
export interface Approval {
  /** New limits, at a limit (none: the proposed one). */
  limits?: Partial<Limits>
  /** At a tool approval: the input to run the call with instead of the model's. */
  input?: unknown
  message?: string
}

/**
 * Writes an approval of thread `id`'s pending request — a limit escalation or a tool call — refused
 * up front where the runtime would refuse it (see `respondToApproval`); `replace` writes over an
 * answer already waiting.
 */
export function approveThread(dir: string, id: string, approval: Approval, by: string, options: { replace?: boolean } = {}): RequestWritten {
  assertKnown(dir, id)
  const file = respondToApproval(dir, id, approvalResponse(id, pendingApprovals(dir, id).at(-1), approval, by), options)
  return { threadId: id, action: 'approve', file, next: NEXT }
}

/**
 * What `spindle approve` writes, given the request the thread waits at (if any): at a limit its
 * policy proposes no new one for, a new limit must be given, and the refusal names the flag.
 */
export function approvalResponse(id: string, request: OpenRequest | undefined, approval: Approval, by: string): ApprovalResponse {
  const { limits = {}, input, message } = approval
  if (request?.kind === 'limit_escalation' && Object.keys(limits).length === 0 && request.proposed === null && input === undefined) {
    throw new SpindleError(
      'APPROVAL_NEEDS_LIMITS',
      `Thread ${id} hit its ${request.limit} limit and its policy proposes no new one: give one, e.g. --${request.limit === 'durationMs' ? 'duration-ms' : request.limit} ${request.max * 2}.`,
      { details: { threadId: id } },
    )
  }
  return { approved: true, ...(Object.keys(limits).length ? { limits } : {}), ...(input !== undefined ? { input } : {}), ...(message ? { message } : {}), by }
}

/** Writes a denial: at a limit the thread ends cancelled; at a tool call the model gets the denial as the call's result. */
export function denyThread(dir: string, id: string, reason: string | undefined, by: string, options: { replace?: boolean } = {}): RequestWritten {
  assertKnown(dir, id)
  const file = respondToApproval(dir, id, { approved: false, ...(reason ? { message: reason } : {}), by }, options)
  return { threadId: id, action: 'deny', file, next: NEXT }
}

/** Writes the answer to the question thread `id` waits at (`ask_human`, `waitForAnswer`): it becomes the call's result. */
export function answerThread(dir: string, id: string, answer: unknown, by: string, options: { replace?: boolean } = {}): RequestWritten {
  assertKnown(dir, id)
  if (answer === undefined) throw new SpindleError('INVALID_OPTIONS', `An answer to thread ${id} needs a value (any JSON value). Nothing was written.`, { details: { threadId: id, field: 'answer' } })
  const file = respondToApproval(dir, id, { answer, by }, options)
  return { threadId: id, action: 'answer', file, next: NEXT }
}

export function resumeThread(dir: string, id: string, by: string): RequestWritten {
  return { threadId: id, action: 'resume', file: requestResume(dir, id, { by }), next: NEXT }
}

export interface TreeNode {
  id: string
  directive: string
  status: ThreadRecord['status']
  spend: number
  turns: number
  /** The thread this one continues. */
  previousThreadId: string | null
  /**
   * Its spend budget from the ledger: `spent` by it and its descendants against `limit` (null:
   * unlimited). A continuation shows its chain's. null when ledger.db could not be read.
   */
  budget: { spent: number; limit: number | null } | null
  children: TreeNode[]
}

/**
 * The thread tree from the registry: children under their parent, continuations after the
 * thread they continue. With `root`, only that thread's tree (from the top of its chain).
 */
export function threadTree(dir: string, root?: string): TreeNode[] {
  // As `spindle ls` shows them: a row a crash left behind reads as its last checkpoint.
  const records = listThreads(dir)
  let budgets: Map<string, BudgetView> | null = null
  try {
    budgets = readBudgets(dir, records.map((r) => r.id))
  } catch {
    // A damaged ledger.db is `spindle doctor`'s to report; the tree is still worth seeing.
  }
  return treeOf(records, budgets, dataPaths(dir).root, root)
}

/**
 * `threadTree` of threads as `spindle ls` lists them, with their budgets (null: unknown), read
 * from any backend; `where` names it in a THREAD_NOT_FOUND message.
 */
export function treeOf(records: readonly ThreadListing[], budgets: ReadonlyMap<string, BudgetView> | null, where: string, root?: string): TreeNode[] {
  const nodes = new Map<string, TreeNode>()
  for (const r of records) {
    const budget = budgets?.get(r.id)
    nodes.set(r.id, {
      id: r.id,
      directive: r.directiveName,
      status: r.status,
      spend: r.cost?.spend ?? 0,
      turns: r.cost?.turns ?? 0,
      previousThreadId: r.previousThreadId,
      budget: budget ? { spent: budget.spent.total.spend, limit: budget.limit.spend } : null,
      children: [],
    })
  }
  const tops: TreeNode[] = []
  for (const r of records) {
    const node = nodes.get(r.id)!
    // A continuation hangs under the thread it continues; a child under its parent.
    const above = (r.previousThreadId && nodes.get(r.previousThreadId)) || (r.parentId && nodes.get(r.parentId)) || null
    if (above) above.children.push(node)
    else tops.push(node)
  }
  if (root === undefined) return tops
  assertThreadId(root)
  let node = nodes.get(root)
  if (!node) throw new SpindleError('THREAD_NOT_FOUND', `No thread ${root} in ${where}. \`spindle ls\` lists the threads there.`, { details: { threadId: root } })
  // Start from the top of its continuation chain and its ancestors.
  const byId = new Map(records.map((r) => [r.id, r]))
  let current = byId.get(root)!
  for (let guard = 0; guard < records.length; guard++) {
    const up = current.previousThreadId ?? current.parentId
    if (!up || !byId.has(up)) break
    current = byId.get(up)!
  }
  node = nodes.get(current.id)!
  return [node]
}

export interface Orphan {
  id: string
  directive: string
  status: ThreadRecord['status']
  /** Why no live process holds it. */
  why: 'no_lease' | 'expired' | 'dead_owner'
  owner: string | null
  updatedAt: number
}

/** Why no live process holds a created or running thread with this lease, or null when one does. */
export function orphanWhy(lock: LockView | undefined): Orphan['why'] | null {
  if (!lock) return 'no_lease'
  if (lock.state === 'live') return null
  return lock.state === 'dead_owner' ? 'dead_owner' : 'expired'
}

/** Created or running threads that no live runtime process holds a lease on. */
export function scanOrphans(dir: string, now = Date.now()): Orphan[] {
  return orphansAmong(
    withRegistry(dir, (registry) => registry.listActive()),
    locks(dir, { now }).locks,
  )
}

/** Which of the `active` threads (created or running) no lease of `leases` holds live: a directory's or a database's. */
export function orphansAmong(active: readonly ThreadRecord[], leases: readonly LockView[]): Orphan[] {
  const held = new Map(leases.map((l) => [l.threadId, l]))
  const orphans: Orphan[] = []
  for (const record of active) {
    const lock = held.get(record.id)
    const why = orphanWhy(lock)
    if (why === null) continue
    orphans.push({
      id: record.id,
      directive: record.directiveName,
      status: record.status,
      why,
      owner: lock?.owner ?? null,
      updatedAt: record.updatedAt,
    })
  }
  return orphans
}
