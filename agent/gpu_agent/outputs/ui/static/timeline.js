// gpu-agent UI: the Timeline tab. One Perfetto trace of the store (record/trace
// --store) drawn on a canvas: a row per (process, GPU, stream), each kernel a box at
// its GPU start and duration, named when the box is wide enough. The whole capture is
// drawn at every zoom: a span holding more kernels than the server sends one by one
// comes as buckets (ui/timeline.py: each row's busy time and kernel count per bucket,
// about a pixel wide), drawn as bars as tall as the GPU was busy; zoomed in far
// enough, the span's kernels come and are drawn one by one. What the page holds: the
// whole capture's view (TL.overview) and the last one asked for (TL.view), the span on
// screen with half a screen either side, so a zoom or a pan redraws at once from what
// is here, and asks for a finer view only when this one is too coarse for it.
// Wheel zooms around the pointer, drag pans, hover names a kernel and shows its
// launch stack; a kernel chosen in the flame graph ("On the timeline") is marked in
// magenta, at least 2 px wide, at every zoom (buckets count its launches apart).
// Kernel names and stacks reach the page as canvas text and text nodes only.
"use strict";

const TL = { data: null, file: "", overview: null, view: null, x0: 0, x1: 1, highlight: "", drag: null,
  ROW: 18, GUTTER: 360, AXIS: 22, LABEL: 40, folded: new Set(), pos: [], asking: false, asked: "",
  stacks: new Map(), hover: null };
const KERNEL_BAR = "hsl(130, 50%, 40%)", MARK = "#e600e6", INNER = "#7c3aed";

// Each row's place on the canvas, or -1 under a folded row.
function layout() {
  const d = TL.data, pos = [];
  let at = 0;
  if (d) d.rows.forEach((_, i) => {
    const up = d.parent[i];
    const hidden = up >= 0 && (pos[up] < 0 || TL.folded.has(up));
    pos.push(hidden ? -1 : at++);
  });
  TL.pos = pos;
  return at;
}

function hasChildren(i) { return TL.data.parent.includes(i); }

async function loadTraces() {
  try {
    const data = await getJSON("/api/traces", new URLSearchParams({ from: state.from, to: state.to }));
    const sel = $("trace-select");
    sel.replaceChildren(...data.traces.map((t) =>
      el("option", { value: t.name }, `${fmtTime(t.end)} UTC (${(t.bytes / 1048576).toFixed(1)} MiB)`)));
    $("timeline-empty").hidden = data.traces.length > 0;
    if (!data.traces.length) {
      TL.data = null;
      drawTimeline();
      return;
    }
    sel.value = data.traces[data.traces.length - 1].name;   // the newest
    await loadTimeline(sel.value);
  } catch (e) { showError(e.message); }
}

function plotWidth() {
  return Math.max(100, ($("timeline-canvas").parentElement.clientWidth || 1200) - TL.GUTTER);
}

const SPAN_LIMIT = 4e18;   // ui/timeline.py's MAX_SPAN_NS (2^62): zoomed out past it, the view stops there
function viewParams(t0, t1, buckets) {
  const at = (t) => Math.max(-SPAN_LIMIT, Math.min(SPAN_LIMIT, t));
  return new URLSearchParams({ file: TL.file, t0: at(Math.floor(t0)), t1: at(Math.ceil(t1)), buckets,
    mark: TL.highlight });
}

// The trace's rows and names, and the whole capture's view, asked for together.
async function loadTimeline(name) {
  const began = performance.now();
  try {
    TL.file = name;
    const [data, overview] = await Promise.all([
      getJSON("/api/timeline", new URLSearchParams({ file: name })),
      getJSON("/api/timeline/view", new URLSearchParams({ file: name, buckets: Math.min(4096, plotWidth()),
        mark: TL.highlight })),
    ]);
    if (TL.file !== name) return;   // another trace was chosen meanwhile
    Object.assign(TL, { data, overview, view: null, asked: "", folded: new Set(), stacks: new Map(), x0: 0,
      x1: Math.max(1, data.span_ns) });
    drawTimeline();
    document.body.dataset.timelineLoadMs = Math.round(performance.now() - began);
    bump("timelines");
  } catch (e) {
    TL.data = null;
    drawTimeline();
    showError(e.message);
  }
}

