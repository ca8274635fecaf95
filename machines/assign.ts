/**
 * XState's `assign`, building the next context with object spread. Pure.
 *
 * XState builds it with `Object.assign({}, context, update)`; V8 turns an object that gains more
 * than ~19 properties that way into a dictionary (a hash table: several KB per context, slow to read
 * and to copy). A thread's context has 25, and every transition makes a new one. Spread copies the
 * context's hidden class instead and keeps it a plain fast object; the result is the same context.
 *
 * The action is XState's own (same type, same `assignment`); only its `resolve` step differs, and
 * if a future XState resolves assign actions some other way, XState's own step is kept.
 */
import { assign as xstateAssign } from 'xstate'

type Assignment = ((args: Record<string, unknown>, params: unknown) => Record<string, unknown>) | Record<string, unknown>

interface BuiltinAssign {
  assignment: Assignment
  resolve?: unknown
}

function noSpawn(): never {
  throw new Error('spawn is not available in the thread machine’s assign actions')
}

function resolveAssign(
  actorScope: { self: unknown; system: unknown },
  snapshot: { context: Record<string, unknown> | undefined },
  actionArgs: { event: unknown },
  actionParams: unknown,
  { assignment }: BuiltinAssign,
): [unknown, undefined, undefined] {
  const context = snapshot.context
  if (!context) throw new Error('Cannot assign to undefined `context`. Ensure that `context` is defined in the machine config.')
  const args = { context, event: actionArgs.event, spawn: noSpawn, self: actorScope.self, system: actorScope.system }
  let update: Record<string, unknown>
  if (typeof assignment === 'function') update = assignment(args, actionParams)
  else {
    update = {}
    for (const key of Object.keys(assignment)) {
      const value = assignment[key]
      update[key] = typeof value === 'function' ? (value as (a: unknown, p: unknown) => unknown)(args, actionParams) : value
    }
  }
  // The snapshot's other fields (state nodes, value, children, methods) are unchanged by an assign.
  return [{ ...snapshot, context: { ...context, ...update } }, undefined, undefined]
}

export const assign: typeof xstateAssign = ((assignment: Assignment) => {
  const action = (xstateAssign as unknown as (a: Assignment) => BuiltinAssign)(assignment)
  if (typeof action.resolve === 'function') action.resolve = resolveAssign
  return action
}) as unknown as typeof xstateAssign
