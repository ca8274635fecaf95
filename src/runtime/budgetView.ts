/**
 * A thread's budget and children as host code, the CLI and the inspector see them: read from the
 * ledger and the registry alone, so a thread run by another process on the same data directory
 * shows the same figures as one run here.
 */
import { SpindleError } from '../base/errors.js'
import type { BudgetAmounts, BudgetUsage, Cost, Ledger, Registry, ThreadRecord, ThreadStatus } from '../../persistence/types.js'

/** A thread's budget: what it may spend, what it and its descendants spent, and what is left. */
export interface BudgetView {
  threadId: string
  /**
   * The thread whose ledger account this is: the thread itself, or the first thread of the
   * continuation chain it belongs to (a continuation spends from its chain's one budget).
   */
  accountId: string
  /** The thread whose budget this one was reserved from; null for a root (its limits are its own). */
  parentId: string | null
  /** The budget: a root's own limits, a child's reservation from its parent. null is unlimited. */
  limit: BudgetAmounts
  spent: {
    /** By the account's thread alone (a continuation chain's threads together). */
    own: BudgetUsage
    /** By it and all its descendants. */
    total: BudgetUsage
  }
  /** Held by its open children: each one's limit less what it has spent. */
  reserved: BudgetUsage
  /** limit − spent.total − reserved per amount (null when unlimited): what it and new children may still use. */
  available: BudgetAmounts
  /** True once the thread ended and what it did not use went back to its parent. */
  released: boolean
}

/** A child as its parent's list shows it. */
export interface ChildSummary {
  id: string
  directiveName: string
  status: ThreadStatus
  /** What it spent so far, itself alone (its own children are in their rows); null before its first reply. */
  cost: Cost | null
  /** The thread this one continues, for a child's continuation; else null. */
  previousThreadId: string | null
  /** ms since epoch */
  createdAt: number
}

function notFound(id: string, dir: string): SpindleError {
  return new SpindleError('THREAD_NOT_FOUND', `No thread ${id} in ${dir}. List threads with rt.list() or \`spindle ls\`.`, { details: { threadId: id } })
}

function tokensOf(cost: Cost | null): number {
  return cost ? cost.inputTokens + cost.outputTokens : 0
}

/**
 * The budget of thread `id`. A thread with no ledger account — an unlimited root that never
 * spawned a child (only limits or children open one) — is unlimited, and has spent what its
 * registry row says, with nothing reserved. THREAD_NOT_FOUND for a thread the registry lacks.
 */
export function budgetOf(stores: { registry: Registry; ledger: Ledger }, dir: string, id: string): BudgetView {
  const record = stores.registry.get(id)
  if (!record) throw notFound(id, dir)
  const chain = stores.registry.chain(id)
  const accountId = stores.ledger.get(id) !== null ? id : (chain[0]?.id ?? id)
  const account = stores.ledger.get(accountId)
  if (!account) {
    const threads = chain.length > 0 ? chain.slice(0, chain.findIndex((r) => r.id === id) + 1) : [record]
    const own = { spend: 0, tokens: 0 }
    for (const r of threads) {
      own.spend += r.cost?.spend ?? 0
      own.tokens += tokensOf(r.cost)
    }
    return {
      threadId: id,
      accountId,
      parentId: null,
      limit: { spend: null, tokens: null },
      spent: { own, total: { ...own } },
      reserved: { spend: 0, tokens: 0 },
      available: { spend: null, tokens: null },
      released: false,
    }
  }
  return {
    threadId: id,
    accountId,
    parentId: account.parentId,
    limit: { ...account.limit },
    spent: { own: { ...account.ownSpent }, total: { ...account.spent } },
    reserved: { ...account.reserved },
    available: { ...account.available },
    released: account.released,
  }
}

/** The direct children of thread `id` (its registry rows' children), in spawn order. THREAD_NOT_FOUND for an unknown thread. */
export function childrenOf(registry: Registry, dir: string, id: string): ChildSummary[] {
  if (!registry.get(id)) throw notFound(id, dir)
  return registry.listChildren(id).map(summaryOf)
}

function summaryOf(r: ThreadRecord): ChildSummary {
  return { id: r.id, directiveName: r.directiveName, status: r.status, cost: r.cost ? { ...r.cost } : null, previousThreadId: r.previousThreadId, createdAt: r.createdAt }
}