function covers(v) { return v && v.t0 <= TL.x0 && TL.x1 <= v.t1; }
function bucketNs(v) { return (v.t1 - v.t0) / v.buckets; }

// What the span on screen is drawn from: kernels that cover it, else the finest
// buckets that do (counting the marked kernel), else the whole capture's. fine: no
// better view is worth asking for.
function source() {
  const views = [TL.view, TL.overview].filter((v) => v && covers(v));
  const detail = views.find((v) => v.kernels);
  if (detail) return { v: detail, fine: true };
  const pxNs = (TL.x1 - TL.x0) / plotWidth();
  const marked = views.filter((v) => v.mark === TL.highlight);
  const best = (marked.length ? marked : views).sort((a, b) => bucketNs(a) - bucketNs(b))[0];
  if (!best) return { v: TL.overview, fine: false };
  return { v: best, fine: best.mark === TL.highlight && bucketNs(best) <= 1.5 * pxNs };
}

// A view of the span on screen and half a screen either side, one request at a time
// (the answer redraws, which asks again if the span moved meanwhile), never the same
// one twice in a row (an answer coarser than asked, or an error, is not asked again).
async function askView() {
  const span = TL.x1 - TL.x0, file = TL.file, began = performance.now();
  const end = TL.data.span_ns;
  const t0 = Math.max(Math.min(0, TL.x0), TL.x0 - span / 2), t1 = Math.min(Math.max(end, TL.x1), TL.x1 + span / 2);
  const params = viewParams(t0, t1, Math.min(4096, Math.round(plotWidth() * (t1 - t0) / span)));
  if (TL.asking || params.toString() === TL.asked) return;
  TL.asking = true;
  TL.asked = params.toString();
  try {
    const v = await getJSON("/api/timeline/view", params);
    if (file !== TL.file) return;
    TL.view = v;
    if (!v.kernels && v.t0 <= 0 && end <= v.t1 && v.mark === TL.highlight) TL.overview = v;   // a new mark's
    document.body.dataset.timelineViewMs = Math.round(performance.now() - began);
  } catch (e) {
    showError(e.message);
  } finally {
    TL.asking = false;
  }
  drawTimeline();
  bump("tlviews");
}

function kernelHash(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return h;
}

function kernelColour(name) {
  const h = kernelHash(name);
  return `hsl(${100 + h % 60}, 55%, ${45 + (h >> 8) % 20}%)`;   // the flame graph's kernel greens
}

function labelColour(name) { return (kernelHash(name) >> 8) % 20 < 8 ? "#fff" : "#0f172a"; }   // on the darker greens: white

