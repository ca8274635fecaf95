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

/** The page, carrying this session's token; `dir`: the data directory, named in its header. */
export function inspectorPage(token: string, dir = ''): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>spindle inspect</title><link rel="icon" href="data:,">
<style>${INSPECTOR_STYLES}</style></head><body>
<header><h1>spindle inspect</h1><span class="dir">${esc(dir)}</span><span id="live" class="off">connecting…</span></header>
<section id="waiting"><p class="note">loading…</p></section>
<nav id="tree"><div class="inner"><h3>threads</h3><div id="problem"></div><div id="nodes">loading…</div></div></nav>
<main id="main"><div id="detail"><p class="empty">Select a thread.</p></div></main>
<script>
const token=${JSON.stringify(token)}
${CORE_SCRIPT}
${WAITING_SCRIPT}
${CONVERSATION_SCRIPT}
connect()
</script></body></html>`
}
