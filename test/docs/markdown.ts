/**
 * What the documentation tests read out of Markdown: fenced code blocks (with the HTML comment that
 * marks one), relative links, and the anchors GitHub gives headings.
 */
import fs from 'node:fs'
import path from 'node:path'

export interface CodeBlock {
  /** The fence's info string: `ts`, `sh`, `text` … */
  lang: string
  code: string
  /** 1-based line of the opening fence. */
  line: number
  /** The HTML comment on the line just before the fence (`<!-- fragment -->` → `fragment`), or null. */
  marker: string | null
}

export interface Link {
  target: string
  line: number
}

const FENCE = /^(\s*)(`{3,}|~{3,})(.*)$/
const MARKER = /^<!--\s*(.*?)\s*-->$/

export function codeBlocks(markdown: string): CodeBlock[] {
  const lines = markdown.split('\n')
  const blocks: CodeBlock[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!)
    if (!open) continue
    const fence = open[2]!
    const start = i
    const body: string[] = []
    for (i++; i < lines.length && !lines[i]!.trim().startsWith(fence); i++) body.push(lines[i]!)
    const before = lines.slice(0, start).reverse().find((l) => l.trim() !== '')
    blocks.push({
      lang: open[3]!.trim().split(/\s+/)[0] ?? '',
      code: `${body.join('\n')}\n`,
      line: start + 1,
      marker: before ? (MARKER.exec(before.trim())?.[1] ?? null) : null,
    })
  }
  return blocks
}

/** The Markdown with every fenced block's lines blanked (kept as empty lines, so line numbers hold). */
function outsideCode(markdown: string): string[] {
  const lines = markdown.split('\n')
  let fence: string | null = null
  return lines.map((line) => {
    const open = FENCE.exec(line)
    if (fence === null && open) {
      fence = open[2]!
      return ''
    }
    if (fence !== null) {
      if (line.trim().startsWith(fence)) fence = null
      return ''
    }
    return line
  })
}

const MD_LINK = /!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g
const HTML_LINK = /\b(?:src|href)="([^"]+)"/g

/** Every link and image target outside code, with its line. */
export function links(markdown: string): Link[] {
  const found: Link[] = []
  outsideCode(markdown).forEach((raw, i) => {
    const line = raw.replace(/`[^`]*`/g, '')
    for (const pattern of [MD_LINK, HTML_LINK]) {
      for (const match of line.matchAll(pattern)) found.push({ target: match[1]!, line: i + 1 })
    }
  })
  return found
}

/** The anchors GitHub makes of a file's headings (`## After a crash` → `after-a-crash`). */
export function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>()
  const seen = new Map<string, number>()
  for (const line of outsideCode(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (!heading) continue
    const slug = heading[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
      .replace(/ /g, '-')
    const count = seen.get(slug) ?? 0
    seen.set(slug, count + 1)
    anchors.add(count === 0 ? slug : `${slug}-${count}`)
  }
  return anchors
}

export interface BrokenLink {
  file: string
  line: number
  target: string
  /** The file the link points at, resolved, whether it exists or not. */
  resolved: string
  why: 'no such file' | 'no such heading'
}

/** Relative links of `file` whose file (or heading, for a Markdown file) does not exist. */
export function brokenLinks(file: string): BrokenLink[] {
  const markdown = fs.readFileSync(file, 'utf8')
  const broken: BrokenLink[] = []
  for (const { target, line } of links(markdown)) {
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto: …
    const [pathPart, anchor] = target.split('#', 2) as [string, string | undefined]
    const resolved = pathPart === '' ? file : path.resolve(path.dirname(file), decodeURIComponent(pathPart))
    if (!fs.existsSync(resolved)) {
      broken.push({ file, line, target, resolved, why: 'no such file' })
      continue
    }
    if (anchor && resolved.endsWith('.md') && !headingAnchors(fs.readFileSync(resolved, 'utf8')).has(anchor)) {
      broken.push({ file, line, target, resolved, why: 'no such heading' })
    }
  }
  return broken
}
