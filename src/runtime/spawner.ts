/**
 * Spawning: a spawn's directive and options resolved into the thread's policy and limits (capped
 * by its parent's), its lease taken and its budget and spawn slot reserved (write-ahead: a refusal
 * leaves nothing behind), then started. Also `spawn_thread`, whose child's id comes from the call's
 * idempotency key so a re-run finds it, made or still being made.
 */
import { SpindleError } from '../base/errors.js'
import { assertThreadId, childThreadId, newThreadId } from '../base/ids.js'
import { capPermissions, PermissionsSchema } from '../base/permissions.js'
import { mergeConfig } from '../../config/load.js'
import type { Config } from '../../config/schema.js'
import type { Limits, ThreadPolicy } from '../../machines/threadPolicy.js'
import type { TaskInfo, ThreadDirective, ThreadInput } from '../../machines/threadContext.js'
import { isStorageFailure } from '../../persistence/storageFailure.js'
import type { Registry } from '../../persistence/types.js'
import type { z } from 'zod'
import type { SpawnThreadInput } from '../thread/childTools.js'
import type { LiveThread } from '../thread/liveThread.js'
import type { SpawnOptions } from './api.js'
import type { Budgets } from './budgets.js'
import type { Family } from './family.js'
import type { Leases } from './leases.js'
import type { Parking } from './parking.js'
import type { PolicyDesk } from './policyDesk.js'
import { validateLayer } from './settings.js'
import { notCreated } from './threadStarter.js'
import type { ThreadStarter } from './threadStarter.js'
import type { ThreadTable } from './threadTable.js'
import { DEFAULT_MODEL } from './models.js'
import type { Models } from './models.js'
import { outputJsonSchema, zodOutputSchema } from '../../actors/outputSchema.js'
import type { OutputSchemas } from './outputSchemas.js'

export interface SpawnerDeps {
  models: Pick<Models, 'has' | 'names' | 'notFound'>
  dir: string
  config: Config
  toolNames: ReadonlySet<string>
  table: ThreadTable
  registry: Registry
  leases: Pick<Leases, 'take' | 'release'>
  budgets: Pick<Budgets, 'reserve' | 'unreserve'>
  policies: Pick<PolicyDesk, 'withDirective'>
  family: Pick<Family, 'track' | 'underWay'>
  parking: Pick<Parking, 'parkForStorage'>
  starter: ThreadStarter
  outputSchemas: Pick<OutputSchemas, 'remember'>
}

export function validateSpawn(options: SpawnOptions): void {
  const d = options?.directive
  if (!d || typeof d.name !== 'string' || d.name.trim() === '' || typeof d.prompt !== 'string') {
    throw new SpindleError(
      'INVALID_OPTIONS',
      'spawn needs a directive with a non-empty string `name` and a string `prompt`, e.g. { name: "research", prompt: "Find X" }.',
      { details: { field: 'directive' } },
    )
  }
  if (d.instructions !== undefined && typeof d.instructions !== 'string') {
    throw new SpindleError('INVALID_OPTIONS', `directive "${d.name}": instructions must be a string (the system prompt), not ${typeof d.instructions}.`, {
      details: { field: 'directive.instructions' },
    })
  }
}

export class Spawner {
  constructor(private readonly deps: SpawnerDeps) {}

