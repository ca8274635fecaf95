/**
 * The inspector page's stylesheet: a header, what waits for a person in full width first, then the
 * thread tree beside the selected thread (its state, cost and conversation). System fonts only:
 * the page loads nothing from anywhere but the inspector itself.
 */
export const INSPECTOR_STYLES = `
*{box-sizing:border-box}
:root{--ink:#1d2330;--muted:#5d6475;--faint:#8a90a0;--line:#e3e6ee;--bg:#f6f7fa;--card:#fff;--wait:#b45f06;--wait-bg:#fff7ea;--ok:#17803d;--run:#1769c2;--bad:#c2261d;--purple:#7a3ec2}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:var(--bg);margin:0;min-height:100vh;display:grid;grid-template-rows:auto auto 1fr;grid-template-columns:320px 1fr;grid-template-areas:"top top" "waiting waiting" "tree main"}
header{grid-area:top;display:flex;align-items:center;gap:12px;padding:8px 16px;background:#1d2330;color:#fff}
header h1{font-size:15px;margin:0;font-weight:600;letter-spacing:.2px}header .dir{color:#b9c0d0;font-size:12px}
#live{margin-left:auto;font-size:12px;color:#b9c0d0}#live.on::before{content:"● ";color:#4ade80}#live.off::before{content:"● ";color:#f87171}
#waiting{grid-area:waiting;padding:10px 16px;background:var(--wait-bg);border-bottom:1px solid #f0d9b5;max-height:46vh;overflow:auto}
#waiting h2{font-size:15px;margin:0 0 8px;color:var(--wait)}#waiting .calm{margin:0;color:var(--ok);font-weight:600}
#waiting .cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:10px}
.approval{border:1px solid #e8c48c;border-left:4px solid var(--wait);padding:10px 12px;border-radius:8px;background:#fff}
.approval .who{font-size:12px;color:var(--muted)}.approval .who a{color:var(--ink);font-weight:600;text-decoration:none}.approval .who a:hover{text-decoration:underline}
.approval .kind{display:inline-block;font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.5px;color:var(--wait);margin-right:6px}
.approval b{display:block;white-space:pre-wrap;margin:4px 0;font-weight:500}.approval .asked{white-space:pre-wrap;font-weight:600;font-size:15px;margin:4px 0}
.approval textarea{width:100%;font:13px ui-monospace,SFMono-Regular,Menlo,monospace;border:1px solid #cfd4df;border-radius:6px;padding:6px;margin:4px 0}
.approval input[type=text],.approval input[type=number],.actions input[type=text]{border:1px solid #cfd4df;border-radius:6px;padding:4px 6px;font:inherit}
.approval input.answer-text{width:60%}.approval input.limit-value{width:120px;margin-left:4px}.approval input.reason{width:45%}
.row{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-top:6px}
button{font:inherit;font-size:13px;border:1px solid #c3c8d4;background:#fff;border-radius:6px;padding:4px 12px;cursor:pointer}
button:hover{background:#f0f2f7}button:disabled{opacity:.5;cursor:default}
button.approve,button.answer,button.resume{background:var(--ok);border-color:var(--ok);color:#fff}button.approve:hover,button.answer:hover,button.resume:hover{background:#12692f}
button.deny{color:var(--bad);border-color:#e4b2ae}button.cancel{color:var(--muted)}button.choice{border-color:var(--run);color:var(--run)}
.answered{color:var(--ok);font-weight:600}.failed{color:var(--bad)}.cut{color:var(--faint);font-style:italic}
#tree{grid-area:tree;border-right:1px solid var(--line);background:#fff}#tree .inner{position:sticky;top:0;max-height:100vh;overflow:auto;padding:10px 8px}
#tree h3,#detail h3{font-size:12px;text-transform:uppercase;letter-spacing:.6px;color:var(--muted);margin:14px 0 6px}#tree h3{margin:0 4px 6px}
.node{cursor:pointer;padding:5px 8px;border-radius:6px;white-space:nowrap;border-left:3px solid transparent}.node .line{display:flex;gap:6px;align-items:baseline;overflow:hidden}
.node:hover{background:#f0f2f7}.node.sel{background:#e4e9f5;border-left-color:var(--run)}.node .name{font-weight:600}.node .id{overflow:hidden;text-overflow:ellipsis}
.node .money{margin-left:auto;color:var(--muted);font-size:12px;font-variant-numeric:tabular-nums}
.id{color:var(--faint);font-size:12px;font-family:ui-monospace,monospace}
.st{font-weight:600;font-size:12px}.st.pill{padding:1px 8px;border-radius:10px;background:#eef0f5}
.completed{color:var(--ok)}.running,.created{color:var(--run)}.suspended{color:var(--wait)}.error{color:var(--bad)}.cancelled{color:var(--faint)}.continued{color:var(--purple)}
.orphan{color:var(--bad);font-size:12px}.waits{color:var(--wait);font-size:12px;font-weight:700}
#main{grid-area:main;min-width:0}#detail{padding:14px 20px 40px;max-width:1100px}
#detail .empty{color:var(--muted);margin-top:30px}
.title{display:flex;align-items:center;gap:10px;flex-wrap:wrap}.title h2{margin:0;font-size:20px}
.actions{display:flex;gap:6px;align-items:center;margin-left:auto}.note{color:var(--muted);font-size:13px;margin:4px 0}
.panels{display:grid;grid-template-columns:1.2fr 1fr;gap:12px;margin-top:10px}
.panel{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 12px}.panel h3{margin-top:0!important}
.crumbs{font-size:15px;font-weight:600}.crumbs .sep{color:var(--faint);margin:0 4px}.crumbs .here{background:#ffe066;border:1px solid #a67c00;border-radius:5px;padding:0 6px}
.next{margin-top:6px;display:flex;flex-wrap:wrap;gap:4px}.next span{font-size:11px;background:#f1f3f8;border:1px solid var(--line);border-radius:4px;padding:1px 6px;color:var(--muted)}.next b{color:var(--ink);font-weight:600}
details.chart{margin-top:8px}details.chart summary{cursor:pointer;color:var(--run);font-size:13px}#chart svg{max-width:100%;height:auto}
table{border-collapse:collapse;width:100%}td,th{padding:3px 8px;border-bottom:1px solid #eef0f4;text-align:left;vertical-align:top;font-variant-numeric:tabular-nums}th{font-weight:600;color:var(--muted);font-size:12px}table.cost th{width:70px}
.bar{height:5px;background:#eef0f5;border-radius:3px;margin-top:2px;min-width:80px}.bar i{display:block;height:100%;border-radius:3px;background:var(--run)}.bar i.high{background:var(--wait)}
.conversation{display:flex;flex-direction:column;gap:8px}
.msg{background:#fff;border:1px solid var(--line);border-radius:8px;border-left:4px solid #cfd4df}
.msg>summary{cursor:pointer;padding:6px 10px;display:flex;gap:8px;align-items:baseline;list-style:none}.msg>summary::-webkit-details-marker{display:none}
.msg>summary::before{content:"▸";color:var(--faint);font-size:11px}.msg[open]>summary::before{content:"▾"}
.msg .role{font-weight:700;font-size:12px;text-transform:uppercase;letter-spacing:.5px;min-width:70px}
.msg .preview{flex:1;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;color:var(--muted)}.msg[open] .preview{visibility:hidden}
.msg time{margin-left:auto;color:var(--faint);font-size:12px;white-space:nowrap;font-variant-numeric:tabular-nums}
.msg .body{padding:0 12px 10px 30px;white-space:pre-wrap;word-break:break-word}.msg pre{margin:0;font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre-wrap;word-break:break-word}
.msg.system{border-left-color:#8a90a0}.msg.system .role{color:#5d6475}
.msg.user{border-left-color:var(--run)}.msg.user .role{color:var(--run)}
.msg.assistant{border-left-color:var(--ok)}.msg.assistant .role{color:var(--ok)}
.msg.tool_call{border-left-color:var(--purple);margin-left:24px}.msg.tool_call .role{color:var(--purple)}
.msg.tool_result{border-left-color:#a07b2b;margin-left:24px}.msg.tool_result .role{color:#8a6516}.msg.tool_result.failed-call{border-left-color:var(--bad)}
.msg .meta{color:var(--faint);font-size:12px}
.msg.streaming{border-style:dashed;border-left-style:solid}.msg.streaming .role::after{content:" · streaming";color:var(--run);text-transform:none;letter-spacing:0;font-weight:600}
.msg.discarded{opacity:.6}.msg.discarded .text{text-decoration:line-through}
.event{font-size:12.5px;color:var(--muted);padding:0 10px}.event>summary{cursor:pointer;list-style:none;display:flex;gap:8px}.event>summary::-webkit-details-marker{display:none}.event time{margin-left:auto;color:var(--faint)}
.event pre{font-size:12px;background:#fff;border:1px solid var(--line);border-radius:6px;padding:6px;margin:4px 0}
.rejected{border:1px solid #e4b2ae;padding:8px;margin:8px 0;border-radius:6px;background:#fff3f2}
.problem{background:#fff0f0;border:1px solid #e4b2ae;color:var(--bad);padding:6px 10px;border-radius:6px;margin:6px 0}
details.raw{margin-top:16px}details.raw>summary{cursor:pointer}details.raw>summary h3{display:inline}table.raw pre{margin:0;font:12px ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
.result{white-space:pre-wrap;background:#fff;border:1px solid var(--line);border-radius:8px;padding:8px 10px}
`
