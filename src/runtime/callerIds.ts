/**
 * Spawns under an id the caller chose (`rt.spawn({ id })`): idempotent across calls, runtimes and
 * processes on one data directory. The thread of that id is found — made, being made here or in
 * another process, or long finished — or made once; a spawn asking for another directive under it
 * is refused. The lease store decides which of two racing processes makes it, the registry row
 * says it was made.
 */
import { SpindleError, isSpindleError } from '../base/errors.js'
import { assertCallerId } from '../base/ids.js'
import type { ThreadDirective } from '../../machines/threadContext.js'
import type { Registry } from '../../persistence/types.js'
import type { ThreadHandle } from '../thread/threadView.js'
import type { SpawnOptions } from './api.js'
import type { Lifecycle } from './events.js'
import type { Leases } from './leases.js'
import type { Spawner } from './spawner.js'
import type { ThreadTable } from './threadTable.js'

export interface CallerIdDeps {
  table: ThreadTable
  registry: Registry
  leases: Pick<Leases, 'take' | 'release'>
  spawner: Pick<Spawner, 'spawn'>
  life: Pick<Lifecycle, 'assertOpen'>
  /** How long a lease lasts unrenewed (`orphans.thresholdMs`): the longest another process's spawn can hold an id unregistered. */
  leaseTtlMs: number
}

/** What makes two spawns under one id the same spawn: the directive's name, prompt and instructions, and the parent. */
interface SpawnIdentity {
  name: string
  prompt: string
  instructions: string | null
  parentId: string | null
}

/** Another process making the id: looked for again after this long, then longer, up to the cap. */
const FIRST_LOOK_MS = 5
const LOOK_CAP_MS = 100

function identityOf(directive: Partial<Pick<ThreadDirective, 'name' | 'prompt' | 'instructions'>> | null | undefined, parentId: string | null | undefined): SpawnIdentity {
  return {
    name: String(directive?.name ?? ''),
    prompt: String(directive?.prompt ?? ''),
    // Empty instructions are none, as the spawn that records them has it.
    instructions: directive?.instructions ? String(directive.instructions) : null,
    parentId: parentId ?? null,
  }
}

/** The fields in which `found` differs from `wanted`, in a fixed order. */
function differences(found: SpawnIdentity, wanted: SpawnIdentity): Array<keyof SpawnIdentity> {
  return (['name', 'prompt', 'instructions', 'parentId'] as const).filter((key) => found[key] !== wanted[key])
}

function quoted(value: string | null, max = 60): string {
  if (value === null) return 'none'
  return JSON.stringify(value.length > max ? `${value.slice(0, max)}…` : value)
}

export class CallerIds {
  /** Caller-id spawns under way in this runtime, by id: a second one waits for the first. */
  private readonly underWay = new Map<string, Promise<ThreadHandle | null>>()

  constructor(private readonly deps: CallerIdDeps) {}

  /**
   * The thread `id` names: found, or made by this spawn; THREAD_ID_TAKEN for another directive.
   * `handleOf` is what `rt.get(id)` returns: the handle of a thread this runtime does not run.
   */
  async spawn(options: SpawnOptions, id: unknown, handleOf: (id: string) => ThreadHandle, handOff = false): Promise<ThreadHandle> {
    assertCallerId(id)
    const wanted = identityOf(options.directive, options.parentId)
    const deadline = Date.now() + 2 * this.deps.leaseTtlMs
    let pause = FIRST_LOOK_MS
    for (;;) {
      this.deps.life.assertOpen()
      const pending = this.underWay.get(id)
      if (pending) {
        // Its outcome is that caller's; this one looks again once it is settled.
        await pending.then(
          () => undefined,
          () => undefined,
        )
        continue
      }
      const found = this.existing(id, wanted, handleOf)
      if (found) return found
      const making = this.make(id, options, handOff, handleOf)
      this.underWay.set(id, making)
      try {
        const made = await making
        // null: made by another spawn after all, found at the next look.
        if (made) return made
        continue
      } catch (error) {
        if (!isSpindleError(error) || error.code !== 'THREAD_LEASED' || Date.now() > deadline) throw error
      } finally {
        if (this.underWay.get(id) === making) this.underWay.delete(id)
      }
      // Another process holds the id's lease without a registry row: its spawn is under way. It
      // ends in a row (found at the next look), a release, or — killed — a stale lease this
      // process takes over; a lease left unrenewed runs out within the deadline.
      await new Promise((resolve) => setTimeout(resolve, pause))
      pause = Math.min(pause * 2, LOOK_CAP_MS)
    }
  }

  /**
   * The thread `id` names, if it exists (live here, or registered): its handle when it is the
   * spawn asked for, THREAD_ID_TAKEN when it is not. A thread only adopted here, not registered
   * yet, is a spawn under way in this runtime: it is answered as made.
   */
  private existing(id: string, wanted: SpawnIdentity, handleOf: (id: string) => ThreadHandle): ThreadHandle | null {
    const { table, registry } = this.deps
    const live = table.get(id)
    const record = registry.get(id)
    if (!record && (!live || live.stopped)) return null
    const directive = live && !live.stopped ? live.context().directive : (record!.directive as Partial<ThreadDirective> | null)
    const found = identityOf(directive, record ? record.parentId : wanted.parentId)
    const differ = differences(found, wanted)
    if (differ.length > 0) throw this.taken(id, found, wanted, differ)
    return live && !live.stopped ? live : handleOf(id)
  }

  /**
   * Makes the thread, holding its lease from before the registry is read to the end of the
   * spawn: a spawn of another process that registered it and let its lease go (its thread already
   * finished) is found, never made a second time. Resolves null when it was found made.
   */
  private async make(id: string, options: SpawnOptions, handOff: boolean, handleOf: (id: string) => ThreadHandle): Promise<ThreadHandle | null> {
    const { leases, table, registry, spawner } = this.deps
    // THREAD_LEASED: another live process holds it, making it or running it.
    leases.take(id)
    if (registry.get(id)) {
      // Made (and not running: its holder let the lease go, or died): looked up as it is.
      leases.release(id)
      return null
    }
    try {
      const made = await spawner.spawn(options, id, undefined, handOff)
      return handOff ? handleOf(id) : made
    } catch (error) {
      // Refused before the spawn took the lease itself (a bad option): the one taken here goes.
      if (!table.has(id) && !registry.get(id)) leases.release(id)
      throw error
    }
  }

  private taken(id: string, found: SpawnIdentity, wanted: SpawnIdentity, differ: Array<keyof SpawnIdentity>): SpindleError {
    const what = differ
      .map((key) => {
        const label = key === 'parentId' ? 'parent' : `directive ${key}`
        return `its ${label} is ${quoted(found[key])}, not ${quoted(wanted[key])}`
      })
      .join('; ')
    return new SpindleError(
      'THREAD_ID_TAKEN',
      `Thread ${id} already exists for another spawn (${what}). A spawn with an id returns the thread of that id only for the ` +
        `same directive name, prompt and instructions and the same parent: use a new id for a new task, or rt.get("${id}") for this one.`,
      { details: { threadId: id, differ } },
    )
  }
}