function drawTimeline() {
  const began = performance.now();
  const canvas = $("timeline-canvas"), info = $("timeline-info");
  const d = TL.data;
  const rows = layout();
  const width = canvas.parentElement.clientWidth || 1200;
  canvas.width = width;
  canvas.height = TL.AXIS + Math.max(1, rows) * TL.ROW;
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, canvas.width, canvas.height);
  if (!d || !TL.overview) {
    info.textContent = "";
    delete info.dataset.kernels;
    return;
  }
  const plot = width - TL.GUTTER, span = TL.x1 - TL.x0;
  const x = (t) => TL.GUTTER + (t - TL.x0) / span * plot;
  g.font = "11px sans-serif";
  g.fillStyle = "#374151";
  for (let t = 0; t <= 4; t++) {   // the axis: time from the first kernel (zoomed in: from the left edge)
    const at = TL.x0 + span * t / 4, step = span * t / 4;
    const text = t && span < 1e8 ? `+${step >= 1e6 ? `${(step / 1e6).toFixed(3)} ms` : step >= 1e3
      ? `${(step / 1e3).toFixed(2)} µs` : `${Math.round(step)} ns`}` : fmtNs(at);
    g.fillText(text, x(at) - (t === 4 ? 60 : 0), 14);
  }
  const { v, fine } = source();
  const counts = v.kernels ? drawKernels(g, v, x) : drawBuckets(g, v, x);
  let inner = 0;
  for (const [row, start, dur] of d.inkernel) {
    if (start + dur < TL.x0 || start > TL.x1 || TL.pos[row] < 0) continue;
    g.fillStyle = INNER;
    const left = Math.max(TL.GUTTER, x(start));
    g.fillRect(left, TL.AXIS + TL.pos[row] * TL.ROW + 2, Math.max(1, x(start + dur) - left), TL.ROW - 4);
    inner++;
  }
  g.fillStyle = "#f7f8fa";
  g.fillRect(0, TL.AXIS, TL.GUTTER - 4, rows * TL.ROW);
  g.save();
  g.beginPath();
  g.rect(0, TL.AXIS, TL.GUTTER - 8, rows * TL.ROW);
  g.clip();   // a long name stays in the gutter
  g.fillStyle = "#1f2937";
  d.rows.forEach((r, i) => {
    if (TL.pos[i] < 0) return;
    const mark = hasChildren(i) ? (TL.folded.has(i) ? "▸ " : "▾ ") : "";
    g.fillText(mark + r, 4 + 12 * d.depth[i], TL.AXIS + TL.pos[i] * TL.ROW + 13);
  });
  g.restore();
  const ni = TL.highlight === "" ? -1 : d.names.indexOf(TL.highlight);
  const all = ni < 0 ? 0 : d.counts[ni] || 0;
  info.textContent = `${NUMBER.format(d.kernels)} kernels on ${plural(rows, "row")}` +
    (d.truncated ? ` (the first ${NUMBER.format(d.kernels)} of ${NUMBER.format(d.total)})` : "") +
    (v.kernels ? "" : "; zoomed out: bars are how busy each stream was (zoom in for each kernel)") +
    (d.inkernel.length ? `; ${NUMBER.format(d.inkernel.length)} in-kernel events` +
      (d.inkernel_total > d.inkernel.length ? ` of ${NUMBER.format(d.inkernel_total)}` : "") : "") +
    (TL.highlight ? `; ${NUMBER.format(all)} of ${TL.highlight}` : "") +
    (d.ignored ? `; ${d.ignored}` : "");
  Object.assign(info.dataset, { kernels: d.kernels, rows, drawn: counts.drawn, highlighted: all, lit: counts.lit,
    labels: counts.labels, mode: v.kernels ? "kernels" : "buckets", inkernel: d.inkernel.length,
    drawnInkernel: inner, drawMs: (performance.now() - began).toFixed(1) });
  if (!fine) askView();
}

// Each kernel of the span a box, named when it is wide enough; the marked ones last,
// at least 2 px wide, so that none hides under its neighbours.
function drawKernels(g, v, x) {
  const d = TL.data, lit = [];
  let drawn = 0, labels = 0;
  const box = (k, colour, text, minWidth) => {
    const [row, start, dur, ni] = k;
    const left = Math.max(TL.GUTTER, x(start)), y = TL.AXIS + TL.pos[row] * TL.ROW + 2;
    const w = Math.max(minWidth, Math.min(x(start + dur), g.canvas.width) - left);
    g.fillStyle = colour;
    g.fillRect(left, y, w, TL.ROW - 4);
    if (w < TL.LABEL) return;
    g.save();
    g.beginPath();
    g.rect(left, y, w - 2, TL.ROW - 4);
    g.clip();
    g.fillStyle = text;
    g.fillText(d.names[ni], left + 3, y + 11);
    g.restore();
    labels++;
  };
  for (const k of v.kernels) {
    const [row, start, dur, ni] = k;
    if (start + dur < TL.x0 || start > TL.x1 || TL.pos[row] < 0) continue;
    drawn++;
    if (TL.highlight !== "" && d.names[ni] === TL.highlight) lit.push(k);
    else box(k, kernelColour(d.names[ni]), labelColour(d.names[ni]), 1);
  }
  for (const k of lit) box(k, MARK, "#fff", 2);
  return { drawn, lit: lit.length, labels };
}

