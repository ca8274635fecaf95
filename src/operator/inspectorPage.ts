/**
 * The page `spindle inspect` serves: what waits for a person first — limit approvals, tool
 * approvals with the call's input to edit, questions to answer — then the thread tree and the
 * selected thread. Everything it shows comes from the inspector's own endpoints, with the session
 * token; nothing is loaded from elsewhere.
 */
import { formatUsd } from '../base/money.js'

/** The page, carrying this session's token. */
export function inspectorPage(token: string): string {
  return PAGE.replace('__TOKEN__', token)
}

const PAGE = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>spindle inspect</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;display:grid;grid-template-columns:360px 1fr;height:100vh}
#tree{overflow:auto;border-right:1px solid #ddd;padding:8px}#main{overflow:auto}#detail{padding:12px}
#waiting{padding:4px 12px;border-bottom:1px solid #ddd;background:#fffdf5}#waiting h2{font-size:16px;margin:8px 0}.calm{color:#080}
.approval textarea{width:100%;max-width:720px;box-sizing:border-box;font:13px ui-monospace,monospace}.approval .asked{white-space:pre-wrap;font-weight:600;margin:4px 0}.approval input[type=text]{width:280px}.waits{color:#b70;font-size:12px;font-weight:600}.approval .choice{margin-right:4px}
.node{cursor:pointer;padding:2px 4px;border-radius:4px;white-space:nowrap}.node:hover{background:#eef}
.sel{background:#dde}.st{font-weight:600}.completed{color:#080}.running,.created{color:#06c}.suspended{color:#b70}.error{color:#c00}.cancelled{color:#777}.continued{color:#909}
#chart svg{max-width:100%;height:auto}.id{color:#888;font-size:12px}.orphan{color:#c00;font-size:12px}.who{color:#555}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
pre{white-space:pre-wrap;margin:0}.answered{color:#080;font-weight:600}.failed{color:#c00}.approval{border:1px solid #b70;padding:8px;margin:8px 0;border-radius:6px;background:#fff8e6}.rejected{border:1px solid #c00;padding:8px;margin:8px 0;border-radius:6px;background:#fff0f0}
.approval b{white-space:pre-wrap}.cut{color:#888;font-style:italic}
</style></head><body>
<div id="tree"><h3>threads</h3><div id="nodes">loading…</div></div>
<div id="main"><section id="waiting">loading…</section><div id="detail"><p>Select a thread.</p></div></div>
<script>
const token='__TOKEN__';let selected=null;let data=null;const failures={};const drafts={};let waitingKey=''
${String(formatUsd)}
const api=(path,opts={})=>fetch(path,{...opts,headers:{'x-spindle-token':token,'content-type':'application/json'}}).then(r=>r.json())
const esc=s=>String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))
// Cut, then escape (an entity cut in half shows as text: {&qu), by characters not UTF-16 units, and say so.
const clip=(s,max)=>{const c=Array.from(String(s));return c.length<=max?esc(s):esc(c.slice(0,max).join(''))+'<span class="cut" title="cut at '+max+' characters">… '+(c.length-max)+' more characters</span>'}
let chart='';api('/api/statechart').then(c=>{chart=c.svg;if(selected)renderDetail()})
const flat=v=>typeof v==='string'?v:Object.entries(v).map(([k,s])=>k+'.'+flat(s)).join()
function renderTree(nodes,depth){return nodes.map(n=>'<div class="node'+(n.id===selected?' sel':'')+'" data-id="'+n.id+'" title="'+n.id+'" style="padding-left:'+(depth*14+4)+'px">'+(n.previousThreadId?'↪ ':'')+esc(n.directive)+' <span class="id">'+esc(n.id.slice(-4))+'</span> <span class="st '+n.status+'">'+n.status+'</span> '+formatUsd(n.spend)+(data.orphans[n.id]?' <span class="orphan" title="no live runtime process holds it">⚠ orphan</span>':'')+(waitingFor(n.id)?' <span class="waits">waits for you</span>':'')+'</div>'+renderTree(n.children,depth+1)).join('')}
const waitingFor=id=>{const t=data.threads.find(x=>x.id===id);return t&&t.approvals.length>0}
async function refresh(){data=await api('/api/overview');renderWaiting();document.getElementById('nodes').innerHTML=renderTree(data.tree,0)||'no threads';
for(const el of document.querySelectorAll('.node'))el.onclick=()=>{selected=el.dataset.id;refresh()};if(selected)await renderDetail()}
// The budget as rt.budget gives it: what it and its descendants spent against its limit, what open children hold, what is left.
function budgetTable(b){if(!b)return '';const f=(k,v)=>v===null?'∞':k==='spend'?formatUsd(v):esc(v)
const row=k=>'<tr><th>'+k+'</th><td>'+f(k,b.limit[k])+'</td><td>'+f(k,b.spent.own[k])+'</td><td>'+f(k,b.spent.total[k])+'</td><td>'+f(k,b.reserved[k])+'</td><td>'+f(k,b.available[k])+'</td></tr>'
return '<h3>budget</h3>'+(b.accountId!==b.threadId?'<p class="who">its continuation chain’s budget, kept under '+esc(b.accountId)+'</p>':'')+(b.released&&b.parentId?'<p class="who">ended: what it did not use went back to '+esc(b.parentId)+'</p>':'')+'<table class="budget"><tr><th></th><th>limit</th><th>spent itself</th><th>spent with children</th><th>reserved by open children</th><th>available</th></tr>'+row('spend')+row('tokens')+'</table>'}
const retriesLine=t=>t.retries>0||t.lastError?'<p class="retries">model calls retried: '+esc(t.retries)+(t.lastError?'; the last model error: '+esc(t.lastError.category)+' ('+clip(t.lastError.message,200)+')':'')+'</p>':''
async function renderDetail(){const t=data.threads.find(x=>x.id===selected);if(!t)return;const current=t.state?flat(t.state):'';
const WHY={dead_owner:'the process that ran it is gone',expired:'its lease expired unrenewed',no_lease:'no process has taken it'}
const STEP={callModel:s=>'calling the model (turn '+esc(s.turn)+(s.attempt>1?', attempt '+esc(s.attempt):'')+')',runTool:s=>'running the tool '+esc(s.tool)+' (turn '+esc(s.turn)+', call '+esc(s.callId)+')',waitUntil:s=>'waiting to retry'+(Number.isFinite(Number(s.dueAt))?' until '+esc(new Date(Number(s.dueAt)).toISOString()):''),decideLimit:s=>'deciding on its '+esc(s.limit)+' limit ('+esc(s.used)+' of '+esc(s.max)+')',settleChildren:()=>'cancelling its children'}
const now=t.step&&STEP[t.step.effect]?'<p class="who">now: '+STEP[t.step.effect](t.step)+'</p>':''
const who=t.orphan?'<p class="orphan">⚠ No live runtime process holds this thread ('+esc(WHY[t.orphan]||t.orphan)+'): it will not move until a runtime opens this directory or <code>spindle orphans recover '+esc(t.id)+'</code> settles it.</p>':t.heldBy?'<p class="who">run by pid '+esc(t.heldBy.pid)+' on '+esc(t.heldBy.host)+'</p>':''
const policy=(t.tools?'<p class="who">tools: '+esc(t.tools.join(', ')||'none')+'</p>':'')+(t.permissions?'<p class="who">permissions: '+esc(Object.entries(t.permissions).map(([k,v])=>k+': '+v).join(', '))+'</p>':'')
const lim=k=>t.limits&&t.limits[k]!==null?t.limits[k]:'∞';const u=t.usage||{turns:0,inputTokens:0,outputTokens:0,spend:0}
const approvals=t.approvals.map(a=>'<p class="waits">waits for a person at request '+esc(a.id)+': decide it above, under “waiting for a person”.</p>').join('')
const [log,rejected]=await Promise.all([api('/api/threads/'+t.id+'/transcript'),api('/api/threads/'+t.id+'/rejected')])
const refused=Array.isArray(rejected)&&rejected.length?'<h3>rejected answers</h3>'+rejected.map(r=>'<div class="rejected" data-request="'+esc(r.requestId)+'"><b>'+esc(r.summary)+'</b> to '+esc(r.requestId)+(r.at?' at '+esc(r.at):'')+': <span class="why">'+esc(r.reason||'requests.log.jsonl does not say why')+'</span><br><span class="id">kept as '+esc(r.file)+'</span></div>').join(''):''
document.getElementById('detail').innerHTML='<h2>'+esc(t.id)+' <span class="st '+t.status+'">'+t.status+'</span></h2>'+now+who+approvals+refused+policy+'<h3>statechart</h3><div id="chart">'+chart+'</div>'+
'<h3>cost against limits</h3><table class="cost"><tr><th>turns</th><td>'+u.turns+' / '+lim('turns')+'</td></tr><tr><th>tokens</th><td>'+(u.inputTokens+u.outputTokens)+' / '+lim('tokens')+'</td></tr><tr><th>spend</th><td>'+formatUsd(u.spend)+' / '+(t.limits&&t.limits.spend!==null?formatUsd(t.limits.spend):'∞')+'</td></tr></table>'+budgetTable(t.budget)+retriesLine(t)+
(t.result?'<h3>result</h3><pre>'+esc(t.result)+'</pre>':'')+(t.error?'<h3>error</h3><pre>'+esc(t.error.code+': '+t.error.message)+'</pre>':'')+
'<h3>transcript</h3><table>'+log.map(e=>'<tr><td>'+e.seq+'</td><td>'+esc(e.type)+'</td><td><pre>'+clip(JSON.stringify(e.data),400)+'</pre></td></tr>').join('')+'</table>'
for(const el of document.querySelectorAll('#chart [data-state]')){const s=el.dataset.state;el.classList.toggle('current',s===current);el.classList.toggle('within',current.startsWith(s+'.'))}}
// What waits for a person, from every thread, first on the page. Drawn again only when a request
// or an answer changes, so that a person typing in it is not interrupted by the refresh; what
// they typed is kept by request id in case it is drawn again meanwhile.
const requests={}
const pretty=v=>JSON.stringify(v,null,2)
const draft=(id,field,fallback)=>drafts[id]&&drafts[id][field]!==undefined?drafts[id][field]:fallback
const answered=a=>'<span class="answered">'+(a.answer.approved===null?'answered':a.answer.approved?'approved':'denied')+(a.answer.by?' by '+esc(a.answer.by):'')+': '+(a.answer.state==='taken'?'the runtime is acting on it':'waiting for the runtime running this directory to act on it')+'</span>'
const due=a=>{if(!a.deadline)return '';const late=Date.parse(a.deadline)<=Date.now();return ' · deadline '+esc(a.deadline)+(late?' <span class="failed">(overdue)</span>':'')}
function card(t,a){requests[a.id]=a
const head='<div class="approval '+esc(a.kind)+'" data-request="'+esc(a.id)+'" data-thread="'+esc(t.id)+'"><div class="who"><a href="#" class="open">'+esc(t.directive)+' <span class="id">'+esc(t.id)+'</span></a> · request '+esc(a.id)+due(a)+'</div>'
const tail='<span class="failed">'+esc(failures[a.id]||'')+'</span></div>'
if(a.kind==='tool_approval')return head+'<b>'+esc(a.message)+'</b><div>tool <code>'+esc(a.tool)+'</code>, call '+esc(a.callId)+'; its input (edit it to run the call with other input):</div><textarea class="input" spellcheck="false" rows="'+Math.min(16,pretty(a.input).split('\\n').length+1)+'"'+(a.answer?' disabled':'')+'>'+esc(draft(a.id,'input',pretty(a.input)))+'</textarea><br>'+(a.answer?answered(a):'<button class="approve">Approve</button> <input type="text" class="reason" placeholder="why not (the model reads it)" value="'+esc(draft(a.id,'reason',''))+'"> <button class="deny">Deny</button>')+tail
if(a.kind==='question'){const q=a.request&&typeof a.request==='object'?a.request:{};const asked=typeof q.question==='string'?q.question:JSON.stringify(a.request)
const choices=Array.isArray(q.choices)?q.choices.map((c,i)=>'<button class="choice" data-choice="'+i+'">'+esc(c)+'</button>').join(''):''
return head+'<div class="who">'+esc(a.tool)+' asks:</div><div class="asked">'+esc(asked)+'</div>'+(a.answer?answered(a):(choices?'<div>'+choices+'</div>':'')+'<input type="text" class="answer-text" placeholder="your answer" value="'+esc(draft(a.id,'answer',''))+'"> <button class="answer">Answer</button>')+tail}
return head+'<b>'+esc(a.message)+'</b><br>proposed '+esc(a.limit)+': '+esc(a.limit==='spend'&&a.proposed!==null?formatUsd(a.proposed):a.proposed)+' '+(a.answer?answered(a):'<button class="approve">Approve</button> <button class="deny">Deny</button>')+tail}
function renderWaiting(){const open=data.threads.flatMap(t=>t.approvals.map(a=>[t,a]))
const key=JSON.stringify([open.map(([t,a])=>[t.id,a.id,a.answer]),failures]);if(key===waitingKey)return;waitingKey=key
const el=document.getElementById('waiting')
el.innerHTML=open.length?'<h2>waiting for a person ('+open.length+')</h2>'+open.map(([t,a])=>card(t,a)).join(''):'<p class="calm">Nothing waits for a person.</p>'
for(const box of el.querySelectorAll('.approval')){const id=box.dataset.request
for(const [sel,field] of [['.input','input'],['.reason','reason'],['.answer-text','answer']]){const f=box.querySelector(sel);if(f)f.oninput=()=>{(drafts[id]??={})[field]=f.value}}
box.querySelector('.open').onclick=e=>{e.preventDefault();selected=box.dataset.thread;refresh()}
const a=requests[id];const on=(sel,fn)=>{const b=box.querySelector(sel);if(b)b.onclick=fn}
on('.approve',()=>{if(a.kind!=='tool_approval')return decide(box,'approve',{})
const text=box.querySelector('.input').value;let input;try{input=JSON.parse(text)}catch(err){failures[id]=' The input is not valid JSON ('+err.message+'): nothing was sent.';waitingKey='';return renderWaiting()}
decide(box,'approve',JSON.stringify(input)===JSON.stringify(a.input)?{}:{input})})
on('.deny',()=>{const r=box.querySelector('.reason');decide(box,'deny',r&&r.value.trim()?{reason:r.value.trim()}:{})})
on('.answer',()=>{const v=box.querySelector('.answer-text').value;if(!v.trim()){failures[id]=' Type an answer first.';waitingKey='';return renderWaiting()}decide(box,'answer',{answer:v})})
for(const b of box.querySelectorAll('.choice'))b.onclick=()=>decide(box,'answer',{answer:a.request.choices[Number(b.dataset.choice)]})}}
async function decide(box,what,payload){for(const b of box.querySelectorAll('button'))b.disabled=true;const id=box.dataset.request
const r=await api('/api/threads/'+box.dataset.thread+'/'+what,{method:'POST',body:JSON.stringify(payload)}).catch(err=>({error:'NETWORK',message:String(err)}))
if(r.error)failures[id]=' '+r.error+': '+r.message;else{delete failures[id];delete drafts[id]}waitingKey='';await refresh()}
refresh();setInterval(refresh,1000)
</script></body></html>`
