/**
 * Compiling a hook's `when` into a condition (`compileCondition`), once, when the hooks are
 * compiled; apart from the hook table (hooks.ts), which only runs what this returns.
 *
 * Conditions are CEL (Common Expression Language), evaluated by @marcbachmann/cel-js: no I/O, no
 * loops, no user code. The only code that runs is a handler passed in code on purpose. Every
 * expression is parsed and type-checked against the declared variables when the hooks are
 * compiled, so a typo fails at start-up, not at 3 a.m. on the first rate limit. Also refused
 * then, because one such condition would stall the whole process at every event (checkSyntax):
 * more than MAX_WHEN_LENGTH characters or MAX_WHEN_DEPTH levels of nesting, a loop macro inside
 * another, and `matches` with a pattern that is not a string literal or can backtrack
 * exponentially.
 */
import { createRequire } from 'node:module'
import type { Environment, ObjectSchema } from '@marcbachmann/cel-js'
import { regexCompileError, regexHazard } from '../../config/schema.js'
import { describeError } from '../base/errors.js'
import type { Kind, Shape } from './hookInput.js'
import { HOOK_VARIABLES, VARIABLE_NAMES } from './hookInput.js'

/** CEL schema of a shape; a nullable field is `dyn` (it holds a value of its type or null). */
function celSchema(shape: Shape): ObjectSchema {
  const schema: ObjectSchema = {}
  for (const [field, kind] of Object.entries(shape)) {
    schema[field] = typeof kind === 'object' ? celSchema(kind) : kind === 'int' || kind === 'double' || kind === 'string' ? kind : 'dyn'
  }
  return schema
}

/** Integers compare equal to doubles of the same value (CEL's checker refuses `int == double` otherwise). */
function intEqualsDouble(int: bigint, double: number): boolean {
  return Number.isInteger(double) && BigInt(double) === int
}

// Creating an environment is the expensive part: once per process, and only in a process that
// compiles a condition (cel-js and its environment cost ~40 ms and several MB; most runtimes have
// no `when`). Parsing against it is cheap. require: compileHooks is synchronous.
let celEnvironment: Environment | null = null
function environment(): Environment {
  celEnvironment ??= newEnvironment()
  return celEnvironment
}

function newEnvironment(): Environment {
  const { Environment } = createRequire(import.meta.url)('@marcbachmann/cel-js') as typeof import('@marcbachmann/cel-js')
  const env = new Environment()
  for (const name of VARIABLE_NAMES) {
    env.registerVariable({ name, schema: celSchema(HOOK_VARIABLES[name]) })
  }
  // Also registers `double == int` and both `!=`.
  env.registerOperator('int == double', (left: bigint, right: number) => intEqualsDouble(left, right))
  return env
}

export type Condition = (context: Record<string, unknown>) => unknown

interface CelErrorLike {
  summary?: unknown
  message?: unknown
  code?: unknown
  range?: { start?: unknown; end?: unknown }
}

/** "line 2, column 5" or "column 5", from a 0-based offset into the expression. */
function position(expression: string, offset: number): string {
  const before = expression.slice(0, offset)
  const lineStart = before.lastIndexOf('\n') + 1
  const column = offset - lineStart + 1
  return expression.includes('\n') ? `line ${before.split('\n').length}, column ${column}` : `column ${column}`
}

/** The library's error as one line, with its position, and its source excerpt (a caret under the spot). */
export function describeCelError(error: unknown, expression: string): { text: string; excerpt: string; start?: number; end?: number; celCode?: string } {
  const e = (typeof error === 'object' && error !== null ? error : {}) as CelErrorLike
  const message = typeof e.message === 'string' ? e.message : describeError(error).message
  const summary = typeof e.summary === 'string' ? e.summary : (message.split('\n')[0] ?? message)
  const start = typeof e.range?.start === 'number' ? e.range.start : undefined
  const end = typeof e.range?.end === 'number' ? e.range.end : undefined
  const excerpt = message.includes('\n') ? message.slice(message.indexOf('\n')).replace(/^\n+/, '') : ''
  return {
    text: start !== undefined ? `${summary} (at ${position(expression, start)})` : summary,
    excerpt,
    ...(start !== undefined ? { start } : {}),
    ...(end !== undefined ? { end } : {}),
    ...(typeof e.code === 'string' ? { celCode: e.code } : {}),
  }
}

/** For an unknown variable or field: what there is instead. */
function hint(celCode: string | undefined, expression: string, start: number | undefined): string {
  if (celCode === 'unknown_variable') return ` Known variables: ${VARIABLE_NAMES.join(', ')}.`
  if (celCode === 'no_such_key' && start !== undefined) {
    // The dotted path right before the key, e.g. "thread.cost." before "spnd".
    const path = /([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\.\s*$/.exec(expression.slice(0, start))?.[1]
    let shape: Kind | Shape | undefined = HOOK_VARIABLES
    for (const part of path?.split('.') ?? []) shape = typeof shape === 'object' ? shape[part.trim()] : undefined
    if (path && typeof shape === 'object') return ` ${path.replace(/\s+/g, '')} has: ${Object.keys(shape).join(', ')}.`
  }
  return ''
}

export class HookCompileError extends Error {
  constructor(
    readonly what: string,
    readonly extra: Record<string, unknown> = {},
    /** Set when what is wrong is the `when` expression. */
    readonly expression?: string,
  ) {
    super(what)
  }
}

/** Longest `when` accepted: a condition is a line or two; a longer one is a mistake or an attack. */
export const MAX_WHEN_LENGTH = 4096
/** Deepest nesting of a `when` (operators inside operators); deeper could overflow the stack. */
export const MAX_WHEN_DEPTH = 64

/** Macros that loop over a list or map. */
const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'map', 'filter'])

