/**
 * Permissions: what a thread may do besides naming its tools. A tool declares the capabilities it
 * needs (`network`, `process`, `fs.write`, `spawn` …); a directive grants or denies them; a call to a
 * tool that needs a capability the thread lacks is refused with PERMISSION_DENIED for the model,
 * and the tool never runs. A child thread never has a capability its parent lacks.
 */
import { z } from 'zod'

/** A capability name: lower-case words joined by `.`, `_` or `-` (`network`, `fs.write`). */
export const CAPABILITY = /^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$/

/**
 * A directive's `permissions`: capability → granted. The key `*` sets the answer for every
 * capability not named (default: granted), so `{ '*': false, network: true }` grants network only.
 */
export const PermissionsSchema = z.record(
  z.string().regex(/^(\*|[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*)$/, 'a capability name (lower-case words joined by ".", "_" or "-") or "*"'),
  z.boolean({ error: 'true (granted) or false (denied)' }),
)

export type Permissions = Readonly<Record<string, boolean>>

/** Whether `permissions` grant `capability`: its own entry, else `*`, else granted. */
export function permits(permissions: Permissions | undefined, capability: string): boolean {
  if (!permissions) return true
  return permissions[capability] ?? permissions['*'] ?? true
}

/** The first capability among `needs` that `permissions` do not grant, or null. */
export function deniedCapability(permissions: Permissions | undefined, needs: readonly string[]): string | null {
  if (!permissions) return null
  for (const capability of needs) if (!permits(permissions, capability)) return capability
  return null
}

/**
 * A child's permissions under its parent's: a capability is granted only when both grant it. The
 * result names every capability either names, and `*` when either sets it, so it reads the same
 * for capabilities neither names.
 */
export function capPermissions(parent: Permissions | undefined, own: Permissions | undefined): Permissions | undefined {
  if (!parent) return own
  if (!own) return parent
  const capped: Record<string, boolean> = {}
  for (const key of new Set([...Object.keys(parent), ...Object.keys(own)])) {
    capped[key] = key === '*' ? (parent['*'] ?? true) && (own['*'] ?? true) : permits(parent, key) && permits(own, key)
  }
  return capped
}

/** `network: false, *: true` — for messages. */
export function describePermissions(permissions: Permissions): string {
  const entries = Object.entries(permissions)
  return entries.length ? entries.map(([k, v]) => `${k}: ${v}`).join(', ') : 'none set'
}