  /** Resolves, reserves and starts a thread; `id` and `task` are set by spawn_thread and recovery attempts. */
  async spawn(options: SpawnOptions, id?: string, task?: TaskInfo, handOff = false): Promise<LiveThread> {
    const { toolNames, table, leases, budgets } = this.deps
    const { name, prompt, instructions, model: directiveModel, tools: allowedTools, permissions: ownPermissions, output, ...directiveLayer } = options.directive
    // Turned into JSON Schema and checked before anything is written: a thread keeps data, not code.
    const outputSchema = output !== undefined ? outputJsonSchema(name, output) : undefined
    if (allowedTools !== undefined) {
      const unknown = allowedTools.filter((tool) => !toolNames.has(tool))
      if (!Array.isArray(allowedTools) || unknown.length > 0) {
        throw new SpindleError(
          'INVALID_OPTIONS',
          `directive "${name}": tools names ${unknown.map((t) => JSON.stringify(t)).join(', ')}, which this runtime does not have (it has ${[...toolNames].join(', ') || 'none'}).`,
          { details: { field: 'directive.tools' } },
        )
      }
    }
    if (ownPermissions !== undefined) {
      const checked = PermissionsSchema.safeParse(ownPermissions)
      if (!checked.success) {
        const issue = checked.error.issues[0]!
        throw new SpindleError('INVALID_OPTIONS', `directive "${name}": permissions${issue.path.length ? `.${issue.path.join('.')}` : ''}: ${issue.message}.`, {
          details: { field: 'directive.permissions' },
        })
      }
    }
    const fromDirective = validateLayer(directiveLayer, `directive "${name}"`)
    const fromSpawn = validateLayer(
      { limits: options.limits, retry: options.retry, escalation: options.escalation, hooks: options.hooks, approvals: options.approvals },
      'spawn',
    )
    const resolved = mergeConfig(this.deps.config, fromDirective, fromSpawn)
    const dataHooks = [...(fromDirective.hooks ?? []), ...(fromSpawn.hooks ?? [])]
    const policy: ThreadPolicy = {
      retry: resolved.retry,
      escalation: resolved.escalation,
      hooks: dataHooks as ThreadPolicy['hooks'],
      approvals: { ...resolved.approvals, tools: [...resolved.approvals.tools] },
      ...(allowedTools !== undefined ? { tools: [...allowedTools] } : {}),
      ...(ownPermissions !== undefined ? { permissions: { ...ownPermissions } } : {}),
      ...(outputSchema !== undefined ? { output: { maxTries: resolved.output.maxTries } } : {}),
      supervision: {
        restart: options.restart ?? resolved.supervision.restart,
        childStrategy: options.childStrategy ?? resolved.supervision.strategy,
      },
    }
    // Compiling now refuses a bad `when` before anything is written.
    const hooks = this.deps.policies.withDirective(name, dataHooks)
    let limits = resolved.limits
    let depth = 0
    let spawns: number | null = null
    if (options.parentId !== undefined) {
      assertThreadId(options.parentId)
      ;({ limits, depth, spawns } = this.capByParent(options.parentId, limits))
      // A child never has a capability its parent lacks.
      const parentPermissions = table.contextOf(options.parentId)?.policy.permissions
      const capped = capPermissions(parentPermissions, policy.permissions)
      if (capped) policy.permissions = { ...capped }
    }
    const model = this.modelOf(options.model ?? directiveModel, options.parentId)
    // Empty instructions are none: the model is sent no system message at all.
    const directive: ThreadDirective = {
      name,
      prompt,
      ...(instructions ? { instructions } : {}),
      ...(model !== DEFAULT_MODEL ? { model } : {}),
      ...(outputSchema !== undefined ? { output: outputSchema } : {}),
    }
    const threadId = id ?? newThreadId(directive.name)
    // Before its lease is taken (renewed, were it this process's): nothing of a live thread is touched.
    table.assertVacant(threadId)
    // The lease comes first: a runtime opening the directory drops a reservation that has neither
    // a registry row nor a live lease (a spawn killed before it returned), so this one must never
    // be without both.
    try {
      // An id made up here is new to every process; one given (a child's, from its call) may not be.
      leases.take(threadId, id === undefined)
    } catch (error) {
      throw isStorageFailure(error) ? notCreated(threadId, error) : error
    }
    // Write-ahead: the budget and the spawn slot are reserved before anything of the thread
    // exists; a refusal (BUDGET_EXCEEDED, SPAWN_REFUSED) leaves nothing behind.
    const explicit = (key: 'spend' | 'tokens'): boolean => fromSpawn.limits?.[key] !== undefined || fromDirective.limits?.[key] !== undefined
    let reservation
    try {
      reservation = budgets.reserve(threadId, options.parentId ?? null, limits, { spend: explicit('spend'), tokens: explicit('tokens') }, spawns)
    } catch (error) {
      leases.release(threadId)
      throw isStorageFailure(error) ? notCreated(threadId, error) : error
    }
    const input: ThreadInput = { threadId, directive, limits: reservation.limits, policy, depth, ...(task ? { task } : {}) }
    // Before it starts: its first answer may come before this returns.
    const zod = zodOutputSchema(output)
    if (zod) this.deps.outputSchemas.remember(threadId, zod)
    try {
      return await this.deps.starter.start({ input, hooks, parentId: options.parentId ?? null, previousThreadId: null, messages: null, fresh: id === undefined, ...(handOff ? { handOff } : {}) })
    } catch (error) {
      // Its budget and slot go back once, and only if this spawn took them: an account it found
      // is another spawn's.
      if (reservation.opened) budgets.unreserve(threadId)
      // Failed before its actor was adopted (its spawn entry could not be written): nothing else
      // gives its lease up.
      if (!table.has(threadId)) leases.release(threadId)
      throw isStorageFailure(error) ? notCreated(threadId, error) : error
    }
  }

