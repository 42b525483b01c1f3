/**
 * The dashboard's page: one static HTML document with its CSS, script and SVG charts inline (no
 * CDN, nothing for the user to build). It holds no data and no secret: everything comes over the
 * event stream (`events`, next to the page) and is put in the page with textContent, never as
 * HTML, so an owner or meta from the store cannot inject markup. The Content-Security-Policy
 * allows exactly this script (by hash) and connections to this origin.
 */
import { createHash } from 'node:crypto';

const STYLE = `
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #66707a; --bg: #fff; --line: #d8dee4; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --accent: #0969da; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #8d96a0; --bg: #0d1117; --line: #30363d; --ok: #3fb950; --bad: #f85149; --warn: #d29922; --accent: #58a6ff; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: 6px 24px; align-items: baseline; padding: 12px 20px; border-bottom: 1px solid var(--line); }
header h1 { font-size: 18px; margin: 0; }
header .meta { color: var(--muted); }
#banner { display: none; padding: 10px 20px; font-weight: 600; }
#banner[data-state="down"] { display: block; background: var(--bad); color: #fff; }
#banner[data-state="offline"] { display: block; background: var(--warn); color: #fff; }
main { padding: 12px 20px; }
#chart-box { margin-bottom: 12px; }
#chart-box h2 { font-size: 13px; font-weight: 600; margin: 0 0 4px; color: var(--muted); }
#chart { width: 100%; height: 90px; display: block; border: 1px solid var(--line); border-radius: 4px; }
#chart rect { fill: var(--accent); }
#chart text { fill: var(--muted); font-size: 10px; }
#filter { margin: 0 0 8px; padding: 4px 8px; width: 260px; border: 1px solid var(--line); border-radius: 4px; background: var(--bg); color: var(--fg); }
#table { width: 100%; }
.row { display: grid; grid-template-columns: minmax(90px, 12%) minmax(120px, 15%) 56px 80px minmax(120px, 11%) 136px minmax(90px, 10%) minmax(160px, 18%) minmax(0, 1fr); border-bottom: 1px solid var(--line); }
#rows .row { content-visibility: auto; contain-intrinsic-size: auto 31px; }
.cell { padding: 4px 8px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#head { font-size: 12px; color: var(--muted); font-weight: 600; position: sticky; top: 0; background: var(--bg); z-index: 1; }
.cell.meta { white-space: normal; overflow-wrap: anywhere; color: var(--muted); font-family: ui-monospace, monospace; font-size: 12px; }
.cell.owner, .cell.term, .cell.left, .cell.head { font-family: ui-monospace, monospace; }
.row.leaderless .owner { color: var(--bad); font-weight: 600; }
.row.changed { animation: flash 1.5s ease-out; }
@keyframes flash { from { background: rgba(255, 200, 0, .35); } to { background: transparent; } }
.cell.left.low { color: var(--warn); }
.cell.followers { white-space: normal; }
.cell.followers div { font-size: 12px; }
.cell.followers .lagging { color: var(--bad); }
svg.spark { width: 120px; height: 22px; display: block; }
svg.spark polyline { fill: none; stroke: var(--accent); stroke-width: 1.5; }
.muted { color: var(--muted); }
`;

