/**
 * Text for a terminal. What the CLI prints comes partly from threads — a model's result, a tool's
 * error message, a directive's name — and a terminal obeys control characters wherever they come
 * from: ESC ] 52 writes the clipboard, ESC ] 0 sets the window title, ESC [ 2 J clears the screen,
 * a carriage return overwrites what was printed before it on the line.
 */

/** C0 controls but tab and newline, DEL, and the C1 controls (U+0080–U+009F: U+009B is a CSI). */
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g

/**
 * `text` with every control character but tab and newline written as a `\uXXXX` escape, which a
 * terminal prints as six characters. Inside a JSON string that is the same character, so JSON
 * stays valid JSON. `keep` matches escape sequences the caller wrote itself (its colours): they
 * pass unchanged.
 */
export function terminalSafe(text: string, keep?: RegExp): string {
  const escape = (part: string): string => part.replace(CONTROL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
  if (!keep) return escape(text)
  const global = new RegExp(keep.source, keep.flags.includes('g') ? keep.flags : `${keep.flags}g`)
  let result = ''
  let from = 0
  for (const match of text.matchAll(global)) {
    result += escape(text.slice(from, match.index)) + match[0]
    from = match.index! + match[0].length
  }
  return result + escape(text.slice(from))
}

/** The colour codes the CLI itself writes (green, cyan, yellow, red, grey, magenta, reset). */
export const CLI_COLOURS = /\u001b\[(?:3[1-6]|90|0)m/

/**
 * ` --dir DIR` for a command a person copies from the output, or '' for the default directory;
 * quoted for a POSIX shell when it holds anything but plain path characters.
 */
export function dirArgument(dir: string): string {
  if (dir === '.spindle') return ''
  return ` --dir ${/^[\w./@:+-]+$/.test(dir) ? dir : `'${dir.replace(/'/g, `'\\''`)}'`}`
}

/** `1 turn`, `2 turns`, `1 entry`, `3 entries`: a count and its noun, agreeing. */
export function plural(n: number, one: string, many = `${one}s`): string {
  return `${n.toLocaleString('en-US')} ${n === 1 ? one : many}`
}
