/**
 * The page `spindle inspect` serves, put together from its parts: what waits for a person first
 * (inspectorWaiting), then the thread tree beside the selected thread (inspectorScript) and its
 * conversation (inspectorConversation), styled by inspectorStyles. Everything it shows comes from
 * the inspector's own endpoints and events channel, with the session token; nothing is loaded
 * from elsewhere.
 */
import { CONVERSATION_SCRIPT } from './inspectorConversation.js'
import { CORE_SCRIPT } from './inspectorScript.js'
import { INSPECTOR_STYLES } from './inspectorStyles.js'
import { WAITING_SCRIPT } from './inspectorWaiting.js'

const esc = (s: string): string => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)

/**
 * What the page says of where the threads are, by place: who acts on a decision, what an empty
 * tree means, and what moves an orphan on (a database's workers take one over when its lease
 * expires; `spindle orphans` is the directory's).
 */
const PLACE_WORDS = {
  directory: {
    runner: 'the runtime running this directory',
    empty: 'No threads in this directory yet.',
    orphan: 'it will not move until a runtime opens this directory or <code>spindle orphans recover ID</code> settles it.',
  },
  database: {
    runner: 'the worker running this thread',
    empty: 'No threads in this database schema yet.',
    orphan: 'a worker on this database takes it over once its lease has expired; until one runs, it does not move.',
  },
} as const

/** The page, carrying this session's token; `place`: where the threads are, named in its header. */
export function inspectorPage(token: string, place: { kind: 'directory' | 'database'; name: string } = { kind: 'directory', name: '' }): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>spindle inspect</title><link rel="icon" href="data:,">
<style>${INSPECTOR_STYLES}</style></head><body>
<header><h1>spindle inspect</h1><span class="dir">${esc(place.name)}</span><span id="live" class="off">connecting…</span></header>
<section id="waiting"><p class="note">loading…</p></section>
<nav id="tree"><div class="inner"><h3>threads</h3><div id="problem"></div><div id="nodes">loading…</div></div></nav>
<main id="main"><div id="detail"><p class="empty">Select a thread.</p></div></main>
<script>
const token=${JSON.stringify(token)}
const PLACE=${JSON.stringify(PLACE_WORDS[place.kind]).replace(/</g, '\\u003c')}
${CORE_SCRIPT}
${WAITING_SCRIPT}
${CONVERSATION_SCRIPT}
connect()
</script></body></html>`
}
