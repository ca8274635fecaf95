/**
 * `spindle inspect`: a local page over a data directory — the thread tree, each thread's state,
 * cost against limits, its transcript, pending approvals with Approve and Deny buttons, and the
 * answers a runtime rejected. It listens on 127.0.0.1 only, and every request must carry the
 * session token printed with the URL, so other sites in the same browser cannot act through it.
 * Decisions are written as approval response files, which the runtime running the directory
 * carries out.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { describeError, isSpindleError } from '../base/errors.js'
import { formatUsd } from '../base/money.js'
import { threadLog } from './operator.js'
import { recordOf, withRegistry } from './registryAccess.js'
import type { ThreadContext } from '../../machines/threadContext.js'
import { createFileCheckpointStore } from '../../persistence/fileCheckpointStore.js'
import { assertDataDir, dataPaths } from '../../persistence/paths.js'
import { answerThread, approveThread, denyThread, orphanWhy, threadTree } from './operatorActions.js'
import { isActive } from '../thread/threadStatus.js'
import { stepOfSnapshot } from '../thread/threadView.js'
import { locks } from './locks.js'
import { statechartSvg } from './statechartSvg.js'
import { threadMachine } from '../../machines/thread.machine.js'
import type { TreeNode } from './operatorActions.js'
import { approvalAnswer, openApprovalRequest } from '../thread/requests.js'
import { describeAnswer, rejectedAnswers } from '../thread/approvalRecords.js'
import { visualizations } from './visualize.js'

export interface Inspector {
  url: string
  token: string
  close(): Promise<void>
}

function flatten(nodes: TreeNode[], out: TreeNode[] = []): TreeNode[] {
  for (const node of nodes) {
    out.push(node)
    flatten(node.children, out)
  }
  return out
}

/** The approval request a thread waits at, with the answer given to it if any (a list: the page loops). */
function openApprovals(dir: string, id: string, status: TreeNode['status']) {
  const open = status === 'suspended' ? openApprovalRequest(dir, id, status) : null
  return open ? [{ ...open, answer: approvalAnswer(dir, id, open.id) }] : []
}

/** What the page shows, as JSON. */
function overview(dir: string) {
  const tree = threadTree(dir)
  const leases = new Map(locks(dir).locks.map((l) => [l.threadId, l]))
  const orphans: Record<string, string> = {}
  // Once a second for every thread: the registry (read once, above) and each state.json, never the
  // transcripts — the selected thread's own is fetched and verified by its detail view.
  const checkpoints = createFileCheckpointStore({ paths: dataPaths(dir), durability: 'process' })
  const threads = flatten(tree).map((node) => {
    const report: { state: { value: unknown; context: ThreadContext } | null; problems: Array<{ code: string; message: string }> } = { state: null, problems: [] }
    try {
      const envelope = checkpoints.load(node.id)
      if (envelope) report.state = envelope.snapshot as { value: unknown; context: ThreadContext }
    } catch (error) {
      report.problems.push(describeError(error))
    }
    const context = report.state?.context
    const lease = leases.get(node.id)
    // A thread the registry calls running that no live process holds must not look alive.
    const orphan = isActive(node.status) ? orphanWhy(lease) : null
    if (orphan) orphans[node.id] = orphan
    return {
      id: node.id,
      directive: node.directive,
      status: node.status,
      state: report.state?.value ?? null,
      // What its last checkpoint says the runtime runs for it (a model call, which tool …).
      step: report.state ? stepOfSnapshot(report.state as Parameters<typeof stepOfSnapshot>[0]) : null,
      usage: context?.usage ?? null,
      limits: context?.limits ?? null,
      suspendReason: context?.suspendReason ?? null,
      result: context?.result ?? null,
      error: context?.error ?? null,
      tools: context?.policy.tools ?? null,
      permissions: context?.policy.permissions ?? null,
      orphan,
      heldBy: lease?.state === 'live' ? { owner: lease.owner, pid: lease.pid, host: lease.host } : null,
      // An answer stays on the page until the runtime acts on it, however often the page refreshes.
      approvals: openApprovals(dir, node.id, node.status),
      problems: report.problems,
    }
  })
  return { tree, threads, orphans }
}

async function body(request: http.IncomingMessage): Promise<unknown> {
  let text = ''
  // Decoded as a stream: a character split across two chunks stays one character.
  request.setEncoding('utf8')
  for await (const chunk of request) {
    text += chunk
    if (text.length > 65536) throw new Error('request body too large')
  }
  return text === '' ? {} : JSON.parse(text)
}