// Each row's buckets as bars as tall as the GPU was busy in them (at least 2 px: a
// bucket with a kernel never looks empty), the marked kernel's buckets in magenta.
function drawBuckets(g, v, x) {
  const w = bucketNs(v), h = TL.ROW - 4;
  let drawn = 0, lit = 0;
  const marked = v.mark === TL.highlight && TL.highlight !== "";
  for (const [row, cells, busy, starts, marks] of v.rows) {
    if (TL.pos[row] < 0) continue;
    const y = TL.AXIS + TL.pos[row] * TL.ROW + 2;
    g.fillStyle = KERNEL_BAR;
    for (let k = 0; k < cells.length; k++) {
      const t = v.t0 + cells[k] * w;
      if (t + w < TL.x0 || t > TL.x1) continue;
      const left = Math.max(TL.GUTTER, x(t)), bar = Math.max(2, Math.round(h * busy[k] / 1000));
      g.fillRect(left, y + h - bar, Math.max(1, x(t + w) - left), bar);
      drawn += starts[k];
    }
    if (!marked) continue;
    g.fillStyle = MARK;
    for (let k = 0; k < cells.length; k++) {
      const t = v.t0 + cells[k] * w;
      if (!marks[k] || t + w < TL.x0 || t > TL.x1) continue;
      const left = Math.max(TL.GUTTER, x(t));
      g.fillRect(left, y, Math.max(2, x(t + w) - left), h);
      lit += marks[k];
    }
  }
  return { drawn, lit, labels: 0 };
}

function fmtNs(ns) {
  return ns >= 1e9 ? `${(ns / 1e9).toFixed(3)} s` : ns >= 1e6 ? `${(ns / 1e6).toFixed(3)} ms`
    : `${(ns / 1e3).toFixed(1)} µs`;
}

// What is under the pointer: a kernel ({row, start, dur, name, stack}), else an
// in-kernel event ({..., inner: true}), else, zoomed out, a bucket ({..., bucket}).
function kernelAt(px, py) {
  const d = TL.data;
  if (!d || !TL.overview || px < TL.GUTTER) return null;
  const row = TL.pos.indexOf(Math.floor((py - TL.AXIS) / TL.ROW));
  if (row < 0) return null;
  const plot = $("timeline-canvas").width - TL.GUTTER;
  const t = TL.x0 + (px - TL.GUTTER) / plot * (TL.x1 - TL.x0);
  const slack = 2 * (TL.x1 - TL.x0) / plot;   // 2 px
  const hit = ([r, s, du]) => r === row && s - slack <= t && t <= s + du + slack;
  const { v } = source();
  if (v.kernels) {
    const k = v.kernels.find(hit);
    if (k) return { row, start: k[1], dur: k[2], name: d.names[k[3]], stack: k[4] };
  } else {
    const w = bucketNs(v), cell = Math.floor((t - v.t0) / w), r = v.rows.find((e) => e[0] === row);
    const k = r ? r[1].indexOf(cell) : -1;
    if (k >= 0) return { row, start: v.t0 + cell * w, dur: w, bucket: { busy: r[2][k], starts: r[3][k], marks: r[4][k] } };
  }
  const e = d.inkernel.find(hit);
  return e ? { row, start: e[1], dur: e[2], name: d.names[e[3]], inner: true } : null;
}

