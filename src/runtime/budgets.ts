/**
 * Budgets across a thread tree, kept in the ledger: a root's account opens with its spend and
 * token limits, a child's budget is reserved from its parent's remainder, usage is recorded as
 * replies arrive, and a thread's reservation returns to its parent when it ends. A continuation
 * spends from its chain's first account.
 *
 * A child's account is also its slot under its parent's `spawns` limit: the ledger counts and takes
 * it in the transaction that reserves the budget, the one place every spawn passes through before
 * anything of the child exists, serialized across processes. So a continuation chain's children
 * share its limit, as they share its account: a continuation carries its predecessor's usage and
 * limits on, and its predecessors' children are its own.
 */
import type { Clock } from '../base/clock.js'
import { isSpindleError } from '../base/errors.js'
import type { Config } from '../../config/schema.js'
import type { Limits } from '../../machines/threadPolicy.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { spawnsRefused } from '../../persistence/ledgerBalance.js'
import { isStorageFailure } from '../../persistence/storageFailure.js'
import type { BudgetAmounts, LeaseStore, Ledger, Registry, SpawnSlot } from '../../persistence/types.js'
import type { Reporter } from './events.js'
import type { Leases } from './leases.js'
import type { ThreadTable } from './threadTable.js'

export interface BudgetDeps {
  ledger: Ledger
  registry: Registry
  table: ThreadTable
  leases: Pick<Leases, 'isStale'>
  leaseStore: Pick<LeaseStore, 'get'>
  clock: Clock
  config: Config
  bus: Reporter
}

export type BudgetHit = { amount: 'spend' | 'tokens'; used: number; max: number }

/** A spawn's reservation: the limits the thread runs under, and whether its account was opened by this call. */
export interface Reservation {
  limits: Limits
  /** False when the account existed already (a thread spawned again under the same id): it is not this spawn's to give back. */
  opened: boolean
}

/** How often ledger writes that failed for want of the store are tried again. */
const OWED_RETRY_MS = 1_000

function refusedForSpawns(error: unknown): boolean {
  return isSpindleError(error) && error.code === 'SPAWN_REFUSED' && error.details.limit === 'spawns'
}

export class Budgets {
  /** Ledger keys known to have (or not have) an account: most threads never touch the ledger. */
  private readonly accountKnown = new Map<string, boolean>()
  /** Turns whose usage the ledger has, per thread: usage changes only with a reply. */
  private readonly recordedTurns = new Map<string, number>()
  /** Thread id → the ledger account it spends from: the first thread of its continuation chain. */
  private readonly keys = new Map<string, string>()
  /** Ledger writes owed, per thread: its usage not yet recorded, its release not yet made (see `owe`). */
  private readonly owed = new Map<string, { continuation: boolean; usage: ThreadContext['usage'] | null; release: boolean }>()
  private owedTimer: unknown = null
  /** `payOwed` is trying again: what fails again was told already. */
  private paying = false
  private closed = false

  constructor(private readonly deps: BudgetDeps) {}

  /** The ledger account thread `id` spends from: its continuation chain's first thread. */
  keyOf(id: string, continuation = true): string {
    const cached = this.keys.get(id)
    if (cached) return cached
    let key = id
    try {
      // Most threads have their own account; only a continuation looks up its chain (a live
      // thread says whether it is one: no statement for the rest).
      const live = this.deps.table.contextOf(id)
      const continues = live === null || Boolean(live.previousThreadId)
      if (continuation && continues && !this.hasAccount(id)) key = this.deps.registry.chain(id)[0]?.id ?? id
    } catch (error) {
      this.deps.bus.report(error, id)
    }
    this.keys.set(id, key)
    return key
  }

  /** A successor spends from the same account as the thread it continues. */
  continueAccount(nextId: string, fromId: string): void {
    this.keys.set(nextId, this.keyOf(fromId))
  }