/** The Host header a browser sends for the inspector's own URL (127.0.0.1 or localhost, any port). */
const LOCAL_HOST = /^(?:127\.0\.0\.1|localhost)(?::\d{1,5})?$/i

export async function startInspector(options: { dir: string; port?: number }): Promise<Inspector> {
  // A page over a directory that is not there would only show errors, once a second.
  assertDataDir(dataPaths(options.dir))
  const token = randomBytes(16).toString('hex')
  const expected = Buffer.from(token)
  const authorised = (request: http.IncomingMessage, url: URL): boolean => {
    const given = Buffer.from(url.searchParams.get('token') ?? String(request.headers['x-spindle-token'] ?? ''))
    return given.length === expected.length && timingSafeEqual(given, expected)
  }
  let port = 0
  // Laid out once per inspector, on first use: the machine does not change while it runs.
  let chart: Promise<string> | undefined
  const server = http.createServer(async (request, response) => {
    const send = (status: number, value: unknown, type = 'application/json'): void => {
      response.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' })
      response.end(type === 'application/json' ? JSON.stringify(value) : String(value))
    }
    // A request line the URL parser refuses (`GET http://[ HTTP/1.1`) is the client's error: thrown
    // here, outside the try below, it ended the whole process as an unhandled rejection.
    let url: URL
    try {
      url = new URL(request.url ?? '/', 'http://127.0.0.1')
    } catch {
      return send(400, { error: 'BAD_REQUEST', message: 'The request target is not a valid URL.' })
    }
    // DNS rebinding: a page whose name now resolves to 127.0.0.1 still sends its own name as Host.
    if (!LOCAL_HOST.test(request.headers.host ?? '')) return send(403, { error: 'FORBIDDEN', message: 'The inspector answers requests for 127.0.0.1 or localhost only.' })
    if (!authorised(request, url)) return send(403, { error: 'FORBIDDEN', message: 'Open the URL spindle inspect printed: it carries the session token.' })
    // Decisions come from the inspector's own page (or a script that sends no Origin), never from another site's.
    const origin = request.headers.origin
    if (request.method !== 'GET' && origin !== undefined && origin !== `http://127.0.0.1:${port}` && origin !== `http://localhost:${port}`) {
      return send(403, { error: 'FORBIDDEN', message: `Requests from ${origin} may not change anything here.` })
    }
    try {
      if (request.method === 'GET' && url.pathname === '/') return send(200, PAGE.replace('__TOKEN__', token), 'text/html; charset=utf-8')
      if (request.method === 'GET' && url.pathname === '/api/overview') return send(200, overview(options.dir))
      if (request.method === 'GET' && url.pathname === '/api/statechart') {
        chart ??= statechartSvg(threadMachine)
        return send(200, { svg: await chart, mermaid: visualizations()['thread.machine.mmd'] })
      }
      const match = /^\/api\/threads\/([a-z0-9_-]+)\/(transcript|rejected|approve|deny|answer)$/.exec(url.pathname)
      if (match) {
        const [, id, what] = match as unknown as [string, string, string]
        if (request.method === 'GET' && what === 'transcript') return send(200, threadLog(options.dir, id).entries.slice(-200))
        if (request.method === 'GET' && what === 'rejected') {
          // An unknown thread is refused (404) as for its transcript.
          withRegistry(options.dir, (registry) => recordOf(registry, options.dir, id))
          return send(200, rejectedAnswers(dataPaths(options.dir), id).map((r) => ({ ...r, summary: describeAnswer(r.answer) })))
        }
        if (request.method === 'POST' && what === 'approve') {
          const { limits, input, message } = (await body(request)) as { limits?: Record<string, number>; input?: unknown; message?: string }
          return send(200, approveThread(options.dir, id, { ...(limits ? { limits } : {}), ...(input !== undefined ? { input } : {}), ...(message ? { message } : {}) }, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'answer') {
          const { answer } = (await body(request)) as { answer?: unknown }
          return send(200, answerThread(options.dir, id, answer, 'spindle inspect'))
        }
        if (request.method === 'POST' && what === 'deny') {
          const { reason } = (await body(request)) as { reason?: string }
          return send(200, denyThread(options.dir, id, reason, 'spindle inspect'))
        }
      }
      send(404, { error: 'NOT_FOUND', message: `${request.method} ${url.pathname} is not part of the inspector.` })
    } catch (error) {
      const { code, message } = describeError(error)
      send(isSpindleError(error) && code === 'THREAD_NOT_FOUND' ? 404 : 400, { error: code, message })
    }
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve())
  })
  port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/?token=${token}`,
    token,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>spindle inspect</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;display:grid;grid-template-columns:360px 1fr;height:100vh}
#tree{overflow:auto;border-right:1px solid #ddd;padding:8px}#detail{overflow:auto;padding:12px}
.node{cursor:pointer;padding:2px 4px;border-radius:4px;white-space:nowrap}.node:hover{background:#eef}
.sel{background:#dde}.st{font-weight:600}.completed{color:#080}.running,.created{color:#06c}.suspended{color:#b70}.error{color:#c00}.cancelled{color:#777}.continued{color:#909}
#chart svg{max-width:100%;height:auto}.id{color:#888;font-size:12px}.orphan{color:#c00;font-size:12px}.who{color:#555}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;margin:0}.answered{color:#080;font-weight:600}.failed{color:#c00}.approval{border:1px solid #b70;padding:8px;margin:8px 0;border-radius:6px;background:#fff8e6}.rejected{border:1px solid #c00;padding:8px;margin:8px 0;border-radius:6px;background:#fff0f0}
.approval b{white-space:pre-wrap}.cut{color:#888;font-style:italic}
</style></head><body>
<div id="tree"><h3>threads</h3><div id="nodes">loading…</div></div>
<div id="detail"><p>Select a thread.</p></div>
<script>
const token='__TOKEN__';let selected=null;let data=null;const failures={}
${String(formatUsd)}
const api=(path,opts={})=>fetch(path,{...opts,headers:{'x-spindle-token':token,'content-type':'application/json'}}).then(r=>r.json())
const esc=s=>String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))
// Cut, then escape (an entity cut in half shows as text: {&qu), by characters not UTF-16 units, and say so.
const clip=(s,max)=>{const c=Array.from(String(s));return c.length<=max?esc(s):esc(c.slice(0,max).join(''))+'<span class="cut" title="cut at '+max+' characters">… '+(c.length-max)+' more characters</span>'}
let chart='';api('/api/statechart').then(c=>{chart=c.svg;if(selected)renderDetail()})
const flat=v=>typeof v==='string'?v:Object.entries(v).map(([k,s])=>k+'.'+flat(s)).join()
function renderTree(nodes,depth){return nodes.map(n=>'<div class="node'+(n.id===selected?' sel':'')+'" data-id="'+n.id+'" title="'+n.id+'" style="padding-left:'+(depth*14+4)+'px">'+(n.previousThreadId?'↪ ':'')+esc(n.directive)+' <span class="id">'+esc(n.id.slice(-4))+'</span> <span class="st '+n.status+'">'+n.status+'</span> '+formatUsd(n.spend)+(data.orphans[n.id]?' <span class="orphan" title="no live runtime process holds it">⚠ orphan</span>':'')+'</div>'+renderTree(n.children,depth+1)).join('')}
async function refresh(){data=await api('/api/overview');document.getElementById('nodes').innerHTML=renderTree(data.tree,0)||'no threads';
for(const el of document.querySelectorAll('.node'))el.onclick=()=>{selected=el.dataset.id;refresh()};if(selected)await renderDetail()}
async function renderDetail(){const t=data.threads.find(x=>x.id===selected);if(!t)return;const current=t.state?flat(t.state):'';
const WHY={dead_owner:'the process that ran it is gone',expired:'its lease expired unrenewed',no_lease:'no process has taken it'}
const STEP={callModel:s=>'calling the model (turn '+esc(s.turn)+(s.attempt>1?', attempt '+esc(s.attempt):'')+')',runTool:s=>'running the tool '+esc(s.tool)+' (turn '+esc(s.turn)+', call '+esc(s.callId)+')',waitUntil:s=>'waiting to retry'+(Number.isFinite(Number(s.dueAt))?' until '+esc(new Date(Number(s.dueAt)).toISOString()):''),decideLimit:s=>'deciding on its '+esc(s.limit)+' limit ('+esc(s.used)+' of '+esc(s.max)+')',settleChildren:()=>'cancelling its children'}
const now=t.step&&STEP[t.step.effect]?'<p class="who">now: '+STEP[t.step.effect](t.step)+'</p>':''
const who=t.orphan?'<p class="orphan">⚠ No live runtime process holds this thread ('+esc(WHY[t.orphan]||t.orphan)+'): it will not move until a runtime opens this directory or <code>spindle orphans recover '+esc(t.id)+'</code> settles it.</p>':t.heldBy?'<p class="who">run by pid '+esc(t.heldBy.pid)+' on '+esc(t.heldBy.host)+'</p>':''
const policy=(t.tools?'<p class="who">tools: '+esc(t.tools.join(', ')||'none')+'</p>':'')+(t.permissions?'<p class="who">permissions: '+esc(Object.entries(t.permissions).map(([k,v])=>k+': '+v).join(', '))+'</p>':'')
const lim=k=>t.limits&&t.limits[k]!==null?t.limits[k]:'∞';const u=t.usage||{turns:0,inputTokens:0,outputTokens:0,spend:0}
const answered=a=>'<span class="answered">'+(a.answer.approved?'approved':'denied')+(a.answer.by?' by '+esc(a.answer.by):'')+': '+(a.answer.state==='taken'?'the runtime is acting on it':'waiting for the runtime running this directory to act on it')+'</span>'
const approvals=t.approvals.map(a=>'<div class="approval" data-request="'+esc(a.id)+'"><b>'+esc(a.message)+'</b><br>proposed '+esc(a.limit)+': '+esc(a.limit==='spend'&&a.proposed!==null?formatUsd(a.proposed):a.proposed)+' '+(a.answer?answered(a):'<button class="approve">Approve</button> <button class="deny">Deny</button>')+'<span class="failed">'+esc(failures[a.id]||'')+'</span></div>').join('')
const [log,rejected]=await Promise.all([api('/api/threads/'+t.id+'/transcript'),api('/api/threads/'+t.id+'/rejected')])
const refused=Array.isArray(rejected)&&rejected.length?'<h3>rejected answers</h3>'+rejected.map(r=>'<div class="rejected" data-request="'+esc(r.requestId)+'"><b>'+esc(r.summary)+'</b> to '+esc(r.requestId)+(r.at?' at '+esc(r.at):'')+': <span class="why">'+esc(r.reason||'requests.log.jsonl does not say why')+'</span><br><span class="id">kept as '+esc(r.file)+'</span></div>').join(''):''
document.getElementById('detail').innerHTML='<h2>'+esc(t.id)+' <span class="st '+t.status+'">'+t.status+'</span></h2>'+now+who+approvals+refused+policy+'<h3>statechart</h3><div id="chart">'+chart+'</div>'+
'<h3>cost against limits</h3><table><tr><th>turns</th><td>'+u.turns+' / '+lim('turns')+'</td></tr><tr><th>tokens</th><td>'+(u.inputTokens+u.outputTokens)+' / '+lim('tokens')+'</td></tr><tr><th>spend</th><td>'+formatUsd(u.spend)+' / '+(t.limits&&t.limits.spend!==null?formatUsd(t.limits.spend):'∞')+'</td></tr></table>'+
(t.result?'<h3>result</h3><pre>'+esc(t.result)+'</pre>':'')+(t.error?'<h3>error</h3><pre>'+esc(t.error.code+': '+t.error.message)+'</pre>':'')+
'<h3>transcript</h3><table>'+log.map(e=>'<tr><td>'+e.seq+'</td><td>'+esc(e.type)+'</td><td><pre>'+clip(JSON.stringify(e.data),400)+'</pre></td></tr>').join('')+'</table>'
for(const el of document.querySelectorAll('#chart [data-state]')){const s=el.dataset.state;el.classList.toggle('current',s===current);el.classList.toggle('within',current.startsWith(s+'.'))}
const answer=what=>async e=>{const box=e.target.parentElement;for(const b of box.querySelectorAll('button'))b.disabled=true
const r=await api('/api/threads/'+t.id+'/'+what,{method:'POST',body:'{}'}).catch(err=>({error:'NETWORK',message:String(err)}))
if(r.error)failures[box.dataset.request]=' '+r.error+': '+r.message;else delete failures[box.dataset.request];await refresh()}
for(const b of document.querySelectorAll('.approve'))b.onclick=answer('approve')
for(const b of document.querySelectorAll('.deny'))b.onclick=answer('deny')}
refresh();setInterval(refresh,1000)
</script></body></html>`
