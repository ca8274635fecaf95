/**
 * The page's first section, in the browser: everything that waits for a person, from every thread —
 * a limit approval (Approve at the proposed or another limit, Deny), a tool approval (its input to
 * edit before Approve, Deny with a reason the model reads), a question (its choices, or an answer
 * typed), a thread suspended for an error or a budget (Resume) — each with Cancel for its thread.
 * Drawn again only when a request or an answer changes, so that a person typing in it is not
 * interrupted by a push; what they typed is kept by request id in case it is drawn again meanwhile.
 */
export const WAITING_SCRIPT = `
let waitingKey=''
const requests={}
const pretty=v=>JSON.stringify(v,null,2)
const draft=(id,field,fallback)=>drafts[id]&&drafts[id][field]!==undefined?drafts[id][field]:fallback
const answered=a=>'<span class="answered">'+(a.answer.approved===null?'answered':a.answer.approved?'approved':'denied')+(a.answer.by?' by '+esc(a.answer.by):'')+': '+(a.answer.state==='taken'?'the runtime is acting on it':'waiting for '+PLACE.runner+' to act on it')+'</span>'
const due=a=>{if(!a.deadline)return '';const late=Date.parse(a.deadline)<=Date.now();return ' · deadline '+esc(a.deadline)+(late?' <span class="failed">(overdue)</span>':'')}
const KIND={limit_escalation:'limit',tool_approval:'tool call',question:'question',resume:'suspended'}
// Cancel ends the thread, whatever it waits at; a request already written shows instead of the button.
const cancelButton=t=>t.requested.cancel?'<span class="note">cancel requested: waiting for the runtime</span>':'<button class="cancel" title="Cancel the thread: it ends cancelled with its partial result">Cancel thread</button>'
function card(t,a){requests[a.id]=a
const head='<div class="approval '+esc(a.kind)+'" data-request="'+esc(a.id)+'" data-thread="'+esc(t.id)+'"><div class="who"><span class="kind">'+esc(KIND[a.kind]||a.kind)+'</span><a href="#" class="open">'+esc(t.directive)+'</a> <span class="id">'+esc(t.id)+'</span>'+(a.kind==='resume'?'':' · request '+esc(a.id))+due(a)+'</div>'
const tail='<div class="failed">'+esc(failures[a.id]||'')+'</div></div>'
// Once a cancel is requested the thread ends whatever is decided here: no more buttons.
const decided=a.answer?'<div class="row">'+answered(a)+'</div>':t.requested.cancel?'<div class="row note">cancel requested: waiting for '+PLACE.runner+' to act on it</div>':''
if(a.kind==='tool_approval'){const text=pretty(a.input);return head+'<b>'+esc(a.message)+'</b><div class="note">tool <code>'+esc(a.tool)+'</code>, call '+esc(a.callId)+'; its input — edit it to run the call with other input:</div><textarea class="input" spellcheck="false" rows="'+Math.min(14,text.split('\\n').length+1)+'"'+(a.answer?' disabled':'')+'>'+esc(draft(a.id,'input',text))+'</textarea>'+(decided||'<div class="row"><button class="approve">Approve</button><input type="text" class="reason" placeholder="why not (the model reads it)" value="'+esc(draft(a.id,'reason',''))+'"><button class="deny">Deny</button>'+cancelButton(t)+'</div>')+tail}
if(a.kind==='question'){const q=a.request&&typeof a.request==='object'?a.request:{};const asked=typeof q.question==='string'?q.question:JSON.stringify(a.request)
const choices=Array.isArray(q.choices)?q.choices.map((c,i)=>'<button class="choice" data-choice="'+i+'">'+esc(c)+'</button>').join(''):''
return head+'<div class="note">'+esc(a.tool)+' asks:</div><div class="asked">'+esc(asked)+'</div>'+(decided||(choices?'<div class="row">'+choices+'</div>':'')+'<div class="row"><input type="text" class="answer-text" placeholder="your answer" value="'+esc(draft(a.id,'answer',''))+'"><button class="answer">Answer</button>'+cancelButton(t)+'</div>')+tail}
if(a.kind==='resume')return head+'<b>'+esc(a.message)+'</b>'+(t.requested.resume?'<div class="row answered">resume requested: waiting for '+PLACE.runner+' to act on it</div>':'<div class="row"><button class="resume">Resume</button>'+cancelButton(t)+'</div>')+tail
return head+'<b>'+esc(a.message)+'</b>'+(a.proposed===null?'<div class="note">No new limit is proposed: give one.</div>':'')+(decided||'<div class="row"><label>new '+esc(a.limit)+(a.limit==='spend'?' (USD)':'')+' limit <input type="number" class="limit-value" min="0" step="any" value="'+esc(draft(a.id,'limit',a.proposed===null?'':a.proposed))+'"></label><button class="approve">Approve</button><button class="deny">Deny</button>'+cancelButton(t)+'</div>')+tail}
// What a suspended thread at no request waits for: a person to resume it.
const WHY_SUSPENDED={error:'its model calls kept failing',context_length:'its conversation outgrew the model\\'s context window',budget:'it ran out of budget',crash_loop:'the processes running it kept dying',limit:'it reached a limit'}
function resumeRequest(t){return {id:'resume-'+t.id,kind:'resume',message:'Suspended: '+(WHY_SUSPENDED[t.suspendReason]||t.suspendReason||'no reason recorded')+(t.lastError?' (last error: '+t.lastError.category+', '+t.lastError.message+')':'')+'. Resume carries it on from where it stopped.'}}
function waitingItems(){return data.threads.flatMap(t=>t.approvals.length?t.approvals.map(a=>[t,a]):t.resumable?[[t,resumeRequest(t)]]:[])}
function renderWaiting(){const open=waitingItems()
const key=JSON.stringify([open.map(([t,a])=>[t.id,a.id,a.answer,t.requested]),failures]);if(key===waitingKey)return;waitingKey=key
const el=$('waiting')
el.innerHTML=open.length?'<h2>waiting for a person ('+open.length+')</h2><div class="cards">'+open.map(([t,a])=>card(t,a)).join('')+'</div>':'<p class="calm">Nothing waits for a person.</p>'
for(const box of el.querySelectorAll('.approval')){const id=box.dataset.request,thread=box.dataset.thread
for(const [sel,field] of [['.input','input'],['.reason','reason'],['.answer-text','answer'],['.limit-value','limit']]){const f=box.querySelector(sel);if(f)f.oninput=()=>{(drafts[id]??={})[field]=f.value}}
box.querySelector('.open').onclick=e=>{e.preventDefault();select(thread)}
const a=requests[id];const on=(sel,fn)=>{const b=box.querySelector(sel);if(b)b.onclick=fn}
const refuse=text=>{failures[id]=text;waitingKey='';renderWaiting()}
on('.approve',()=>{if(a.kind==='limit_escalation'){const v=box.querySelector('.limit-value').value.trim()
if(v===''&&a.proposed===null)return refuse('Give a new '+a.limit+' limit first.')
const n=Number(v);if(v!==''&&!(n>0))return refuse('The new limit must be a positive number (got '+v+').')
return decide(box,'approve',v===''||n===a.proposed?{}:{limits:{[a.limit]:a.limit==='spend'?n:Math.round(n)}})}
const text=box.querySelector('.input').value;let input;try{input=JSON.parse(text)}catch(err){return refuse('The input is not valid JSON ('+err.message+'): nothing was sent.')}
decide(box,'approve',JSON.stringify(input)===JSON.stringify(a.input)?{}:{input})})
on('.deny',()=>{const r=box.querySelector('.reason');decide(box,'deny',r&&r.value.trim()?{reason:r.value.trim()}:{})})
on('.answer',()=>{const v=box.querySelector('.answer-text').value;if(!v.trim())return refuse('Type an answer first.');decide(box,'answer',{answer:v})})
on('.resume',()=>decide(box,'resume',{}))
on('.cancel',()=>decide(box,'cancel',{}))
for(const b of box.querySelectorAll('.choice'))b.onclick=()=>decide(box,'answer',{answer:a.request.choices[Number(b.dataset.choice)]})}}
// Every decision is a POST the server turns into a request or response file; the push that follows shows its effect.
async function decide(box,what,payload){for(const b of box.querySelectorAll('button'))b.disabled=true;const id=box.dataset.request
const r=await post(box.dataset.thread,what,payload)
if(r.error)failures[id]=r.error+': '+r.message;else{delete failures[id];delete drafts[id]}waitingKey='';await refresh()}
`