  private hasAccount(key: string): boolean {
    let known = this.accountKnown.get(key)
    if (known === undefined) {
      known = this.deps.ledger.get(key) !== null
      this.accountKnown.set(key, known)
    }
    return known
  }

  /**
   * Opens a root's account, or reserves a child's budget from its parent's remainder: the child's
   * own spend and token limits when it names them, else `children.budgetShare` of what the parent
   * has left. A child also takes one of its parent's `spawns` slots (null: unlimited), or is
   * refused SPAWN_REFUSED. Returns the limits the thread runs under (a child's are its reservation).
   */
  reserve(id: string, parentId: string | null, limits: Limits, explicit: { spend: boolean; tokens: boolean }, spawns: number | null = null): Reservation {
    const { ledger, clock, table } = this.deps
    const at = clock.now()
    if (parentId === null) {
      // An unlimited root needs no account until it has children (they open it then).
      if (limits.spend !== null || limits.tokens !== null) {
        // The spawner holds the new thread's lease by now: no other process reserves under this id.
        const opened = ledger.get(id) === null
        ledger.openRoot(id, { spend: limits.spend, tokens: limits.tokens }, at)
        this.accountKnown.set(id, true)
        return { limits, opened }
      }
      this.accountKnown.set(id, false)
      return { limits, opened: false }
    }
    const parentKey = this.keyOf(parentId)
    let parent = ledger.get(parentKey)
    if (!parent) {
      // A parent from before the ledger (or whose account was lost): its limits open one now.
      const ctx = table.contextOf(parentId)
      parent = ledger.openRoot(parentKey, { spend: ctx?.limits.spend ?? null, tokens: ctx?.limits.tokens ?? null }, at)
      this.accountKnown.set(parentKey, true)
    }
    const share = this.deps.config.children.budgetShare
    const ask = (key: 'spend' | 'tokens'): number | null => {
      if (explicit[key]) return limits[key]
      const available = parent!.available[key]
      if (available === null) return limits[key]
      const part = available * share
      return key === 'tokens' ? Math.floor(part) : part
    }
    const request = { spend: ask('spend'), tokens: ask('tokens') }
    const slot: SpawnSlot | undefined = spawns === null ? undefined : { max: spawns, known: this.startedChildren(parentId) }
    const opened = ledger.get(id) === null
    let account
    try {
      account = ledger.reserve(id, parentKey, request, at, slot)
    } catch (error) {
      if (!refusedForSpawns(error)) throw error
      // A spawn killed half way, in a process that is gone, holds a slot no one will give back:
      // freed here, where it is in the way, rather than only when a runtime next opens.
      if (!this.dropUnbornChildren(parentKey)) throw this.refusalOf(parentId, error)
      try {
        account = ledger.reserve(id, parentKey, request, at, slot)
      } catch (again) {
        throw refusedForSpawns(again) ? this.refusalOf(parentId, again) : again
      }
    }
    this.keys.set(id, id)
    this.accountKnown.set(id, true)
    return { limits: { ...limits, spend: account.limit.spend, tokens: account.limit.tokens }, opened }
  }

  /**
   * Gives back what `reserve` opened for a spawn that failed before its thread came to exist (its
   * first entry or registry row could not be written): its budget and its spawn slot. Call it once,
   * and only with an account the spawn opened (`Reservation.opened`).
   */
  unreserve(id: string): void {
    const { ledger, registry, clock } = this.deps
    this.recordedTurns.delete(id)
    this.keys.delete(id)
    try {
      // Registered after all (a round that failed after the registry committed): a thread that
      // exists keeps its slot; only its reservation returns.
      if (registry.get(id) || !ledger.dropUnborn(id)) ledger.release(id, clock.now())
      else this.accountKnown.delete(id)
    } catch (error) {
      this.deps.bus.report(error, id)
    }
  }

