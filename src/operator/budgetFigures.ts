/**
 * Budgets as the operator commands and the inspector show them: read from the directory's
 * ledger.db and registry through `budgetOf`, the function `rt.budget` uses, so the CLI, the page
 * and the API give the same figures. Reads only; a directory without a ledger shows every thread
 * unlimited.
 */
import fs from 'node:fs'
import { createMemoryLedger } from '../../persistence/memoryLedger.js'
import { dataPaths } from '../../persistence/paths.js'
import { openSqliteLedger } from '../../persistence/sqliteLedger.js'
import type { BudgetUsage } from '../../persistence/types.js'
import { formatUsd } from '../base/money.js'
import { budgetOf } from '../runtime/budgetView.js'
import type { BudgetView } from '../runtime/budgetView.js'
import { withRegistry } from './registryAccess.js'

/** The budgets of `ids` (those the registry lacks are left out). */
export function readBudgets(dir: string, ids: readonly string[]): Map<string, BudgetView> {
  const file = dataPaths(dir).ledger
  // Opening the SQLite file would create it: a directory that never had a budget keeps none.
  const ledger = fs.existsSync(file) ? openSqliteLedger({ path: file, durability: 'process' }) : createMemoryLedger()
  try {
    return withRegistry(dir, (registry) => {
      const budgets = new Map<string, BudgetView>()
      for (const id of ids) if (registry.get(id)) budgets.set(id, budgetOf({ registry, ledger }, dir, id))
      return budgets
    })
  } finally {
    ledger.close()
  }
}

function figure(amount: keyof BudgetUsage, value: number): string {
  return amount === 'spend' ? formatUsd(value) : String(value)
}

/**
 * One amount of a budget on one line, e.g. `$0.17000 of $1.00000 spent ($0.02000 itself),
 * $0.20000 reserved by open children, $0.63000 available`. `child`: the thread has a parent, so
 * once it ended what it left is its parent's again, not available to it.
 */
export function budgetText(budget: BudgetView, amount: keyof BudgetUsage, child: boolean): string {
  const limit = budget.limit[amount]
  const spent = budget.spent.total[amount]
  const own = budget.spent.own[amount]
  const parts = [`${figure(amount, spent)}${limit === null ? '' : ` of ${figure(amount, limit)}`} spent${own !== spent ? ` (${figure(amount, own)} itself)` : ''}`]
  if (budget.reserved[amount] > 0) parts.push(`${figure(amount, budget.reserved[amount])} reserved by open children`)
  const available = budget.available[amount]
  if (available === null) parts.push('unlimited')
  else if (budget.released && child) parts.push(`ended: the ${figure(amount, available)} left went back to its parent`)
  else parts.push(`${figure(amount, available)} available`)
  return parts.join(', ')
}