const SCRIPT = `
'use strict';
(function () {
  var state = { groups: new Map(), status: null, store: '', connected: false, untracked: 0 };
  var CHART_WINDOW_MS = 10 * 60 * 1000, CHART_BUCKETS = 60;
  var params = new URLSearchParams(location.search);
  var token = params.get('token');
  var base = location.pathname.endsWith('/') ? location.pathname : location.pathname + '/';
  if (/\\/index\\.html$/.test(location.pathname)) base = location.pathname.replace(/index\\.html$/, '');
  var $ = function (id) { return document.getElementById(id); };
  var tbody = $('rows'), banner = $('banner'), filter = $('filter');
  var SVGNS = 'http://www.w3.org/2000/svg';

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmtMs(ms) {
    if (ms < 1000) return ms.toFixed(0) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + ' m ' + Math.floor((ms % 60000) / 1000) + ' s';
    return (ms / 3600000).toFixed(1) + ' h';
  }
  function fmtTime(wall) { return new Date(wall).toLocaleTimeString(); }
  function fmtMeta(meta) {
    var keys = Object.keys(meta || {});
    if (keys.length === 0) return '';
    return keys.map(function (k) { var v = meta[k]; return k + '=' + (typeof v === 'string' ? v : JSON.stringify(v)); }).join(' ');
  }

  function row(name) {
    var g = state.groups.get(name);
    if (g.tr) return g.tr;
    var tr = el('div', 'row');
    tr.dataset.group = name;
    tr.setAttribute('role', 'row');
    ['name', 'owner', 'term', 'left', 'since', 'chart', 'head', 'followers', 'meta'].forEach(function (c) { var d = el('div', 'cell ' + c); d.setAttribute('role', 'cell'); tr.appendChild(d); });
    g.tr = tr;
    return tr;
  }

  function renderGroup(name, flash) {
    var g = state.groups.get(name);
    var v = g.view;
    var tr = row(name);
    var c = tr.children;
    c[0].textContent = name;
    var leader = v.leader;
    tr.classList.toggle('leaderless', !leader);
    c[1].textContent = leader ? leader.owner : 'no leader';
    c[2].textContent = v.term === null ? '' : String(v.term);
    c[4].textContent = v.since === null ? '' : (v.sinceExact ? '' : 'before ') + fmtTime(v.since);
    c[4].title = v.sinceExact ? 'seen taking over' : 'already leader when the dashboard started';
    spark(c[5], v.history);
    c[6].textContent = v.stream ? v.stream.name + ' @ ' + (v.stream.head === null ? '?' : v.stream.head) : '';
    c[7].replaceChildren.apply(c[7], v.followers.map(function (f) {
      var lag = f.lagMs === null ? 'lag unknown' : 'lag ' + (f.lagEntries === null ? '?' : f.lagEntries + (f.lagAtLeast ? '+' : '')) + ' entries, ' + fmtMs(f.lagMs);
      var d = el('div', f.lagMs === null || f.lagMs > 5000 ? 'lagging' : '', f.node + ': applied ' + (f.appliedSeq === null ? '?' : f.appliedSeq) + ', ' + lag);
      d.dataset.node = f.node;
      return d;
    }));
    c[8].textContent = leader ? fmtMeta(leader.meta) : '';
    if (flash) { tr.classList.remove('changed'); void tr.offsetWidth; tr.classList.add('changed'); }
    tickRow(g, performance.now());
  }

  function spark(td, history) {
    if (!history || history.length < 2) { td.replaceChildren(); return; }
    // From the first change kept (at most 10 minutes back, at least one minute), to now.
    var now = Date.now(), from = Math.max(now - CHART_WINDOW_MS, Math.min(history[0][0], now - 60000)), width = now - from;
    var first = history[0][1], last = history[history.length - 1][1];
    var span = Math.max(1, last - first);
    var pts = [], prevY = null;
    history.forEach(function (h) {
      var x = Math.max(0, (h[0] - from) / width * 120);
      var y = 20 - (h[1] - first) / span * 18;
      if (prevY !== null) pts.push(x.toFixed(1) + ',' + prevY.toFixed(1));
      pts.push(x.toFixed(1) + ',' + y.toFixed(1));
      prevY = y;
    });
    pts.push('120,' + prevY.toFixed(1));
    var svg = document.createElementNS(SVGNS, 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('viewBox', '0 0 120 22');
    var pl = document.createElementNS(SVGNS, 'polyline');
    pl.setAttribute('points', pts.join(' '));
    var title = document.createElementNS(SVGNS, 'title');
    title.textContent = 'term ' + first + ' to ' + last + ' (' + (history.length - 1) + ' changes seen)';
    svg.appendChild(title);
    svg.appendChild(pl);
    td.replaceChildren(svg);
  }

  function tickRow(g, now) {
    var td = g.tr.children[3];
    if (!g.view.leader || g.remaining === null) { td.textContent = ''; td.classList.remove('low'); return; }
    var left = Math.max(0, g.remaining - (now - g.remainingAt));
    td.textContent = left <= 0 ? 'expired' : fmtMs(left);
    td.classList.toggle('low', left < g.view.leader.ttlMs / 3);
  }

  function chart() {
    var svg = $('chart');
    // The window's width, not the box's: reading the box would force a layout of the whole table.
    var w = Math.max(300, window.innerWidth - 40), h = 90;
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    var now = Date.now(), from = now - CHART_WINDOW_MS, bucketMs = CHART_WINDOW_MS / CHART_BUCKETS;
    var counts = new Array(CHART_BUCKETS).fill(0);
    state.groups.forEach(function (g) {
      var hist = g.view.history;
      for (var i = 1; i < hist.length; i++) {
        var b = Math.floor((hist[i][0] - from) / bucketMs);
        if (b >= 0 && b < CHART_BUCKETS) counts[b]++;
      }
    });
    var max = Math.max(1, Math.max.apply(null, counts));
    var nodes = [];
    var bw = w / CHART_BUCKETS;
    counts.forEach(function (n, i) {
      if (n === 0) return;
      var r = document.createElementNS(SVGNS, 'rect');
      var bh = (h - 16) * n / max;
      r.setAttribute('x', (i * bw + 1).toFixed(1));
      r.setAttribute('y', (h - 12 - bh).toFixed(1));
      r.setAttribute('width', Math.max(1, bw - 2).toFixed(1));
      r.setAttribute('height', bh.toFixed(1));
      var t = document.createElementNS(SVGNS, 'title');
      t.textContent = n + ' term change' + (n === 1 ? '' : 's') + ' at ' + fmtTime(from + i * bucketMs);
      r.appendChild(t);
      nodes.push(r);
    });
    [['10 min ago', 2, 'start'], ['now', w - 2, 'end'], ['max ' + max, 2, 'start']].forEach(function (l, i) {
      var t = document.createElementNS(SVGNS, 'text');
      t.setAttribute('x', String(l[1]));
      t.setAttribute('y', i === 2 ? '10' : String(h - 2));
      t.setAttribute('text-anchor', l[2]);
      t.textContent = l[0];
      nodes.push(t);
    });
    svg.replaceChildren.apply(svg, nodes);
  }

  function order() {
    var names = Array.from(state.groups.keys()).sort();
    var q = filter.value.trim();
    var frag = document.createDocumentFragment();
    names.forEach(function (n) {
      var tr = row(n);
      tr.hidden = q !== '' && n.indexOf(q) < 0;
      frag.appendChild(tr);
    });
    tbody.replaceChildren(frag);
  }

  function header() {
    $('store').textContent = state.store;
    var leaders = 0;
    state.groups.forEach(function (g) { if (g.view.leader) leaders++; });
    $('count').textContent = state.groups.size + ' groups, ' + leaders + ' led' + (state.untracked ? ', ' + state.untracked + ' more not tracked' : '');
    var s = state.status;
    if (!state.connected) {
      banner.dataset.state = 'offline';
      banner.textContent = 'Connection to the dashboard lost; reconnecting\\u2026';
    } else if (s && !s.ok && s.error !== null) {
      banner.dataset.state = 'down';
      banner.textContent = 'Store unreachable since ' + fmtTime(s.since) + ': ' + s.error + (s.lastReadAt ? ' (showing data from ' + fmtTime(s.lastReadAt) + ')' : '');
    } else {
      banner.dataset.state = s && s.ok ? 'ok' : 'starting';
      banner.textContent = '';
    }
    $('updated').textContent = s && s.lastReadAt ? 'read ' + fmtTime(s.lastReadAt) : 'not read yet';
  }

  function setGroup(v, now) {
    var g = state.groups.get(v.name);
    if (!g) { g = { view: v, tr: null, remaining: null, remainingAt: now }; state.groups.set(v.name, g); }
    g.view = v;
    if (!v.leader) g.remaining = null;
    return g;
  }

  function apply(msg, snapshot) {
    var now = performance.now();
    if (snapshot && !document.body.dataset.snapshotAt) document.body.dataset.snapshotAt = now.toFixed(0);
    var added = false;
    if (snapshot) {
      state.groups.forEach(function (g, name) { if (!msg.groups.some(function (v) { return v.name === name; })) state.groups.delete(name); });
      state.store = msg.store;
    }
    var flash = [];
    msg.groups.forEach(function (v) {
      var known = state.groups.has(v.name);
      var old = known ? state.groups.get(v.name).view : null;
      if (!known) added = true;
      setGroup(v, now);
      if (!snapshot && old && (old.term !== v.term || (old.leader === null) !== (v.leader === null))) flash.push(v.name);
    });
    (msg.removed || []).forEach(function (n) { var g = state.groups.get(n); if (g && g.tr) g.tr.remove(); state.groups.delete(n); });
    Object.keys(msg.remaining).forEach(function (n) { var g = state.groups.get(n); if (g) { g.remaining = msg.remaining[n]; g.remainingAt = now; } });
    state.status = msg.status;
    state.untracked = msg.untracked;
    if (snapshot || added) order();
    msg.groups.forEach(function (v) { renderGroup(v.name, flash.indexOf(v.name) >= 0); });
    Object.keys(msg.remaining).forEach(function (n) { var g = state.groups.get(n); if (g && g.tr) tickRow(g, now); });
    header();
    if (snapshot || msg.groups.length) chart();
    if (snapshot && !document.body.dataset.renderMs) document.body.dataset.renderMs = (performance.now() - now).toFixed(0);
    document.body.dataset.ready = 'true';
  }

  function connect() {
    var url = base + 'events' + (token ? '?token=' + encodeURIComponent(token) : '');
    var es = new EventSource(url);
    es.addEventListener('snapshot', function (e) { state.connected = true; apply(JSON.parse(e.data), true); });
    es.addEventListener('update', function (e) { apply(JSON.parse(e.data), false); });
    es.onerror = function () { state.connected = false; header(); };
  }

  filter.addEventListener('input', order);
  setInterval(function () { var now = performance.now(); state.groups.forEach(function (g) { if (g.tr && g.view.leader) tickRow(g, now); }); }, 200);
  setInterval(chart, 10000);
  connect();
})();
`;

const HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>tenure dashboard</title>
<style>${STYLE}</style>
</head>
<body>
<header><h1>tenure</h1><span class="meta" id="store"></span><span class="meta" id="count"></span><span class="meta" id="updated"></span></header>
<div id="banner" data-state="starting" role="alert"></div>
<main>
<div id="chart-box"><h2>Term changes, all groups, last 10 minutes</h2><svg id="chart" role="img" aria-label="term changes over time"></svg></div>
<input id="filter" type="search" placeholder="filter groups" aria-label="filter groups">
<div id="table" role="table" aria-label="groups">
<div class="row" id="head" role="row"><div class="cell" role="columnheader">Group</div><div class="cell" role="columnheader">Leader (owner)</div><div class="cell" role="columnheader">Term</div><div class="cell" role="columnheader">Time left</div><div class="cell" role="columnheader">Leader since</div><div class="cell" role="columnheader">Term changes</div><div class="cell" role="columnheader">Stream head</div><div class="cell" role="columnheader">Followers (lag)</div><div class="cell" role="columnheader">Meta</div></div>
<div id="rows" role="rowgroup"></div>
</div>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;

/** The page's HTML. */
export const DASHBOARD_HTML: string = HTML;

const scriptHash = createHash('sha256').update(SCRIPT).digest('base64');
const styleHash = createHash('sha256').update(STYLE).digest('base64');

/** The Content-Security-Policy of the page: its own script and style only, connections to itself. */
export const DASHBOARD_CSP: string = [
  "default-src 'none'",
  `script-src 'sha256-${scriptHash}'`,
  `style-src 'sha256-${styleHash}'`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');
