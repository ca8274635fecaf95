/**
 * `spindle show` as text: what a person reads about one thread, and — for a thread that waits for
 * one — the command that moves it on. Data in, lines out; cli.ts prints them.
 */
import { describeAnswer } from '../thread/approvalRecords.js'
import type { LimitName } from '../../machines/threadPolicy.js'
import type { PendingCall, ThreadContext } from '../../machines/threadContext.js'
import type { RecoveryCount } from '../../persistence/types.js'
import { formatUsd } from '../base/money.js'
import type { ThreadReport } from './operator.js'
import { plural } from './terminalText.js'
import { budgetText } from './budgetFigures.js'
import type { BudgetView } from '../runtime/budgetView.js'

/** The `spindle approve` option that sets each limit. */
export const APPROVE_FLAG: Record<LimitName, string> = { turns: '--turns', tokens: '--tokens', spend: '--spend', durationMs: '--duration-ms' }

/** A limit's or a budget's amount as a person reads it: spend in dollars, the rest as numbers. */
function amount(name: string, value: number): string {
  return name === 'spend' ? formatUsd(value) : String(value)
}

function failureText(failure: NonNullable<ThreadContext['lastFailure']>): string {
  return `[${failure.code ?? failure.category}] ${failure.message}`
}

/**
 * Why a suspended thread waits, and what moves it on: `suspended` and `next` lines, plus the
 * failure that stopped it when there was one.
 */
function suspensionLines(id: string, context: ThreadContext, at: string, now: number): Array<[string, string]> {
  const hit = context.limitHit
  if (context.suspendReason === 'limit' && hit) {
    const flag = APPROVE_FLAG[hit.limit]
    const approve =
      hit.proposed !== null
        ? `spindle approve ${id} ${flag} ${hit.proposed}${at}`
        : `spindle approve ${id} ${flag} <new limit>${at} (its escalation policy proposes none)`
    return [
      ['suspended', `at its ${hit.limit} limit (${amount(hit.limit, hit.used)} of ${amount(hit.limit, hit.max)}), waiting for a person`],
      ['proposed', hit.proposed !== null ? `raise ${hit.limit} to ${amount(hit.limit, hit.proposed)}` : 'nothing: approve with a new limit, or deny'],
      ['next', `${approve}, or spindle deny ${id}${at}`],
    ]
  }
  const call = context.pendingCall
  if ((context.suspendReason === 'tool_approval' || context.suspendReason === 'waiting') && call) return callLines(id, call, at, now)
  const lines: Array<[string, string]> = []
  switch (context.suspendReason) {
    case 'error':
      lines.push(['suspended', 'after model errors that outlasted their retries'])
      break
    case 'context_length':
      lines.push(['suspended', "its conversation no longer fits the model's context window, and a successor thread would carry no less of it"])
      break
    case 'budget': {
      const b = context.budgetHit
      lines.push(['suspended', b ? `its ${b.amount} budget ran out (${amount(b.amount, b.used)} used of ${amount(b.amount, b.max)})` : 'its budget ran out'])
      break
    }
    case 'crash_loop':
      lines.push(['suspended', 'quarantined: each process that ran it on from the same point died'])
      break
    default:
      lines.push(['suspended', context.suspendReason ?? 'for no recorded reason'])
  }
  if (context.lastFailure && context.suspendReason !== 'budget') lines.push(['failure', failureText(context.lastFailure)])
  lines.push(['next', `spindle resume ${id}${at}, or spindle cancel ${id}${at}`])
  return lines
}

/** How much of a call's input or question one line shows: the rest is in `spindle show --json`. */
const CALL_WIDTH = 300

/** JSON on one line, cut at `max` characters with the cut marked. */
function compactJson(value: unknown, max: number): string {
  return oneLine(JSON.stringify(value) ?? 'undefined', max)
}

/**
 * A thread paused at a tool call: what it waits for — an approval of the call, or the answer to a
 * question — the call, the request, its deadline, and the commands that decide it.
 */
function callLines(id: string, call: PendingCall, at: string, now: number): Array<[string, string]> {
  const lines: Array<[string, string]> = []
  const asked = call.request !== null && typeof call.request === 'object' ? (call.request as { question?: unknown; choices?: unknown }) : null
  if (call.kind === 'approval') {
    lines.push(['suspended', `at a tool approval: its ${call.tool} call waits for a person to approve or deny it`])
  } else {
    lines.push(['suspended', `waiting for an answer to its ${call.tool} call`])
  }
  lines.push(['tool', `${call.tool} (call ${call.callId})`])
  lines.push(['input', compactJson(call.input, CALL_WIDTH)])
  if (call.kind === 'wait') {
    if (typeof asked?.question === 'string') lines.push(['question', oneLine(asked.question, CALL_WIDTH)])
    else if (call.request !== null && call.request !== undefined) lines.push(['request', compactJson(call.request, CALL_WIDTH)])
    if (Array.isArray(asked?.choices)) lines.push(['choices', oneLine(asked.choices.map((c) => JSON.stringify(c)).join(', '), CALL_WIDTH)])
  }
  lines.push(['request id', call.requestId])
  if (call.deadlineAt === null) lines.push(['deadline', 'none: it waits until decided'])
  else lines.push(['deadline', `${new Date(call.deadlineAt).toISOString()}${call.deadlineAt <= now ? ' (overdue: the runtime running this directory acts on it as approvals.onTimeout says)' : ''}`])
  if (call.kind === 'approval') {
    lines.push(['next', `spindle approve ${id}${at} (add --input '<json>' to run it with other input), or spindle deny ${id} --reason '<why>'${at}`])
  } else {
    const first = Array.isArray(asked?.choices) && typeof asked.choices[0] === 'string' ? asked.choices[0] : null
    lines.push(['next', `spindle answer ${id} ${first !== null ? shellQuote(first) : "'<answer>'"}${at} (${first !== null ? 'or another answer; ' : ''}--json to give a JSON value)`])
  }
  return lines
}

