/**
 * Money as every printer shows it — `spindle ls`, `tree`, `show`, the demo, the inspector page,
 * the approval message — so one amount reads the same wherever it is seen.
 */

/**
 * US dollars with five decimals: a thousandth of a cent ($0.00001) shows, which a turn of a small
 * model costs, so its spend does not read as $0.0000. An amount above zero too small even for
 * that prints as `<$0.00001`, never as nothing spent.
 *
 * Self-contained on purpose: the inspector page runs this very function's source in the browser.
 *
 * @example
 * formatUsd(0.000123) // '$0.00012'
 * formatUsd(1.5) // '$1.50000'
 * formatUsd(0.000001) // '<$0.00001'
 */
export function formatUsd(usd: number): string {
  if (usd > 0 && usd < 0.000005) return '<$0.00001'
  return `$${usd.toFixed(5)}`
}
