"""The page: one HTML file with its style and script inline; episodes' data arrive as scripts when opened.

The summary, the episode list and the plots are plain HTML (they show without JavaScript); the
step views are drawn by the script from ``episodes/ep-NNNNNN.js`` when a person opens an episode
(``#open=all`` in the address opens every one, ``#ep=N`` one).
"""
from __future__ import annotations

import json
import math
from html import escape

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#111;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} .src{color:#666;font-size:12px;margin-bottom:12px}
.summary span{margin-right:16px} .plots{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.plot-figure{background:#fff;border:1px solid #ddd;padding:8px;margin:0}
.plot-figure figcaption{font-weight:600;margin-bottom:4px}
svg.plot .grid{stroke:#eee} svg.plot .tick{font-size:10px;fill:#666} svg.plot .label{font-size:11px}
svg.plot .ci{stroke:#111;stroke-width:1.5;fill:none} svg.plot .legend{font-size:11px}
details.episode{background:#fff;border:1px solid #ddd;margin:6px 0;padding:4px 8px}
details.episode>summary{cursor:pointer} .success-label{padding:1px 6px;border-radius:3px;font-weight:600}
.success-label.ok{background:#dcfce7;color:#166534} .success-label.fail{background:#fee2e2;color:#991b1b}
.success-label.unknown{background:#eee;color:#444} .muted{color:#666}
.steps{display:flex;gap:10px;overflow-x:auto;padding:8px 0;scroll-snap-type:x mandatory}
figure.step{margin:0;flex:0 0 auto;width:280px;scroll-snap-align:start;border:2px solid transparent;padding:4px}
figure.step.current{border-color:#2563eb} figure.step.refused{background:#fff1f2}
.screen{position:relative;width:270px;background:#ddd} .screen img{width:100%;height:auto;display:block}
.screen svg{position:absolute;left:0;top:0;width:100%;height:100%}
.mark{stroke:#ef4444;fill:none;stroke-width:4} .mark.refused{stroke-dasharray:8 6}
.mark-fill{fill:rgba(239,68,68,.35)} .element{stroke:#2563eb;stroke-width:3;fill:rgba(37,99,235,.12)}
.typed{fill:#b91c1c;font:bold 22px monospace;stroke:#fff;stroke-width:4;paint-order:stroke}
.badge{fill:#111;font:bold 22px sans-serif;stroke:#fff;stroke-width:4;paint-order:stroke}
figcaption{font-size:12px;word-wrap:break-word} .reply{white-space:pre-wrap;background:#f4f4f5;
padding:3px;max-height:8em;overflow:auto;font-family:monospace} .gate{color:#9a3412} .memory{color:#6b21a8}
.scrub{width:100%} .robot{display:flex;gap:16px;flex-wrap:wrap} video{width:288px;image-rendering:pixelated;background:#000}
.readout{font-family:monospace;font-size:12px;white-space:pre}
"""

JS = r"""
const V = window.EMBODIA_VIEW, loaded = {};
const NS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, text, ns) {
  const e = ns ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}
function svg(tag, attrs, text) { return el(tag, attrs, text, true); }
function label(ok) {
  const cls = ok === true ? 'ok' : ok === false ? 'fail' : 'unknown';
  return el('span', {class: 'success-label ' + cls}, ok === true ? 'success' : ok === false ? 'failure' : 'not verified');
}
function describe(a) {
  const p = a.point ? ` (${a.point.map(Math.round)})` : '', e = a.end ? ` -> (${a.end.map(Math.round)})` : '';
  const bits = [a.type + p + e];
  if (a.element !== undefined) bits.push('element ' + a.element);
  if (a.text) bits.push(JSON.stringify(a.text));
  if (a.keys) bits.push(a.keys.join('+'));
  for (const k of ['button', 'app', 'direction', 'status']) if (a[k]) bits.push(a[k]);
  return bits.join(' ');
}
function overlay(step) {
  const im = step.image || {w: 1000, h: 1000}, W = im.w, H = im.h, a = step.action, r = Math.max(W, H) * 0.025;
  const s = svg('svg', {class: 'overlay', 'data-step': step.t, 'data-action': a.type, viewBox: `0 0 ${W} ${H}`,
                        preserveAspectRatio: 'none'});
  const id = 'arrow-' + Math.random().toString(36).slice(2);
  const defs = svg('defs'), m = svg('marker', {id, viewBox: '0 0 10 10', refX: 8, refY: 5, markerWidth: 5,
                                               markerHeight: 5, orient: 'auto-start-reverse'});
  m.appendChild(svg('path', {d: 'M0,0L10,5L0,10z', fill: '#ef4444'})); defs.appendChild(m); s.appendChild(defs);
  const px = p => [p[0] / 1000 * W, p[1] / 1000 * H];
  const b = step.element && step.element.bounds;
  if (b) s.appendChild(svg('rect', {class: 'element', x: b[0], y: b[1], width: b[2] - b[0], height: b[3] - b[1]}));
  const cls = 'mark' + (step.executed ? '' : ' refused');
  let at = a.point ? px(a.point) : b ? [(b[0] + b[2]) / 2, (b[1] + b[3]) / 2] : null;
  const t = a.type;
  if (['click', 'right_click', 'double_click', 'long_press'].includes(t) && at) {
    s.appendChild(svg('circle', {class: cls + ' mark-fill', cx: at[0], cy: at[1], r}));
    if (t === 'double_click' || t === 'long_press') s.appendChild(svg('circle', {class: cls, cx: at[0], cy: at[1], r: r * 1.7}));
  } else if ((t === 'swipe' || t === 'drag') && at && a.end) {
    const e = px(a.end);
    s.appendChild(svg('line', {class: cls, x1: at[0], y1: at[1], x2: e[0], y2: e[1], 'marker-end': `url(#${id})`}));
  } else if (t === 'scroll' && at) {
    const d = {up: [0, -1], down: [0, 1], left: [-1, 0], right: [1, 0]}[a.direction] || [0, 1], L = 0.15 * H;
    s.appendChild(svg('line', {class: cls, x1: at[0], y1: at[1], x2: at[0] + d[0] * L, y2: at[1] + d[1] * L,
                               'marker-end': `url(#${id})`}));
  } else if (t === 'type') {
    const y = at ? at[1] - r : H * 0.08, x = at ? Math.max(4, at[0] - W * 0.3) : W * 0.04;
    s.appendChild(svg('text', {class: cls + ' typed', x, y}, '\u2328 ' + JSON.stringify(a.text)));
  } else {
    s.appendChild(svg('text', {class: cls + ' badge', x: W * 0.04, y: H * 0.06}, describe(a)));
  }
  return s;
}
function gateText(d) {
  if (!d || !d.risk) return null;
  return `gate: ${d.risk} - ${d.allowed ? 'allowed' : 'refused'} by ${d.by}` + (d.evidence ? ` (${d.evidence})` : '');
}
function memoryText(m) {
  if (!m) return null;
  let s = `memory (${m.mode}): ${m.source}`;
  if (m.confidence !== undefined) s += `, confidence ${Number(m.confidence).toFixed(2)}`;
  if (m.replaced) s += ', replaced the policy\u2019s action';
  if (m.stored_at) s += `, retrieved success ${JSON.stringify(m.stored_at)}`;
  if (m.n_kept !== undefined) s += `, ${m.n_kept} kept`;
  if (m.reason) s += ` [${m.reason}]`;
  return s;
}
function stepCard(step, ep) {
  const f = el('figure', {class: 'step' + (step.executed ? '' : ' refused'), 'data-step': step.t, id: `ep-${ep}-s-${step.t}`});
  const sc = el('div', {class: 'screen'});
  if (step.image) sc.appendChild(el('img', {loading: 'lazy', src: step.image.src, width: step.image.w,
                                            height: step.image.h, alt: 'step ' + step.t}));
  sc.appendChild(overlay(step)); f.appendChild(sc);
  const c = el('figcaption');
  c.appendChild(el('div', {class: 'action'}, `${step.t}: ${describe(step.action)}` + (step.executed ? '' : ' (not executed)')));
  if (step.element) c.appendChild(el('div', {class: 'muted'}, `target: ${step.element.role || ''} ${JSON.stringify(step.element.text || step.element.desc || step.element.id || '')}`));
  const g = gateText(step.safety); if (g) c.appendChild(el('div', {class: 'gate'}, g));
  const mm = memoryText(step.memory); if (mm) c.appendChild(el('div', {class: 'memory'}, mm));
  if (step.reply) c.appendChild(el('div', {class: 'reply'}, step.reply));
  const tm = step.timing || {};
  c.appendChild(el('div', {class: 'timing muted'}, `policy ${Number(tm.policy_ms || 0).toFixed(1)} ms, device ${Number(tm.device_ms || 0).toFixed(1)} ms`));
  f.appendChild(c); return f;
}
function scrubber(n, onPick) {
  const r = el('input', {type: 'range', class: 'scrub', min: 0, max: Math.max(0, n - 1), value: 0, step: 1});
  r.addEventListener('input', () => onPick(+r.value)); return r;
}
function header(d) {
  const h = el('div', {class: 'ephead'});
  h.appendChild(label(d.success));
  h.appendChild(el('span', {class: 'muted'}, ' source: ' + (d.success_source || 'none') + (d.seed !== null && d.seed !== undefined ? `, seed ${d.seed}` : '')));
  const info = d.end_info || {};
  if (info.error) h.appendChild(el('div', {class: 'gate'}, 'error: ' + info.error));
  return h;
}
function renderGui(body, d) {
  body.appendChild(header(d));
  const strip = el('div', {class: 'steps'});
  d.steps.forEach(s => strip.appendChild(stepCard(s, d.index)));
  if (d.final_image) {
    const f = el('figure', {class: 'step final', id: `ep-${d.index}-final`}), sc = el('div', {class: 'screen'});
    sc.appendChild(el('img', {loading: 'lazy', src: d.final_image.src, width: d.final_image.w, height: d.final_image.h, alt: 'final'}));
    f.appendChild(sc); f.appendChild(el('figcaption', {}, 'final screen')); strip.appendChild(f);
  }
  const pick = k => { strip.querySelectorAll('figure.step').forEach((f, i) => f.classList.toggle('current', i === k));
                      const f = strip.children[k]; if (f) strip.scrollLeft = f.offsetLeft - strip.offsetLeft; };
  body.appendChild(scrubber(d.steps.length + (d.final_image ? 1 : 0), pick)); body.appendChild(strip); pick(0);
}
function chart(d) {
  const T = d.action.length, D = T ? d.action[0].length : 0, W = 520, H = 160;
  const s = svg('svg', {class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H});
  let lo = Infinity, hi = -Infinity;
  d.action.forEach(r => r.forEach(v => { lo = Math.min(lo, v); hi = Math.max(hi, v); }));
  if (!(hi > lo)) { lo -= 1; hi += 1; }
  const colors = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#4b5563'];
  for (let j = 0; j < D; j++) {
    const pts = d.action.map((r, t) => `${(t / Math.max(1, T - 1) * (W - 10) + 5).toFixed(1)},${(H - 5 - (r[j] - lo) / (hi - lo) * (H - 10)).toFixed(1)}`).join(' ');
    s.appendChild(svg('polyline', {points: pts, fill: 'none', stroke: colors[j % colors.length], 'stroke-width': 1.5, class: 'channel', 'data-channel': d.action_names[j]}));
  }
  const cur = svg('line', {class: 'cursor', x1: 5, x2: 5, y1: 0, y2: H, stroke: '#111'}); s.appendChild(cur);
  s.move = t => { const x = t / Math.max(1, T - 1) * (W - 10) + 5; cur.setAttribute('x1', x); cur.setAttribute('x2', x); };
  return s;
}
function renderRobot(body, d) {
  body.appendChild(header(d));
  const row = el('div', {class: 'robot'}), left = el('div'), right = el('div');
  let video = null;
  if (d.video) { video = el('video', {src: d.video.src, preload: 'metadata', muted: '', playsinline: ''});
                 video.addEventListener('loadedmetadata', () => { video.currentTime = d.video.from + 0.5 / d.fps; });
                 left.appendChild(video); }
  const c = chart(d), read = el('div', {class: 'readout'});
  const names = (d.action_names || []).join(', ');
  right.appendChild(el('div', {class: 'muted'}, `actions over the episode (${names})`)); right.appendChild(c); right.appendChild(read);
  const pick = t => { c.move(t); if (video) video.currentTime = d.video.from + (t + 0.5) / d.fps;
    read.textContent = `step ${t} (t=${(t / d.fps).toFixed(2)} s)\naction ${JSON.stringify(d.action[t])}\nstate  ${JSON.stringify(d.state[t])}`; };
  left.appendChild(scrubber(d.action.length, pick));
  row.appendChild(left); row.appendChild(right); body.appendChild(row);
  const tm = d.timing || {}, ms = (k, x) => x && x.mean !== undefined ? `${k} ${Number(x.mean).toFixed(2)} ms/step (p95 ${Number(x.p95 || 0).toFixed(2)})` : null;
  const parts = [ms('policy', tm.policy_ms), ms('device', tm.device_ms), ms('between observations', tm.obs_interval_ms)].filter(Boolean);
  body.appendChild(el('div', {class: 'timing muted'}, 'timing: ' + (parts.length ? parts.join(', ') : JSON.stringify(tm))));
  if (d.end_info && Object.keys(d.end_info).length) body.appendChild(el('div', {class: 'muted'}, 'info: ' + JSON.stringify(d.end_info)));
  pick(0);
}
function embodiaEpisode(i, d) {
  loaded[i] = d;
  const det = document.getElementById('ep-' + i), body = det.querySelector('.body');
  body.textContent = '';
  (d.kind === 'gui' ? renderGui : renderRobot)(body, d);
  det.dataset.rendered = '1';
}
function openEpisode(i) {
  const e = V.episodes[i];
  if (!e || !e.file || loaded[i] || document.getElementById('script-ep-' + i)) return;
  const s = el('script', {src: e.file, id: 'script-ep-' + i}); document.body.appendChild(s);
}
document.querySelectorAll('details.episode').forEach(det => det.addEventListener('toggle', () => {
  if (det.open) openEpisode(+det.dataset.index); }));
(function () {
  const h = new URLSearchParams(location.hash.slice(1));
  const which = h.get('open') === 'all' ? V.episodes.map(e => e.index) : h.has('ep') ? [+h.get('ep')] : V.episodes.length ? [V.episodes[0].index] : [];
  which.forEach(i => { const d = document.getElementById('ep-' + i); if (d && V.episodes[i].file) d.open = true; openEpisode(i); });
})();
"""


def num(v, spec: str = "") -> str:
    """A number as text, or whatever else the file held there, escaped: a shared recording's ``seed``
    may be ``<img src=x onerror=...>`` instead of a number, and the page must show it, not run it."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return format(v, spec)
    return escape(str(v))


def script_json(data) -> str:
    """JSON to embed in a script: no ``<`` at all (so neither ``</script>`` nor ``<!--`` in a value
    can end or change the script), and no NaN (not JSON)."""
    return json.dumps(data, allow_nan=False, default=str).replace("<", "\\u003c")


def _label(ok) -> str:
    cls, text = {True: ("ok", "success"), False: ("fail", "failure")}.get(ok, ("unknown", "not verified"))
    return f'<span class="success-label {cls}">{text}</span>'


def _summary(view: dict) -> str:
    eps = view["episodes"]
    verified = [e for e in eps if e["success"] is not None]
    ok = sum(bool(e["success"]) for e in verified)
    parts = [f"<span>{len(eps)} episodes</span>"] if eps or not view.get("report") else []
    if verified:
        parts.append(f"<span>success {ok}/{len(verified)} ({ok / len(verified):.0%})</span>")
    rep = view.get("report")
    if rep and isinstance(rep.get("wilson95"), (list, tuple)) and len(rep["wilson95"]) == 2:
        lo, hi = rep["wilson95"]
        parts.append(f"<span>95% Wilson [{num(lo, '.3f')}, {num(hi, '.3f')}]</span>")
    if rep and rep.get("streams"):
        parts.append(f"<span>{num(rep['streams'])} streams x {num(rep.get('episodes_per_stream'))} episodes</span>")
    return '<div class="summary">' + "".join(parts) + "</div>"


def _episode_row(e: dict) -> str:
    """One episode's line; every value from the source is escaped (numbers included)."""
    index = num(e["index"])
    bits = [f"#{index}", escape(str(e.get("task") or "")), _label(e["success"])]
    if e.get("success_source"):
        bits.append(f'<span class="muted">({escape(str(e["success_source"]))})</span>')
    bits.append(f'<span class="muted">{num(e.get("steps") or 0)} steps' +
                (f", seed {num(e['seed'])}" if e.get("seed") is not None else "") + "</span>")
    if e.get("memory_steps"):
        bits.append(f'<span class="memory">memory steered {num(e["memory_steered"])} of {num(e["memory_steps"])} '
                    f'decisions</span>')
    if e.get("refused"):
        bits.append(f'<span class="gate">{num(e["refused"])} refused by the gate</span>')
    if e.get("error"):
        bits.append(f'<span class="gate">{escape(str(e["error"]))}</span>')
    if e.get("bad_values"):
        bits.append(f'<span class="gate bad-value">{num(e["bad_values"])} values not numbers (NaN or infinite), '
                    f'marked "(bad value)"</span>')
    inner = " ".join(bits)
    if not e.get("file"):
        return f'<div class="episode-row" id="ep-{index}">{inner}</div>'
    return (f'<details class="episode" id="ep-{index}" data-index="{index}"><summary>{inner}</summary>'
            f'<div class="body muted">opening...</div></details>')


def _listed(names: list, cls: str, summary: str) -> str:
    """A folded list on the page of what the report could not take as the source gave it."""
    if not names:
        return ""
    shown = "".join(f"<li>{escape(str(n))}</li>" for n in names[:20]) + ("<li>...</li>" if len(names) > 20 else "")
    return f'<details class="{cls} gate"><summary>{summary}</summary><ul>{shown}</ul></details>'


def _skipped(view: dict) -> str:
    """The files the source named but the report did not copy (outside the source, or missing)."""
    names = view.get("skipped") or []
    return _listed(names, "skipped", f"{len(names)} files named by the source were not copied (outside it, or missing)")


def _bad(view: dict) -> str:
    """Where the source held values that are not numbers (NaN, infinite): shown marked, listed here."""
    return _listed(view.get("bad") or [], "bad-value", 'the source holds values that are not numbers (NaN or '
                   'infinite): they are shown as "nan (bad value)"')


def page_html(view: dict) -> str:
    data = script_json({"kind": view["kind"], "episodes": [{"index": e["index"], "file": e.get("file")}
                                                           for e in view["episodes"]]})
    plots = "".join(f'<figure class="plot-figure"><figcaption>{escape(p["title"])}</figcaption>{p["svg"]}</figure>'
                    for p in view.get("plots", []))
    rows = "".join(_episode_row(e) for e in view["episodes"])
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>embodia view: {escape(view["title"])}</title>'
            f"<style>{CSS}</style></head><body><h1>{escape(view['title'])}</h1>"
            f'<div class="src">{escape(view.get("source", ""))}</div>{_summary(view)}{_skipped(view)}{_bad(view)}'
            f'<div class="plots">{plots}</div><div class="episodes">{rows}</div>'
            f"<script>window.EMBODIA_VIEW = {data};</script><script>{JS}</script></body></html>")
