/**
 * Strings in the order SQLite's default BINARY collation gives them, for the memory backends that
 * must list rows as the SQLite ones do. Pure. No I/O.
 */

/**
 * Compares two strings by code point, which is the order of their UTF-8 bytes (what BINARY
 * compares). JavaScript's `<` compares UTF-16 units instead, which puts U+E000…U+FFFF after
 * astral characters; the two orders agree on everything else, ASCII ids included.
 */
export function compareBinary(a: string, b: string): number {
  const length = Math.min(a.length, b.length)
  for (let i = 0; i < length; i++) {
    let x = a.charCodeAt(i)
    let y = b.charCodeAt(i)
    if (x === y) continue
    // Surrogates (D800–DFFF) stand for code points above FFFF: move them above E000–FFFF.
    if (x >= 0xd800 && y >= 0xd800) {
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000
    }
    return x - y
  }
  return a.length - b.length
}