/** A word for a POSIX shell: single-quoted unless it needs no quoting. */
function shellQuote(text: string): string {
  return /^[\w.,:/@%+=-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`
}

/** One recovery is a restart carried on; more in a row at the same point is what leads to a quarantine. */
function recoveryLine(count: RecoveryCount): [string, string] | null {
  if (count.count === 0) return null
  const where = count.seq !== null ? ` at transcript seq ${count.seq}` : ''
  if (count.count === 1) return ['recovered', `carried on after a restart (found${where})`]
  return [
    'recoveries',
    `found at the same point${where} by ${count.count} recoveries in a row: each process that ran it on from there died ` +
      '(past supervision.maxRecoveries it is quarantined)',
  ]
}

/** Text on one line, cut at `max` characters with the cut marked. */
function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim()
  return flat.length > max ? `${flat.slice(0, max - 1)}… (${flat.length} characters)` : flat
}

/** What the thread may spend and what is left, per amount; a continuation says whose budget it shares. */
function budgetLines(budget: BudgetView, child: boolean): Array<[string, string]> {
  const lines: Array<[string, string]> = [
    ['budget', `spend ${budgetText(budget, 'spend', child)}`],
    ['', `tokens ${budgetText(budget, 'tokens', child)}`],
  ]
  if (budget.accountId !== budget.threadId) lines.push(['', `(its continuation chain's budget, kept under ${budget.accountId})`])
  return lines
}

/** Model calls retried, and the latest model error, which may be behind the thread now. */
function retryLine(context: ThreadContext): [string, string] | null {
  const retries = context.retries ?? 0
  const last = context.lastError
  if (retries === 0 && !last) return null
  return ['retries', `${retries}${last ? `, the last model error ${last.category}: ${oneLine(last.message, 200)}` : ''}`]
}

/**
 * The lines of `spindle show` after the first (id and status), as `label  text` pairs. `at` is how
 * the commands it names say where the thread is (` --dir <dir>`, '' for the default).
 */
export function showLines(report: ThreadReport, at: string, now = Date.now()): Array<[string, string]> {
  const { record, state, transcript, problems } = report
  const lines: Array<[string, string]> = [['directive', record.directiveName]]
  if (record.parentId) lines.push(['parent', record.parentId])
  if (state) {
    const c = state.context
    if (c.directive.instructions) lines.push(['instructions', oneLine(c.directive.instructions, 240)])
    if (c.directive.model) lines.push(['model', c.directive.model])
    lines.push(['state', `${JSON.stringify(state.value)} (checkpointed ${state.savedAt}, transcript seq ${state.transcriptSeq})`])
    lines.push(['usage', `${plural(c.usage.turns, 'turn')}, ${c.usage.inputTokens}+${c.usage.outputTokens} ${c.usage.inputTokens + c.usage.outputTokens === 1 ? 'token' : 'tokens'}, ${formatUsd(c.usage.spend)}`])
    const byModel = Object.entries(c.usage.byModel ?? {})
    // One model's line would only repeat the usage line.
    if (byModel.length > 1) {
      lines.push(['by model', byModel.map(([name, u]) => `${name} ${plural(u.turns, 'turn')}, ${u.inputTokens}+${u.outputTokens} tokens, ${formatUsd(u.spend)}`).join('; ')])
    }
    lines.push(['limits', Object.entries(c.limits).map(([k, v]) => `${k} ${v === null ? '∞' : amount(k, v)}`).join(', ')])
    if (report.budget) lines.push(...budgetLines(report.budget, report.budget.parentId !== null))
    const retried = retryLine(c)
    if (retried) lines.push(retried)
    if (c.policy.tools) lines.push(['tools', c.policy.tools.join(', ') || 'none'])
    if (c.policy.permissions) lines.push(['permissions', Object.entries(c.policy.permissions).map(([k, v]) => `${k}: ${v}`).join(', ')])
    // A suspension is history once the thread moved on (a cancelled thread keeps its old suspendReason).
    if (state.status === 'suspended') lines.push(...suspensionLines(record.id, c, at, now))
    if (state.status === 'cancelled') lines.push(['cancelled', c.cancelReason ?? 'no reason given'])
    if (c.result !== null) lines.push(['result', c.result])
    if (c.error) lines.push(['error', `[${c.error.code}] ${c.error.message}`])
  }
  if (!state && report.budget) lines.push(...budgetLines(report.budget, report.budget.parentId !== null))
  const recovered = report.recoveries ? recoveryLine(report.recoveries) : null
  if (recovered) lines.push(recovered)
  if (transcript) lines.push(['transcript', `${plural(transcript.entries, 'entry', 'entries')}, chain verified${transcript.torn ? ', torn last line' : ''}`])
  const open = report.approvals.open
  // A tool call's request is among the suspension's lines above.
  if (open && (open.kind === 'limit_escalation' || !state)) lines.push(['approval', `${open.id} waits for an answer`])
  for (const r of report.approvals.rejected) {
    const answer = r.answer ? describeAnswer(r.answer) : `an unreadable answer (${r.problem})`
    lines.push(['rejected', `${answer} to ${r.requestId}${r.at ? ` at ${r.at}` : ''}: ${r.reason ?? 'requests.log.jsonl does not say why'} (kept as ${r.file})`])
  }
  for (const p of problems) lines.push(['problem', `[${p.code}] ${p.message}`])
  return lines
}
