/**
 * Issue 22: money was printed with four decimals in some places and five in others, so a turn of
 * a small model read as $0.0000 in the inspector. One formatter now, for every printer.
 */
import { describe, expect, it } from 'vitest'
import { formatUsd } from '../../src/base/money.js'

describe('formatUsd', () => {
  it('should show a thousandth of a cent', () => {
    expect(formatUsd(0.00001)).toBe('$0.00001')
    expect(formatUsd(0.000123)).toBe('$0.00012')
  })

  it('should show whole dollars with the same five decimals', () => {
    expect(formatUsd(1.5)).toBe('$1.50000')
  })

  it('should show nothing spent as zero', () => {
    expect(formatUsd(0)).toBe('$0.00000')
  })

  it('should never show an amount above zero as nothing spent', () => {
    expect(formatUsd(0.000001)).toBe('<$0.00001')
  })
})
