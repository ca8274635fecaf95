/**
 * What the inspector page shows of a data directory or a database, as JSON: the thread tree, and
 * for each thread its status, the step its checkpoint says it is at, cost against limits and
 * budget, where it sits in the statechart (its state path and the transitions out of it), what
 * waits for a person, and the cancel or resume requests left for it that no runtime has taken yet.
 * Shaped here alike for both from what an InspectorSource reads; reads only.
 */
import { describeError, isSpindleError } from '../base/errors.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { threadMachine } from '../../machines/thread.machine.js'
import { orphanWhy, treeOf } from './operatorActions.js'
import type { TreeNode } from './operatorActions.js'
import { isActive } from '../thread/threadStatus.js'
import { stepOfSnapshot } from '../thread/threadView.js'
import type { BudgetView } from '../runtime/budgetView.js'
import type { InspectorSource, OpenApproval } from './inspectorSource.js'
import { transitionsOf } from './machineShape.js'
import type { NodeLike } from './machineShape.js'

function flatten(nodes: TreeNode[], out: TreeNode[] = []): TreeNode[] {
  for (const node of nodes) {
    out.push(node)
    flatten(node.children, out)
  }
  return out
}

/**
 * A per-thread read's failure, shown on that thread — unless the source itself stopped answering,
 * which is no thread's damage: then the whole overview fails, as when the first read fails.
 */
function threadProblem(error: unknown): { code: string; message: string } {
  if (isSpindleError(error) && error.code === 'DATABASE_UNAVAILABLE') throw error
  return describeError(error)
}

/** Each active leaf of a state value as its path of keys: `{ running: 'callingModel' }` → [['running', 'callingModel']]. */
export function statePaths(value: unknown, prefix: string[] = []): string[][] {
  if (typeof value === 'string') return [[...prefix, value]]
  if (value === null || typeof value !== 'object') return []
  return Object.entries(value).flatMap(([key, inner]) => statePaths(inner, [...prefix, key]))
}

/**
 * The transitions out of the state at `path` and out of the states around it (an event its
 * parent handles leaves it too): what the folded statechart shows beside the current state.
 */
export function transitionsFrom(path: readonly string[]): Array<{ event: string; target: string }> {
  const prefix = `${threadMachine.id}.`
  const seen = new Set<string>()
  const out: Array<{ event: string; target: string }> = []
  let node = threadMachine.root as unknown as NodeLike
  const chain: NodeLike[] = []
  for (const key of path) {
    const next = node.states[key]
    if (!next) break
    chain.push(next)
    node = next
  }
  // The innermost state's own transitions first: they are the likeliest next step.
  for (const state of chain.reverse()) {
    for (const { event, target } of transitionsOf(state)) {
      const name = target.startsWith(prefix) ? target.slice(prefix.length) : target
      const key = `${event}>${name}`
      if (seen.has(key)) continue
      seen.add(key)
      out.push({ event, target: name })
    }
  }
  return out
}

/** What the page shows, as JSON: the overview the events channel pushes whenever it changes. */
export function overview(source: InspectorSource) {
  const look = source.look()
  const leases = new Map(look.leases.map((l) => [l.threadId, l]))
  let budgets: Map<string, BudgetView> | null = null
  const ledgerProblems: Array<{ code: string; message: string }> = []
  try {
    budgets = look.budgets(look.threads.map((t) => t.id))
  } catch (error) {
    // A ledger that does not add up is `spindle doctor`'s to report; the tree is still worth seeing.
    ledgerProblems.push(threadProblem(error))
  }
  const tree = treeOf(look.threads, budgets, source.name)
  const orphans: Record<string, string> = {}
  const threads = flatten(tree).map((node) => {
    const report: { state: { value: unknown; context: ThreadContext } | null; seq: number; problems: Array<{ code: string; message: string }> } = { state: null, seq: 0, problems: [...ledgerProblems] }
    try {
      const envelope = look.checkpoint(node.id)
      if (envelope) {
        report.state = envelope.snapshot as { value: unknown; context: ThreadContext }
        report.seq = envelope.transcript.seq
      }
    } catch (error) {
      report.problems.push(threadProblem(error))
    }
    const context = report.state?.context
    const lease = leases.get(node.id)
    // A thread the registry calls running that no live process holds must not look alive.
    const orphan = isActive(node.status) ? orphanWhy(lease) : null
    if (orphan) orphans[node.id] = orphan
    // The approval request it waits at, with the answer given to it if any (a list: the page loops).
    let approvals: OpenApproval[] = []
    try {
      const open = node.status === 'suspended' ? look.openApproval(node.id, node.status) : null
      if (open) approvals = [open]
    } catch (error) {
      report.problems.push(threadProblem(error))
    }
    const active = statePaths(report.state?.value ?? null)
    return {
      id: node.id,
      directive: node.directive,
      status: node.status,
      state: report.state?.value ?? null,
      // The transcript entry its checkpoint is at: when it moves, the page reads the conversation again.
      seq: report.seq,
      statePaths: active,
      next: active.length === 1 ? transitionsFrom(active[0]!) : [],
      // What its last checkpoint says the runtime runs for it (a model call, which tool …).
      step: report.state ? stepOfSnapshot(report.state as Parameters<typeof stepOfSnapshot>[0]) : null,
      usage: context?.usage ?? null,
      limits: context?.limits ?? null,
      // As rt.budget gives it: the page shows what its children spent and hold, not only its own cost.
      budget: budgets?.get(node.id) ?? null,
      retries: context?.retries ?? 0,
      lastError: context?.lastError ?? null,
      suspendReason: context?.suspendReason ?? null,
      result: context?.result ?? null,
      error: context?.error ?? null,
      tools: context?.policy.tools ?? null,
      permissions: context?.policy.permissions ?? null,
      orphan,
      heldBy: lease?.state === 'live' ? { owner: lease.owner, pid: lease.pid, host: lease.host } : null,
      // An answer stays on the page until the runtime acts on it, however often the page is updated.
      approvals,
      // A suspended thread at no approval (an error, a budget, a crash loop) moves on only by a resume.
      resumable: node.status === 'suspended' && approvals.length === 0,
      // Left and not yet taken by a runtime: the page says so instead of offering the button again.
      requested: {
        cancel: isActive(node.status) || node.status === 'suspended' ? look.requested(node.id, 'cancel') : false,
        resume: node.status === 'suspended' ? look.requested(node.id, 'resume') : false,
      },
      problems: report.problems,
    }
  })
  return { tree, threads, orphans }
}

export type Overview = ReturnType<typeof overview>
