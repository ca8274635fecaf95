import { createHash } from 'node:crypto'
import { customAlphabet } from 'nanoid'
import { SpindleError } from './errors.js'

// Lower-case alphanumerics only: ids become directory names on case-insensitive filesystems too.
const suffix = customAlphabet('0123456789abcdefghijklmnopqrstuvwxyz', 12)
const nonceOf = customAlphabet('0123456789abcdefghijklmnopqrstuvwxyz', 24)

/**
 * A thread id is a path component (its folder under threads/): no separators, no dots (so no dot
 * segments, and file names that append `.suffix` to an id parse back), one case (a case-insensitive
 * filesystem would fold two ids into one folder), bounded length. Ids spindle makes and ids a
 * caller chooses (`rt.spawn({ id })`) follow this one rule.
 */
const THREAD_ID = /^[a-z0-9][a-z0-9_-]{0,75}$/

/** A readable prefix from the directive name plus a random suffix, e.g. `research-3f9k2m1x0q7a`. */
export function newThreadId(directiveName: string): string {
  return `${idPrefix(directiveName)}-${suffix()}`
}

function idPrefix(directiveName: string): string {
  return (
    directiveName
      .toLowerCase()
      .replace(/[^a-z0-9_-]+/g, '-')
      .replace(/^[-_]+|[-_]+$/g, '')
      .slice(0, 40) || 'thread'
  )
}

/**
 * The id of a child spawned by a tool call: derived from the call's idempotency key, so the call
 * run again after a crash finds the child it already made instead of making a second one.
 */
export function childThreadId(directiveName: string, idempotencyKey: string): string {
  const digest = createHash('sha256').update(idempotencyKey).digest()
  let tail = ''
  for (let i = 0; i < 12; i++) tail += '0123456789abcdefghijklmnopqrstuvwxyz'[digest[i]! % 36]
  return `${idPrefix(directiveName)}-${tail}`
}

/** A secret stored at spawn; cross-process requests (cancel files) must carry it. */
export function newNonce(): string {
  return nonceOf()
}

/** Throws INVALID_THREAD_ID for anything that is not an id spindle could have made. */
export function assertThreadId(id: unknown): asserts id is string {
  if (typeof id !== 'string' || !THREAD_ID.test(id)) {
    throw new SpindleError(
      'INVALID_THREAD_ID',
      `"${String(id).slice(0, 80)}" is not a valid thread id: ids look like "research-3f9k2m1x0q7a" or "order-1234" ` +
        `(1 to 76 lower-case letters, digits, "-" and "_", starting with a letter or digit; no path separators). Check the id you passed.`,
      { details: { id: String(id).slice(0, 200) } },
    )
  }
}

export function isThreadId(id: unknown): id is string {
  return typeof id === 'string' && THREAD_ID.test(id)
}

/**
 * Throws INVALID_THREAD_ID for an id a caller chose for `rt.spawn({ id })` that cannot be a thread
 * id, saying how to make one of it: it becomes the thread's folder name, so it follows the rule
 * of every thread id.
 */
export function assertCallerId(id: unknown): asserts id is string {
  if (isThreadId(id)) return
  const text = typeof id === 'string' ? JSON.stringify(id.slice(0, 80)) : String(JSON.stringify(id) ?? typeof id).slice(0, 80)
  const hint =
    typeof id !== 'string'
      ? 'Pass a string.'
      : id !== id.toLowerCase() && isThreadId(id.toLowerCase())
        ? `Lower-case it ("${id.toLowerCase()}"): ids are folder names, and a case-insensitive filesystem would take "A" and "a" for one.`
        : 'Keep to those characters: prefix a number, keeping its sign ("chat--100123" for chat -100123), and hash a longer key and use the digest.'
  throw new SpindleError(
    'INVALID_THREAD_ID',
    `spawn: id ${text} cannot be a thread id: an id you choose names the thread's folder, so it is 1 to 76 lower-case letters, digits, "-" and "_", starting with a letter or digit. ${hint}`,
    { details: { field: 'id', id: typeof id === 'string' ? id.slice(0, 200) : String(id) } },
  )
}