/** The expression as the library shows it in errors, shortened. */
function excerptOf(node: { start?: unknown; end?: unknown }, expression: string): string {
  const start = typeof node.start === 'number' ? node.start : 0
  const end = typeof node.end === 'number' ? node.end : start
  const text = expression.slice(start, end)
  return text.length > 60 ? `${text.slice(0, 57)}...` : text
}

/**
 * What a condition may not do although CEL allows it, checked on its syntax tree (iteratively:
 * the tree may be deep). Each would let one hook stall the whole process at every event:
 * - nesting deeper than MAX_WHEN_DEPTH;
 * - a loop macro (all, exists, map …) inside another: 1000 × 1000 × 1000 steps is minutes;
 * - `matches` with a pattern that is not a string literal (it could not be checked here), or
 *   one that can backtrack exponentially (`(a+)+`) on an error message a provider sent.
 */
function checkSyntax(ast: unknown, expression: string): void {
  type Node = { op?: unknown; args?: unknown; start?: unknown; end?: unknown }
  const stack: Array<{ node: unknown; depth: number; loops: number }> = [{ node: ast, depth: 0, loops: 0 }]
  while (stack.length > 0) {
    const { node, depth, loops } = stack.pop()!
    if (Array.isArray(node)) {
      for (const child of node) stack.push({ node: child, depth, loops })
      continue
    }
    if (typeof node !== 'object' || node === null || typeof (node as Node).op !== 'string') continue
    const { op, args } = node as Node
    const at = typeof (node as Node).start === 'number' ? ` (at ${position(expression, (node as Node).start as number)})` : ''
    if (depth > MAX_WHEN_DEPTH) {
      throw new HookCompileError(`is nested more than ${MAX_WHEN_DEPTH} levels deep${at}: write a flatter condition.`, {}, expression)
    }
    let childLoops = loops
    if ((op === 'rcall' || op === 'call') && Array.isArray(args)) {
      const name = args[0]
      const callArgs = (op === 'rcall' ? args[2] : args[1]) as unknown
      if (typeof name === 'string' && COMPREHENSIONS.has(name) && op === 'rcall') {
        if (loops > 0) {
          throw new HookCompileError(
            `has a ${name}() inside another loop macro${at} (\`${excerptOf(node as Node, expression)}\`): nested loops can take minutes at every event; use one.`,
            {},
            expression,
          )
        }
        childLoops = loops + 1
      }
      if (name === 'matches' && Array.isArray(callArgs)) {
        const pattern = (op === 'rcall' ? callArgs[0] : callArgs[1]) as Node | undefined
        if (!pattern || pattern.op !== 'value' || typeof pattern.args !== 'string') {
          throw new HookCompileError(`calls matches()${at} with a pattern that is not a string literal: write the regular expression in quotes, so that it is checked when the hooks load.`, {}, expression)
        }
        const hazard = compilesAsRegex(pattern.args) ?? regexHazard(pattern.args)
        if (hazard) throw new HookCompileError(`calls matches()${at} with the pattern ${JSON.stringify(pattern.args)}, which ${hazard}.`, {}, expression)
      }
    }
    stack.push({ node: args, depth: depth + 1, loops: childLoops })
  }
}

function compilesAsRegex(source: string): string | null {
  const error = regexCompileError(source)
  return error === null ? null : `is not a valid regular expression (${error})`
}

export function compileCondition(expression: string): Condition {
  if (expression.length > MAX_WHEN_LENGTH) {
    throw new HookCompileError(`is ${expression.length} characters long; a condition may have at most ${MAX_WHEN_LENGTH}.`, {}, `${expression.slice(0, 60)}...`)
  }
  let parsed: ReturnType<Environment['parse']>
  try {
    parsed = environment().parse(expression)
  } catch (error) {
    if (error instanceof RangeError) throw new HookCompileError(`is nested too deeply to parse: write a flatter condition.`, {}, expression)
    const d = describeCelError(error, expression)
    throw new HookCompileError(`is not valid CEL: ${d.text}.${d.excerpt ? `\n${d.excerpt}` : ''}`, { start: d.start, end: d.end }, expression)
  }
  checkSyntax(parsed.ast, expression)
  const checked = parsed.check()
  if (!checked.valid) {
    const d = describeCelError(checked.error, expression)
    throw new HookCompileError(
      `cannot be evaluated: ${d.text}.${hint(d.celCode, expression, d.start)}${d.excerpt ? `\n${d.excerpt}` : ''}`,
      { start: d.start, end: d.end },
      expression,
    )
  }
  if (checked.type !== 'bool' && checked.type !== 'dyn') {
    throw new HookCompileError(`gives ${checked.type ?? 'an unknown type'}, not a bool: a condition must be true or false.`, {}, expression)
  }
  return (context) => parsed(context)
}
