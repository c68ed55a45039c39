"""The live page: one HTML document that polls /state.json every second and draws it with plotly.

Sections: the run's status and root cause (red, the moment a rank fails), a row per rank (its
current operation, sequence number, state, straggler score), the bytes each pair of ranks moved (a
heat map), training's loss and step time per rank, serving's queue and KV blocks, and what the flight
recorder says. When the run is over the page keeps the final state (the server keeps answering).
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>playground live</title>
<script src="/plotly.min.js"></script>
<style>
body { font-family: system-ui, sans-serif; margin: 1em 2em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em 0; } h2 { font-size: 1.05em; margin: 1.2em 0 .3em 0; }
table { border-collapse: collapse; } td, th { padding: 2px 10px; border-bottom: 1px solid #ddd; text-align: left; }
th { background: #f3f3f3; } .named { color: #b00; font-weight: bold; }
#root { display: none; background: #fdecea; border: 1px solid #b00; color: #700; padding: .5em; margin: .5em 0; white-space: pre-wrap; }
#status { font-weight: bold; } .plot { width: 100%; max-width: 900px; height: 320px; }
.grid { display: flex; flex-wrap: wrap; gap: 1em; } .grid > div { flex: 1 1 420px; }
pre { background: #f7f7f7; padding: .5em; white-space: pre-wrap; }
</style></head>
<body>
<h1>playground live: <span id="scenario"></span> <small id="run_dir"></small></h1>
<div>status: <span id="status">loading</span> <span id="elapsed"></span></div>
<div id="root"></div>
<h2>Ranks</h2>
<table id="ranks"><thead><tr><th>rank</th><th>pid</th><th>operation</th><th>seq</th><th>state</th>
<th>ops recorded</th><th>straggler score</th></tr></thead><tbody></tbody></table>
<div id="straggler_note"></div>
<div class="grid">
<div><h2>Bytes sent, rank to rank</h2><div id="heatmap" class="plot"></div></div>
<div id="training_box" style="display:none"><h2>Training</h2><div id="loss" class="plot"></div>
<div id="steptime" class="plot"></div></div>
<div id="serving_box" style="display:none"><h2>Serving</h2><div id="serving" class="plot"></div></div>
</div>
<h2>Flight recorder</h2><pre id="flight">(nothing yet)</pre>
<h2>Failures</h2><pre id="failures">none</pre>
<script>
const layout = (title, x, y) => ({title: {text: title}, margin: {t: 40, r: 10, b: 45, l: 60},
  xaxis: {title: {text: x}}, yaxis: {title: {text: y}}});
function text(id, value) { document.getElementById(id).textContent = value; }
function ranks(s) {
  const body = document.querySelector('#ranks tbody'); body.replaceChildren();
  const scores = (s.stragglers && s.stragglers.ranks) || {};
  const named = new Set((s.stragglers && s.stragglers.named) || []);
  for (const r of s.ranks) {
    const tr = document.createElement('tr'); tr.dataset.rank = r.rank;
    const sc = scores[r.rank];
    const cells = [r.rank, r.pid ?? '', r.op || '', r.seq ?? '', r.state, r.records ?? 0,
      sc ? `${sc.relative.toFixed(2)} of fastest (${sc.section})` : ''];
    for (const c of cells) { const td = document.createElement('td'); td.textContent = c; tr.appendChild(td); }
    if (named.has(r.rank)) tr.classList.add('named');
    body.appendChild(tr);
  }
  text('straggler_note', s.stragglers ? s.stragglers.note : '');
}
function heatmap(s) {
  const labels = s.ranks.map(r => 'rank ' + r.rank);
  Plotly.react('heatmap', [{type: 'heatmap', z: s.bytes, x: labels, y: labels, zmin: 0, colorscale: [[0, '#f7fbff'], [1, '#08306b']],
    hovertemplate: '%{y} to %{x}: %{z} bytes<extra></extra>'}],
    {...layout('', 'to', 'from'), yaxis: {autorange: 'reversed', title: {text: 'from'}}});
}
function training(s) {
  const ranks = Object.keys(s.training); if (!ranks.length) return;
  document.getElementById('training_box').style.display = '';
  const line = (key, scale) => ranks.map(r => ({type: 'scatter', mode: 'lines+markers', name: 'rank ' + r,
    x: s.training[r].map(p => p.step), y: s.training[r].map(p => p[key] * scale)}));
  Plotly.react('loss', line('loss', 1), layout('loss', 'step', 'loss'));
  Plotly.react('steptime', line('step_s', 1000), layout('step time', 'step', 'ms'));
}
function serving(s) {
  if (!s.serving.length) return;
  document.getElementById('serving_box').style.display = '';
  const t0 = s.serving[0].time_s ?? 0, t = s.serving.map(p => (p.time_s ?? p.t_s) - t0);
  const line = key => ({type: 'scatter', mode: 'lines', name: key, x: t, y: s.serving.map(p => p[key])});
  Plotly.react('serving', [line('running'), line('waiting'), line('kv_blocks')],
    layout('engine (' + [...new Set(s.serving.map(p => p.policy))].join(', ') + ')', 'time (s)',
      'sequences / blocks'));
}
async function poll() {
  try {
    const s = await (await fetch('/state.json')).json();
    text('scenario', s.scenario); text('run_dir', s.run_dir); text('status', s.status);
    text('elapsed', s.elapsed_s != null ? `(${s.elapsed_s.toFixed(2)} s)` : '');
    const root = document.getElementById('root');
    root.style.display = s.root_cause ? 'block' : 'none';
    root.textContent = s.root_cause ? 'root cause: ' + s.root_cause : '';
    ranks(s); heatmap(s); training(s); serving(s);
    text('flight', s.flight.length ? s.flight.join('\\n') : 'every rank between collectives or in the same one');
    text('failures', s.failures.length ? s.failures.join('\\n') : 'none');
    document.body.dataset.status = s.status;
  } catch (e) { text('status', 'server gone (' + e + ')'); }
  setTimeout(poll, 1000);
}
poll();
</script></body></html>
"""