  /** `spawn_thread`: a child whose id comes from the call's idempotency key, so a re-run finds it. */
  async spawnChild(
    parentId: string,
    key: string,
    spec: z.infer<typeof SpawnThreadInput>,
  ): Promise<{ threadId: string; status: string; limits: unknown; existing: boolean }> {
    const { table, registry, family } = this.deps
    const id = childThreadId(spec.name, key)
    // The same call run again — its parent restarted by its supervisor while the call ran, say —
    // finds the child the first run is making, or made, instead of starting it a second time.
    const underWay = family.underWay(id)
    if (underWay) {
      const thread = await underWay
      return { threadId: id, status: thread.status, limits: thread.context().limits, existing: true }
    }
    const live = table.get(id)
    if (live && !live.stopped) return { threadId: id, status: live.status, limits: live.context().limits, existing: true }
    const existing = registry.get(id)
    if (existing) {
      const limits = table.contextOf(id)?.limits ?? null
      return { threadId: id, status: existing.status, limits, existing: true }
    }
    // A child may use no tool its parent may not.
    const parentTools = table.get(parentId)?.context().policy.tools
    const spawning = this.spawn(
      {
        // Its own instructions or none: a parent's are about the parent's job, not the child's.
        directive: {
          name: spec.name,
          prompt: spec.prompt,
          ...(spec.instructions ? { instructions: spec.instructions } : {}),
          ...(parentTools ? { tools: parentTools } : {}),
        },
        ...(spec.limits ? { limits: spec.limits } : {}),
        ...(spec.model ? { model: spec.model } : {}),
        parentId,
      },
      id,
    ).catch((error: unknown) => {
      // The child could not be made durable for want of storage: not the model's to handle (an
      // error result would cost it a turn, and be as hard to record). The parent is parked, which
      // stops this call before its result is delivered; carried on, it runs spawn_thread again.
      this.deps.parking.parkForStorage(parentId, error)
      throw error
    })
    // A cancel of the parent that arrives now must wait for this child: it is not registered yet.
    const thread = await family.track(parentId, id, spawning)
    return { threadId: id, status: thread.status, limits: thread.context().limits, existing: false }
  }

  /** The model a new thread runs on: the one named, else its parent's, else `default`; refused unless the runtime has it. */
  private modelOf(named: unknown, parentId: string | undefined): string {
    if (named !== undefined && typeof named !== 'string') {
      throw new SpindleError('INVALID_OPTIONS', `model must be the name of one of the runtime's models (${this.deps.models.names().join(', ')}), not ${typeof named}.`, {
        details: { field: 'model' },
      })
    }
    const model = named ?? (parentId !== undefined ? this.deps.table.contextOf(parentId)?.directive.model : undefined) ?? DEFAULT_MODEL
    if (!this.deps.models.has(model)) throw this.deps.models.notFound(model)
    return model
  }

  /**
   * A child's limits: each the min of its own and its parent's; depth one less. `spawns` is the
   * parent's limit, which the ledger counts its children against when it reserves the child's budget.
   */
  private capByParent(parentId: string, own: Limits): { limits: Limits; depth: number; spawns: number | null } {
    const { registry, table, dir } = this.deps
    const record = registry.get(parentId)
    if (!record) {
      throw new SpindleError('THREAD_NOT_FOUND', `Parent thread ${parentId} is not in ${dir}.`, { details: { threadId: parentId } })
    }
    const parent = table.contextOf(parentId)
    if (!parent) {
      throw new SpindleError('SPAWN_REFUSED', `Parent thread ${parentId} has no readable state; a child cannot be capped by it.`, {
        details: { threadId: parentId },
      })
    }
    const min = (a: number | null, b: number | null): number | null => (a === null ? b : b === null ? a : Math.min(a, b))
    const limits = { ...own }
    for (const key of ['turns', 'tokens', 'spend', 'durationMs', 'spawns'] as const) limits[key] = min(own[key], parent.limits[key])
    const parentDepth = parent.limits.depth
    if (parentDepth !== null) {
      const remaining = parentDepth - 1
      if (remaining < 0) {
        throw new SpindleError('SPAWN_REFUSED', `Thread ${parentId} may not start children: its depth limit is ${parentDepth}.`, {
          details: { threadId: parentId, limit: 'depth' },
        })
      }
      limits.depth = min(own.depth, remaining)
    }
    return { limits, depth: parent.depth + 1, spawns: parent.limits.spawns }
  }
}