// The tooltip: what is under the pointer, and a kernel's launch stack, asked for once.
function showTip(k) {
  const tip = $("timeline-tip"), d = TL.data;
  TL.hover = k;
  if (!k) { tip.replaceChildren(); return; }
  if (k.bucket) {
    const b = k.bucket;
    tip.replaceChildren(el("div", {}, `${NUMBER.format(b.starts)} kernels start in ${fmtNs(k.dur)} at ` +
      `+${fmtNs(k.start)}, the stream busy ${(b.busy / 10).toFixed(1)}%` +
      (b.marks ? `, ${NUMBER.format(b.marks)} of ${TL.highlight}` : "") + ` (${d.rows[k.row]}); zoom in for each kernel`));
    return;
  }
  const head = el("div", {}, `${k.name}: ${fmtNs(k.dur)} at +${fmtNs(k.start)} (${d.rows[k.row]}` +
    (k.inner ? ", in-kernel)" : ")"));
  if (k.inner || k.stack === undefined || k.stack < 0) { tip.replaceChildren(head); return; }
  const frames = TL.stacks.get(k.stack);
  if (!frames) {
    tip.replaceChildren(head);
    const file = TL.file;
    getJSON("/api/timeline/stack", new URLSearchParams({ file, stack: k.stack })).then((r) => {
      if (file !== TL.file) return;
      TL.stacks.set(k.stack, r.stack);
      if (TL.hover === k) showTip(k);
    }).catch((e) => showError(e.message));
    return;
  }
  tip.replaceChildren(head, el("div", { class: "tip-stack" }, "launched from:"),
    ...frames.map((f) => el("div", { class: "tip-frame" }, f)));
}

function showTimeline(kernel) {   // from the flame graph's "On the timeline"
  TL.highlight = kernel || "";
  $("timeline-highlight").value = TL.highlight;
  showTab("timeline");
}

function zoomAt(px, factor) {
  const canvas = $("timeline-canvas");
  const at = TL.x0 + (px - TL.GUTTER) / (canvas.width - TL.GUTTER) * (TL.x1 - TL.x0);
  TL.x0 = at - (at - TL.x0) * factor;
  TL.x1 = Math.max(TL.x0 + 100, at + (TL.x1 - at) * factor);
  drawTimeline();
}

function wireTimeline() {
  const canvas = $("timeline-canvas");
  $("trace-select").onchange = () => loadTimeline($("trace-select").value);
  $("timeline-highlight").onchange = () => { TL.highlight = $("timeline-highlight").value; drawTimeline(); };
  $("timeline-reset").onclick = () => { if (TL.data) { TL.x0 = 0; TL.x1 = TL.data.span_ns; drawTimeline(); } };
  canvas.onwheel = (e) => {
    if (!TL.data || e.offsetX < TL.GUTTER) return;
    e.preventDefault();
    zoomAt(e.offsetX, e.deltaY < 0 ? 0.8 : 1.25);
  };
  canvas.onmousedown = (e) => { TL.drag = { x: e.offsetX, x0: TL.x0, x1: TL.x1 }; };
  window.addEventListener("mouseup", () => { TL.drag = null; });
  canvas.onmousemove = (e) => {
    if (TL.drag && TL.data) {
      const dt = (e.offsetX - TL.drag.x) / (canvas.width - TL.GUTTER) * (TL.drag.x1 - TL.drag.x0);
      TL.x0 = TL.drag.x0 - dt;
      TL.x1 = TL.drag.x1 - dt;
      drawTimeline();
      return;
    }
    showTip(kernelAt(e.offsetX, e.offsetY));
  };
  canvas.onclick = (e) => {
    if (TL.data && e.offsetX < TL.GUTTER) {   // a row's name: fold or unfold what is below it
      const row = TL.pos.indexOf(Math.floor((e.offsetY - TL.AXIS) / TL.ROW));
      if (row >= 0 && hasChildren(row)) {
        if (TL.folded.has(row)) TL.folded.delete(row); else TL.folded.add(row);
        drawTimeline();
      }
      return;
    }
    const k = kernelAt(e.offsetX, e.offsetY);
    if (!k || k.inner || k.bucket) return;
    TL.highlight = k.name;
    $("timeline-highlight").value = TL.highlight;
    drawTimeline();
  };
}
