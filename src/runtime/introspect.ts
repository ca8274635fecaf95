/**
 * @internal A look inside a runtime for spindle's own tests and diagnostics: what its parts hold,
 * without reaching into private fields from outside. Not part of the public API.
 */
import type { Runtime } from './api.js'
import type { Parts } from './parts.js'

const registered = new WeakMap<Runtime, Parts>()

export function registerIntrospection(runtime: Runtime, parts: Parts): void {
  registered.set(runtime, parts)
}

export interface Introspection {
  /** The wait-for graph: waiting thread → the threads it still waits for (sorted). */
  waitGraph(): Record<string, string[]>
  /** Resolves once every checkpoint staged so far is durable. */
  whenDurable(): Promise<void>
  /**
   * Every entry that names one of `ids` (as a key, or as a string value) in the Maps, Sets and
   * arrays each part keeps, by `part.field`: what threads that ended left behind.
   */
  retained(ids: readonly string[]): Record<string, string[]>
}

export function introspect(runtime: Runtime): Introspection {
  const parts = registered.get(runtime)
  if (!parts) throw new Error('not a runtime made by createRuntime')
  return {
    waitGraph: () => {
      const graph: Record<string, string[]> = {}
      for (const [id, waits] of parts.waiting.graph()) graph[id] = [...waits].flatMap((w) => [...w.open]).sort()
      return graph
    },
    whenDurable: () => parts.commit.whenDurable(),
    retained: (ids) => {
      const wanted = new Set(ids)
      const held: Record<string, string[]> = {}
      const note = (field: string, id: unknown): void => {
        if (typeof id === 'string' && wanted.has(id)) (held[field] ??= []).push(id)
      }
      for (const [name, part] of Object.entries(parts)) {
        if (!part || typeof part !== 'object' || name === 'stores' || name === 'recovery') continue
        for (const [field, value] of Object.entries(part as Record<string, unknown>)) {
          const at = `${name}.${field}`
          if (value instanceof Map) {
            for (const [key, v] of value) {
              note(at, key)
              note(at, v)
            }
          } else if (value instanceof Set || Array.isArray(value)) {
            for (const v of value) note(at, v)
          }
        }
      }
      return held
    },
  }
}
