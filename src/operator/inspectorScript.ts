/**
 * The page's own script, in the browser: the events channel (`/events`, with the session token)
 * that pushes the overview when it changes and reply deltas as they stream, the thread tree, and
 * the selected thread — its actions (Cancel, Resume), its state folded to where it is with the full
 * statechart on demand, its cost against limits and budget. Each part is drawn again only when
 * what it shows changed; nothing reloads the page. EventSource reconnects by itself when the
 * connection drops, and the header says whether the page is live.
 */
import { formatUsd } from '../base/money.js'

export const CORE_SCRIPT = `
let data=null,selected=decodeURIComponent(location.hash.slice(1))||null
const failures={},drafts={},opened={}
${String(formatUsd)}
const $=id=>document.getElementById(id)
const api=(path,opts={})=>fetch(path,{...opts,headers:{'x-spindle-token':token,'content-type':'application/json'}}).then(r=>r.json()).catch(err=>({error:'NETWORK',message:String(err)}))
const post=(id,what,payload)=>api('/api/threads/'+id+'/'+what,{method:'POST',body:JSON.stringify(payload)})
const esc=s=>String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))
// Cut, then escape (an entity cut in half shows as text: {&qu), by characters not UTF-16 units, and say so.
const clip=(s,max)=>{const c=Array.from(String(s));return c.length<=max?esc(s):esc(c.slice(0,max).join(''))+'<span class="cut" title="cut at '+max+' characters">… '+(c.length-max)+' more characters</span>'}
const thread=id=>data&&data.threads.find(x=>x.id===id)
// Which <details> a person opened or folded, by key, so a push that draws them again keeps them so.
const isOpen=(key,fallback)=>(opened[key]??fallback)?' open':''
const remember=root=>{for(const d of root.querySelectorAll('details[data-key]'))d.ontoggle=()=>{opened[d.dataset.key]=d.open}}
let chart='';api('/api/statechart').then(c=>{chart=c.svg||'';detailKey='';renderDetail()})
async function refresh(){const v=await api('/api/overview');if(!v.error)apply(v)}
// Opened on nothing in particular, the page shows the first thread that waits for a person, else the first.
function apply(v){data=v;if(!selected||!thread(selected)){const first=data.threads.find(t=>waitingFor(t.id))||data.threads[0];if(first)selected=first.id}
renderWaiting();renderTree();renderDetail()}
function select(id){selected=id;history.replaceState(null,'','#'+encodeURIComponent(id));treeKey='';renderTree();renderDetail()}
let treeKey=''
const waitingFor=id=>{const t=thread(id);return t&&!t.requested.cancel&&(t.approvals.some(a=>!a.answer)||(t.resumable&&!t.requested.resume))}
function nodesHtml(nodes,depth){return nodes.map(n=>{const b=n.budget&&n.budget.limit!==null?' <span title="spent with its children, of its budget">'+formatUsd(n.budget.spent)+' of '+formatUsd(n.budget.limit)+'</span>':formatUsd(n.spend)
return '<div class="node'+(n.id===selected?' sel':'')+'" data-id="'+esc(n.id)+'" title="'+esc(n.id)+'" style="padding-left:'+(depth*16+6)+'px">'+(n.previousThreadId?'<span title="continues the thread above">↪</span>':'')+'<div class="line"><span class="name">'+esc(n.directive)+'</span><span class="id">'+esc(n.id)+'</span></div><div class="line"><span class="st '+n.status+'">'+n.status+'</span>'+(data.orphans[n.id]?'<span class="orphan" title="no live runtime process holds it">⚠ orphan</span>':'')+(waitingFor(n.id)?'<span class="waits">waits for you</span>':'')+'<span class="money">'+b+'</span></div></div>'+nodesHtml(n.children,depth+1)}).join('')}
function renderTree(){const key=JSON.stringify([data.tree,data.orphans,selected,data.threads.map(t=>waitingFor(t.id))]);if(key===treeKey)return;treeKey=key
$('nodes').innerHTML=nodesHtml(data.tree,0)||'<p class="note">'+PLACE.empty+'</p>'
for(const el of document.querySelectorAll('.node'))el.onclick=()=>select(el.dataset.id)}
// The budget as rt.budget gives it: what it and its descendants spent against its limit, what open children hold, what is left.
function budgetTable(b){if(!b)return '';const f=(k,v)=>v===null?'∞':k==='spend'?formatUsd(v):esc(v)
const row=k=>'<tr><th>'+k+'</th><td>'+f(k,b.limit[k])+'</td><td>'+f(k,b.spent.own[k])+'</td><td>'+f(k,b.spent.total[k])+'</td><td>'+f(k,b.reserved[k])+'</td><td>'+f(k,b.available[k])+'</td></tr>'
return '<h3>budget</h3>'+(b.accountId!==b.threadId?'<p class="note">its continuation chain’s budget, kept under '+esc(b.accountId)+'</p>':'')+(b.released&&b.parentId?'<p class="note">ended: what it did not use went back to '+esc(b.parentId)+'</p>':'')+'<table class="budget"><tr><th></th><th>limit</th><th>spent itself</th><th>with children</th><th>reserved</th><th>available</th></tr>'+row('spend')+row('tokens')+'</table>'}
const bar=(used,max)=>max===null||!(max>0)?'':'<div class="bar"><i class="'+(used/max>0.8?'high':'')+'" style="width:'+Math.min(100,Math.round(100*used/max))+'%"></i></div>'
function costTable(t){const u=t.usage||{turns:0,inputTokens:0,outputTokens:0,spend:0};const l=k=>t.limits?t.limits[k]:null;const tokens=u.inputTokens+u.outputTokens
const row=(k,used,shown,max,maxShown)=>'<tr><th>'+k+'</th><td>'+shown+' / '+(max===null?'∞':maxShown)+bar(used,max)+'</td></tr>'
return '<h3>cost against limits</h3><table class="cost">'+row('turns',u.turns,esc(u.turns),l('turns'),esc(l('turns')))+row('tokens',tokens,esc(tokens),l('tokens'),esc(l('tokens')))+row('spend',u.spend,formatUsd(u.spend),l('spend'),l('spend')===null?'':formatUsd(l('spend')))+'</table>'+budgetTable(t.budget)+retriesLine(t)}
const retriesLine=t=>t.retries>0||t.lastError?'<p class="retries">model calls retried: '+esc(t.retries)+(t.lastError?'; the last model error: '+esc(t.lastError.category)+' ('+clip(t.lastError.message,200)+')':'')+'</p>':''
// The statechart folded to where the thread is: its state path, and the transitions that can take it on.
function statePanel(t){const paths=t.statePaths||[]
const crumbs=paths.map(p=>'<div class="crumbs">'+p.map((k,i)=>i===p.length-1?'<span class="here state-here">'+esc(k)+'</span>':'<span>'+esc(k)+'</span>').join('<span class="sep">›</span>')+'</div>').join('')||'<p class="note">No checkpoint yet.</p>'
const by={};for(const n of t.next)(by[n.event]??=[]).push(n.target)
const next=t.next.length?'<div class="next" title="the events that can take it on from here, and where to">'+Object.entries(by).map(([e,to])=>'<span><b>'+esc(e==='always'?'(at once)':e)+'</b> → '+to.map(esc).join(' | ')+'</span>').join('')+'</div>':''
return '<h3>state</h3>'+crumbs+next+'<details class="chart" data-key="chart"'+isOpen('chart',false)+'><summary>full statechart</summary><div id="chart">'+(chart||'loading…')+'</div></details>'}
const WHY={dead_owner:'the process that ran it is gone',expired:'its lease expired unrenewed',no_lease:'no process has taken it'}
const STEP={callModel:s=>'calling the model (turn '+esc(s.turn)+(s.attempt>1?', attempt '+esc(s.attempt):'')+')',runTool:s=>'running the tool '+esc(s.tool)+' (turn '+esc(s.turn)+', call '+esc(s.callId)+')',waitUntil:s=>'waiting to retry'+(Number.isFinite(Number(s.dueAt))?' until '+esc(new Date(Number(s.dueAt)).toISOString()):''),decideLimit:s=>'deciding on its '+esc(s.limit)+' limit ('+esc(s.used)+' of '+esc(s.max)+')',settleChildren:()=>'cancelling its children'}
function headHtml(t){const live=t.status==='running'||t.status==='created'||t.status==='suspended'
const key='thread:'+t.id
const actions=(t.resumable?(t.requested.resume?'<span class="note">resume requested</span>':'<button class="resume">Resume</button>'):'')+(live?(t.requested.cancel?'<span class="note">cancel requested: waiting for the runtime</span>':'<input type="text" class="cancel-reason" placeholder="why cancel (recorded)" value="'+esc(drafts[key]&&drafts[key].reason||'')+'"><button class="cancel">Cancel</button>'):'')
const now=t.step&&STEP[t.step.effect]?'<p class="note">now: '+STEP[t.step.effect](t.step)+'</p>':''
const who=t.orphan?'<p class="orphan">⚠ No live runtime process holds this thread ('+esc(WHY[t.orphan]||t.orphan)+'): '+PLACE.orphan.replace('ID',esc(t.id))+'</p>':t.heldBy?'<p class="note">run by pid '+esc(t.heldBy.pid)+' on '+esc(t.heldBy.host)+'</p>':''
const waits=t.approvals.map(a=>'<p class="waits">waits for a person at request '+esc(a.id)+': decide it above, under “waiting for a person”.</p>').join('')
const policy=(t.tools?'<p class="note">tools: '+esc(t.tools.join(', ')||'none')+'</p>':'')+(t.permissions?'<p class="note">permissions: '+esc(Object.entries(t.permissions).map(([k,v])=>k+': '+v).join(', '))+'</p>':'')
const problems=t.problems.map(p=>'<p class="problem">'+esc(p.code+': '+p.message)+'</p>').join('')
return '<div class="title"><h2>'+esc(t.directive)+'</h2><span class="id">'+esc(t.id)+'</span><span class="st pill '+t.status+'">'+t.status+'</span><div class="actions">'+actions+'</div></div><p class="failed">'+esc(failures[key]||'')+'</p>'+now+who+waits+problems+policy+
(t.result?'<h3>'+(t.status==='completed'?'result':'partial result')+'</h3><div class="result">'+clip(t.result,4000)+'</div>':'')+(t.error?'<h3>error</h3><div class="result failed">'+esc(t.error.code+': '+t.error.message)+'</div>':'')}
let detailKey=''
function renderDetail(){const el=$('detail');const t=selected&&thread(selected)
if(!t){detailKey='';el.innerHTML='<p class="empty">'+(data&&data.threads.length?'Select a thread on the left to read its conversation, its state and its cost.':'No threads yet.')+'</p>';return}
if(el.dataset.thread!==t.id){el.dataset.thread=t.id;conv=null;el.innerHTML='<div id="head"></div><div class="panels"><div class="panel" id="state-panel"></div><div class="panel" id="cost-panel"></div></div><div id="rejected"></div><h3>conversation</h3><div class="conversation"><div id="conversation"><p class="note">loading…</p></div><div id="streaming"></div></div><details class="raw" id="raw-details"><summary><h3>raw transcript</h3></summary><div id="raw"></div></details>';detailKey=''
$('raw-details').ontoggle=()=>{if($('raw-details').open)loadRaw(t.id)}}
const key=JSON.stringify([t,failures['thread:'+t.id],chart.length]);if(key!==detailKey){detailKey=key
$('head').innerHTML=headHtml(t);$('state-panel').innerHTML=statePanel(t);$('cost-panel').innerHTML=costTable(t);remember(el);wireHead(t)
const current=(t.statePaths||[]).map(p=>p.join('.'))
for(const s of el.querySelectorAll('#chart [data-state]')){const p=s.dataset.state;s.classList.toggle('current',current.includes(p));s.classList.toggle('within',current.some(c=>c.startsWith(p+'.')))}}
if(!conv||conv.id!==t.id||conv.seq!==t.seq||conv.status!==t.status){conv={id:t.id,seq:t.seq,status:t.status,items:conv&&conv.id===t.id?conv.items:[],omitted:0};loadConversation(t)}}
function wireHead(t){const key='thread:'+t.id,head=$('head')
const reason=head.querySelector('.cancel-reason');if(reason)reason.oninput=()=>{(drafts[key]??={}).reason=reason.value}
const act=async(what,payload)=>{for(const b of head.querySelectorAll('button'))b.disabled=true;const r=await post(t.id,what,payload)
if(r.error)failures[key]=r.error+': '+r.message;else{delete failures[key];delete drafts[key]}detailKey='';waitingKey='';await refresh()}
const c=head.querySelector('.cancel');if(c)c.onclick=()=>act('cancel',reason&&reason.value.trim()?{reason:reason.value.trim()}:{})
const r=head.querySelector('.resume');if(r)r.onclick=()=>act('resume',{})}
// Pushed: the overview when it changed, reply deltas as they stream, and what the server could not read.
function connect(){const es=new EventSource('/events?token='+encodeURIComponent(token));const live=$('live')
es.onopen=()=>{live.className='on';live.textContent='live'}
// A refused reconnection (a new inspector has a new token) closes the stream for good: say what to do.
es.onerror=()=>{live.className='off';live.textContent=es.readyState===EventSource.CLOSED?'disconnected: open the link spindle inspect printed':'reconnecting…'}
es.addEventListener('overview',e=>{const v=JSON.parse(e.data);$('problem').innerHTML='';apply(v)})
es.addEventListener('reply',e=>onDelta(JSON.parse(e.data)))
es.addEventListener('problem',e=>{const p=JSON.parse(e.data);$('problem').innerHTML='<p class="problem">'+esc(p.code+': '+p.message)+'</p>'})}
`