  /**
   * The children `parentId`'s continuation chain registered (the ledger's count of them may lack
   * those from before it kept accounts): each spawned, not a continuation of one.
   */
  private startedChildren(parentId: string): string[] {
    const { registry } = this.deps
    const chain = registry.chain(parentId).map((r) => r.id)
    return (chain.length > 0 ? chain : [parentId]).flatMap((t) => registry.listChildren(t)).filter((c) => !c.previousThreadId).map((c) => c.id)
  }

  /** SPAWN_REFUSED naming the thread that spawned, not the chain head whose account it counts on. */
  private refusalOf(parentId: string, error: unknown): unknown {
    const details = (error as { details: { threadId?: unknown; started?: unknown; max?: unknown } }).details
    if (details.threadId === parentId) return error
    return spawnsRefused(parentId, Number(details.started), Number(details.max))
  }

  /** Whether `id`'s account is a spawn that never returned: not live here, not registered, its lease stale or gone. */
  private unborn(id: string, now: number): boolean {
    const { table, registry, leases } = this.deps
    if (table.has(id) || registry.get(id)) return false
    const lease = this.deps.leaseStore.get(id)
    return !lease || leases.isStale(lease, now)
  }

  /** Drops the unborn accounts among `parentKey`'s children; whether any was dropped. */
  private dropUnbornChildren(parentKey: string): boolean {
    const { ledger } = this.deps
    let dropped = false
    const now = Date.now()
    for (const child of ledger.children(parentKey)) {
      if (child.released || child.spent.spend !== 0 || child.spent.tokens !== 0) continue
      if (this.unborn(child.threadId, now) && ledger.dropUnborn(child.threadId)) {
        this.accountKnown.delete(child.threadId)
        dropped = true
      }
    }
    return dropped
  }

  /**
   * Returns to their parents the budgets of spawns that never returned: a process killed between
   * a child's reservation (write-ahead) and its registry row left an account no thread will ever
   * release. An account still being spawned by a live process (its lease is live) is left alone.
   */
  dropUnborn(): void {
    const { ledger } = this.deps
    try {
      const now = Date.now()
      for (const id of ledger.untouched()) {
        if (this.unborn(id, now) && ledger.dropUnborn(id)) this.accountKnown.delete(id)
      }
    } catch (error) {
      this.deps.bus.report(error)
    }
  }

  /** Raises the ledger account with new spend or token limits; `onRefusal` runs before a refusal is thrown. */
  raise(id: string, limits: Partial<Limits>, onRefusal?: () => void): void {
    const raise: Partial<BudgetAmounts> = {}
    if (limits.spend !== undefined) raise.spend = limits.spend
    if (limits.tokens !== undefined) raise.tokens = limits.tokens
    if (Object.keys(raise).length === 0) return
    try {
      if (this.hasAccount(this.keyOf(id))) this.deps.ledger.raise(this.keyOf(id), raise, this.deps.clock.now())
    } catch (error) {
      onRefusal?.()
      throw error
    }
  }

  /** The thread ended: its outstanding reservation returns to its parent. */
  release(id: string, continuation = true): void {
    this.recordedTurns.delete(id)
    // Not before what it spent is in: the reservation would return whole.
    if (this.owed.get(id)?.usage) return this.owe(id, continuation, { release: true })
    try {
      const key = this.keyOf(id, continuation)
      if (this.hasAccount(key)) this.deps.ledger.release(key, this.deps.clock.now())
    } catch (error) {
      if (!this.paying) this.deps.bus.report(error, id)
      if (isStorageFailure(error)) this.owe(id, continuation, { release: true })
    }
  }

