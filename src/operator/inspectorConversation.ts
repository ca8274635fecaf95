/**
 * The selected thread's conversation, in the browser: instructions, the task, each assistant reply,
 * each tool call and result, and what happened between them, each a `<details>` a person opens
 * or folds (remembered across pushes), with the time it was recorded. A reply still streaming from
 * an in-process runtime shows below the recorded ones as its deltas arrive, and gives way to the
 * recorded reply once the transcript has it; a stream that broke shows struck through.
 */
export const CONVERSATION_SCRIPT = `
let conv=null
// Per thread, the reply streaming now: {turn, attempt, text, calls:[{callId, tool, input}], state, reason}.
const partials={}
const clock=iso=>{const d=new Date(iso);return isNaN(d)?'':d.toLocaleTimeString('en-GB',{hour12:false})}
const stamp=iso=>'<time datetime="'+esc(iso)+'" title="'+esc(iso)+'">'+clock(iso)+'</time>'
const preview=s=>{const one=Array.from(String(s).replace(/\\s+/g,' ').trim());return esc(one.length>160?one.slice(0,160).join('')+'…':one.join(''))}
const asText=v=>typeof v==='string'?v:JSON.stringify(v,null,2)
const ROLE={system:'instructions',user:'user',assistant:'assistant',tool_call:'tool call',tool_result:'result'}
// Long texts open folded; the task and the replies, which a person reads first, open unfolded.
const openByDefault=(m,text)=>m.kind==='user'||m.kind==='assistant'||(m.kind==='tool_call')||(m.kind==='tool_result'&&text.length<400)
function msgHtml(m,i){const key='m:'+conv.id+':'+m.seq+':'+i
if(m.kind==='event')return '<details class="event" data-key="'+key+'"'+isOpen(key,false)+'><summary><span>· '+esc(m.text)+'</span>'+stamp(m.at)+'</summary><pre>'+clip(JSON.stringify(m.data,null,2),4000)+'</pre></details>'
let text='',head='',meta=''
if(m.kind==='system'||m.kind==='user'){text=m.text}
else if(m.kind==='assistant'){text=m.text;meta='turn '+esc(m.turn)+(m.attempt>1?', attempt '+esc(m.attempt):'')+(m.usage?' · '+esc(m.usage):'')+(m.model&&m.model!=='default'?' · '+esc(m.model):'')}
else if(m.kind==='tool_call'){head='<code>'+esc(m.tool)+'</code> ';text=asText(m.input);meta='call '+esc(m.callId)}
else if(m.kind==='tool_result'){head='<code>'+esc(m.tool)+'</code> '+(m.ok?'':'<span class="failed">failed</span> ');text=asText(m.output);meta='call '+esc(m.callId)}
const body=m.kind==='tool_call'||m.kind==='tool_result'?'<pre>'+clip(text,20000)+'</pre>':'<div class="text">'+(text?clip(text,20000):'<span class="note">'+(m.kind==='assistant'&&conv.items[i+1]&&conv.items[i+1].kind==='tool_call'?'(no text: it called tools)':'(no text)')+'</span>')+'</div>'
return '<details class="msg '+m.kind+(m.kind==='tool_result'&&!m.ok?' failed-call':'')+'" data-key="'+key+'" data-seq="'+m.seq+'"'+(m.turn!==undefined?' data-turn="'+m.turn+'" data-attempt="'+(m.attempt??'')+'"':'')+isOpen(key,openByDefault(m,text))+'><summary><span class="role">'+ROLE[m.kind]+'</span>'+head+'<span class="preview">'+preview(text)+'</span>'+(meta?'<span class="meta">'+meta+'</span>':'')+stamp(m.at)+'</summary><div class="body">'+body+'</div></details>'}
function partialHtml(p){const calls=p.calls.map(c=>'<details class="msg tool_call streaming" open><summary><span class="role">tool call</span><code>'+esc(c.tool)+'</code> <span class="meta">call '+esc(c.callId)+'</span></summary><div class="body"><pre>'+esc(c.input)+'</pre></div></details>').join('')
return '<details class="msg assistant '+(p.state==='discarded'?'discarded':'streaming')+'" open data-turn="'+p.turn+'" data-attempt="'+p.attempt+'"><summary><span class="role">assistant</span><span class="preview"></span><span class="meta">turn '+esc(p.turn)+(p.attempt>1?', attempt '+esc(p.attempt):'')+(p.state==='discarded'?' · discarded'+(p.reason?': '+esc(p.reason):''):p.state==='recorded'?' · recorded':'')+'</span></summary><div class="body"><div class="text">'+esc(p.text)+'</div></div></details>'+calls}
function renderPartial(){const el=$('streaming');if(!el)return;const p=selected&&partials[selected];el.innerHTML=p?partialHtml(p):''}
function renderConversation(){const el=$('conversation');if(!el||!conv||conv.id!==selected)return
el.innerHTML=(conv.omitted?'<p class="note">'+conv.omitted+' earlier items not shown.</p>':'')+(conv.items.length?conv.items.map(msgHtml).join(''):'<p class="note">Nothing recorded yet.</p>')
remember(el);settlePartial(selected);renderPartial()}
// The recorded reply takes the place of the streamed one as soon as the transcript has it.
function settlePartial(id){const p=partials[id];if(!p||!conv||conv.id!==id)return
if(conv.items.some(m=>m.kind==='assistant'&&m.turn===p.turn&&m.attempt===p.attempt))delete partials[id]}
async function loadConversation(t){const want={id:t.id,seq:t.seq,status:t.status}
const [c,rejected]=await Promise.all([api('/api/threads/'+t.id+'/conversation'),api('/api/threads/'+t.id+'/rejected')])
if(selected!==want.id)return
if(c.error){conv={...want,items:[],omitted:0};$('conversation').innerHTML='<p class="problem">'+esc(c.error+': '+c.message)+'</p>';return}
conv={...want,...c,seq:want.seq};renderRejected(rejected);renderConversation();if($('raw-details').open)loadRaw(want.id)}
// The transcript as recorded, entry by entry, on demand: what the conversation is made from.
async function loadRaw(id){const log=await api('/api/threads/'+id+'/transcript');const el=$('raw');if(!el||selected!==id)return
el.innerHTML=Array.isArray(log)?'<table class="raw">'+log.map(e=>'<tr><td>'+e.seq+'</td><td>'+esc(e.type)+'</td><td><pre>'+clip(JSON.stringify(e.data),400)+'</pre></td></tr>').join('')+'</table>':'<p class="problem">'+esc(log.error+': '+log.message)+'</p>'}
function renderRejected(rejected){const el=$('rejected');if(!el)return
el.innerHTML=Array.isArray(rejected)&&rejected.length?'<h3>rejected answers</h3>'+rejected.map(r=>'<div class="rejected" data-request="'+esc(r.requestId)+'"><b>'+esc(r.summary)+'</b> to '+esc(r.requestId)+(r.at?' at '+esc(r.at):'')+': <span class="why">'+esc(r.reason||'requests.log.jsonl does not say why')+'</span><br><span class="id">kept as '+esc(r.file)+'</span></div>').join(''):''}
function onDelta(d){let p=partials[d.threadId]
if(d.type==='reply_recorded'){if(p){p.state='recorded';if(d.threadId===selected)renderPartial()}
// The transcript has the reply now, whatever the next poll says.
if(d.threadId===selected){const t=thread(selected);if(t)loadConversation(t)}return}
if(!p||p.turn!==d.turn||p.attempt!==d.attempt||p.state!=='streaming')p=partials[d.threadId]={turn:d.turn,attempt:d.attempt,text:'',calls:[],state:'streaming',reason:null}
if(d.type==='reply_discarded'){p.state='discarded';p.reason=d.reason||null}
else if(d.type==='text')p.text+=d.text||''
else if(d.type==='tool_call')p.calls.push({callId:d.callId,tool:d.toolName||'',input:''})
else if(d.type==='tool_input'){const c=p.calls.find(c=>c.callId===d.callId);if(c)c.input+=d.text||''}
if(d.threadId===selected)renderPartial()}
`
