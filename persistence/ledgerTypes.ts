/**
 * The hierarchical budget ledger's contract: accounts, reservations and spawn slots of a thread
 * tree, kept in one transaction per change. Re-exported by types.ts with the other store contracts.
 */

/** Amounts a budget is kept in. null is unlimited. */
export interface BudgetAmounts {
  /** US dollars */
  spend: number | null
  tokens: number | null
}

/** Actual usage, always finite. */
export interface BudgetUsage {
  spend: number
  tokens: number
}

/** One thread's account in the budget ledger. */
export interface LedgerAccount {
  threadId: string
  /** null for a root account. */
  parentId: string | null
  /** The account's budget: a root's own spend/token limit, a child's reservation. */
  limit: BudgetAmounts
  /** Actual usage of this thread and all its descendants. */
  spent: BudgetUsage
  /** Usage of this thread alone. */
  ownSpent: BudgetUsage
  /**
   * Outstanding reservations of open children: for each, its limit minus what it has spent
   * (never below 0). A released child counts only what its own open descendants still hold
   * (at most its unspent limit); its spend stays in `spent`.
   */
  reserved: BudgetUsage
  /** limit − spent − reserved per amount (null when unlimited). What a new child may still reserve. */
  available: BudgetAmounts
  /** True once released (the thread ended): it holds from its parent only what its open descendants hold. */
  released: boolean
  /** ms since epoch */
  createdAt: number
  updatedAt: number
}

/**
 * One account as the ledger stores it, before any balance is worked out from it: what `accounts`
 * reads and `restore` writes (a copy of a ledger on another backend, `spindle migrate`).
 */
export interface StoredAccount {
  threadId: string
  parentId: string | null
  limit: BudgetAmounts
  /** Usage of this thread alone. */
  ownSpent: BudgetUsage
  /** Usage of this thread and all its descendants. */
  spent: BudgetUsage
  released: boolean
  createdAt: number
  updatedAt: number
}

/**
 * A spawn slot asked for with a child's reservation: the parent's `spawns` limit, and the children
 * it started that the ledger may hold no account of (registered before the ledger kept them, or
 * after ledger.db was lost). A child's account is its slot: it counts from the reservation until
 * `dropUnborn` deletes it (released, the thread is still a child its parent started).
 */
export interface SpawnSlot {
  /** The most children the parent may have started. */
  max: number
  /** Ids of children the parent started, counted with its accounts' children, each once. */
  known: readonly string[]
}

/** A ledger inconsistency `check()` found (for `spindle doctor`). */
export interface LedgerProblem {
  threadId: string
  kind: 'spent_mismatch' | 'orphan_account'
  message: string
}

/**
 * Hierarchical budgets over a thread tree. Every operation is one SQLite transaction taken with
 * BEGIN IMMEDIATE, so concurrent reservations — from this process or another one on the same
 * data directory — can never oversubscribe a parent.
 */
export interface Ledger {
  /** Opens a root account (a thread without a parent). Idempotent: a second call returns the existing account. */
  openRoot(threadId: string, limit: BudgetAmounts, at: number): LedgerAccount
  /**
   * Reserves `request` for `childId` from `parentId`'s available amount and opens the child's
   * account with `limit = request` (a null amount asks for "whatever the parent has left",
   * which is null only when the parent is unlimited in it). Throws SpindleError BUDGET_EXCEEDED
   * (details: parentId, amount: 'spend'|'tokens', requested, available) when the parent cannot
   * cover it; nothing is written then. Idempotent for the same childId (returns the existing account).
   * Throws THREAD_NOT_FOUND when the parent has no account.
   *
   * With `slot`, the reservation also takes one of the parent's spawn slots, in the same
   * transaction: when the parent's children (its accounts' children, released or not, with
   * `slot.known`, each once) are `slot.max` or more, it throws SpindleError SPAWN_REFUSED
   * (details: threadId: parentId, limit: 'spawns', started, max) before the budget is looked at,
   * and nothing is written. So concurrent spawns, from any number of processes, never start more
   * children than the limit. A child reserved again keeps the slot it holds (no check).
   */
  reserve(childId: string, parentId: string, request: BudgetAmounts, at: number, slot?: SpawnSlot): LedgerAccount
  /** Adds actual usage to `threadId`'s account and to every ancestor's `spent`. */
  record(threadId: string, delta: BudgetUsage, at: number): void
  /** The thread ended: its outstanding reservation returns to its parent. Idempotent. */
  release(threadId: string, at: number): void
  /** Raises an account's limit (an approved escalation). A child's raise is reserved from its parent; BUDGET_EXCEEDED otherwise. */
  raise(threadId: string, limit: Partial<BudgetAmounts>, at: number): LedgerAccount
  get(threadId: string): LedgerAccount | null
  /** The accounts of `threadId`'s children. */
  children(threadId: string): LedgerAccount[]
  /** Recomputes every balance from the raw rows and lists what does not add up. */
  check(): LedgerProblem[]
  /** Accounts that are not released, have nothing spent (by them or below them) and no children. */
  untouched(): string[]
  /**
   * Deletes the account of a thread that never came to exist — a spawn killed between its
   * reservation and its registry row, or one that failed — so its reservation returns to its
   * parent, with its spawn slot. Only an account
   * that is not released, has nothing spent and no children is deleted; returns whether it was.
   */
  dropUnborn(threadId: string): boolean
  /**
   * Every account as stored, in the order the accounts were opened (the order reservations are
   * summed in, so a copy restored in it adds the same floats).
   */
  accounts(): StoredAccount[]
  /**
   * Writes accounts as another ledger's `accounts()` read them, in their order, in one transaction,
   * without checking a balance: a copy, not a reservation. An account of a thread that has one
   * already is left as it is.
   */
  restore(accounts: readonly StoredAccount[]): void
  close(): void
}