  /**
   * A ledger write of the thread failed because the store did not answer (a database restarting):
   * it is tried again every OWED_RETRY_MS until it is in, so the ledger does not keep for good
   * less than a thread spent, or a reservation it gave back. Nothing else writes it again: the
   * thread's usage is recorded with each reply, and it ends once.
   */
  private owe(id: string, continuation: boolean, what: { usage?: ThreadContext['usage']; release?: boolean }): void {
    if (this.closed) return
    const owed = this.owed.get(id)
    this.owed.set(id, { continuation, usage: what.usage ?? owed?.usage ?? null, release: what.release === true || owed?.release === true })
    if (this.owedTimer !== null) return
    const timer = this.deps.clock.setTimeout(() => this.payOwed(), OWED_RETRY_MS) as { unref?: () => void }
    // A host whose threads all ended is not kept alive by a database that stays away.
    timer.unref?.()
    this.owedTimer = timer
  }

  private payOwed(): void {
    this.owedTimer = null
    const owed = [...this.owed]
    this.owed.clear()
    this.paying = true
    try {
      for (const [id, { continuation, usage, release }] of owed) {
        if (usage) this.recordUsage(id, usage, continuation)
        if (release) this.release(id, continuation)
      }
    } finally {
      this.paying = false
    }
  }

  /** The runtime closes: what is owed is tried once more, and not again here. */
  close(): void {
    if (this.owedTimer !== null) this.deps.clock.clearTimeout(this.owedTimer)
    this.owedTimer = null
    this.closed = true
    this.payOwed()
  }

  /**
   * Brings the ledger up to the thread's recorded usage. The delta is computed from the ledger
   * itself, so running it twice (or after a crash between the transcript and the ledger) counts
   * nothing twice and loses nothing.
   */
  recordUsage(id: string, usage: ThreadContext['usage'], continuation = true): void {
    if (this.recordedTurns.get(id) === usage.turns) return
    // Nothing spent yet (a thread recovered before its first reply): nothing the ledger could lack,
    // and no need to look its account up.
    if (usage.spend === 0 && usage.inputTokens === 0 && usage.outputTokens === 0) return
    try {
      const key = this.keyOf(id, continuation)
      if (!this.hasAccount(key)) return
      const account = this.deps.ledger.get(key)
      if (account) {
        const spend = usage.spend - account.ownSpent.spend
        const tokens = usage.inputTokens + usage.outputTokens - account.ownSpent.tokens
        if (spend > 1e-12 || tokens > 0) this.deps.ledger.record(key, { spend: Math.max(0, spend), tokens: Math.max(0, tokens) }, this.deps.clock.now())
      }
      // Only once it is in: a usage the ledger did not take is written again (see `owe`).
      this.recordedTurns.set(id, usage.turns)
      const owed = this.owed.get(id)
      if (owed) owed.usage = null
    } catch (error) {
      if (!this.paying) this.deps.bus.report(error, id)
      if (isStorageFailure(error)) this.owe(id, continuation, { usage })
    }
  }

  /** The tree's budget, checked before each model call: a thread whose share is gone suspends. */
  exhausted(id: string): BudgetHit | null {
    let account
    try {
      const key = this.keyOf(id)
      if (!this.hasAccount(key)) return null
      account = this.deps.ledger.get(key)
    } catch (error) {
      this.deps.bus.report(error, id)
      return null
    }
    if (!account) return null
    for (const amount of ['spend', 'tokens'] as const) {
      const max = account.limit[amount]
      const available = account.available[amount]
      if (max !== null && available !== null && available <= 1e-9) {
        return { amount, used: account.spent[amount] + account.reserved[amount], max }
      }
    }
    return null
  }

  /**
   * Forgets the ledger caches of a thread that is no longer live here (rebuilt from the stores if
   * it is loaded again), and the account key it spent from when that is another thread's — a
   * continuation's chain head, stopped before it — so a host running for months holds nothing for
   * threads that ended.
   */
  forget(id: string): void {
    const key = this.keys.get(id)
    this.keys.delete(id)
    this.accountKnown.delete(id)
    this.recordedTurns.delete(id)
    if (key !== undefined && key !== id && !this.deps.table.has(key)) this.accountKnown.delete(key)
  }
}
