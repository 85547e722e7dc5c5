// gpu-agent UI: the Timeline tab. One Perfetto trace of the store (record/trace
// --store) drawn on a canvas: a row per (process, GPU, stream), each kernel a box at
// its GPU start and duration. Wheel zooms around the pointer, drag pans, hover names
// a kernel; a kernel chosen in the flame graph ("On the timeline") is drawn in
// magenta and counted. Kernel names reach the page as canvas text and text nodes only.
"use strict";

const TL = { data: null, x0: 0, x1: 1, highlight: "", drag: null, ROW: 18, GUTTER: 360, AXIS: 22,
  folded: new Set(), pos: [] };

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

async function loadTimeline(name) {
  try {
    TL.data = await getJSON("/api/timeline", new URLSearchParams({ file: name }));
    TL.folded = new Set();
    TL.x0 = 0;
    TL.x1 = Math.max(1, TL.data.end_ns - TL.data.start_ns);
    drawTimeline();
    bump("timelines");
  } catch (e) {
    TL.data = null;
    drawTimeline();
    showError(e.message);
  }
}

function kernelColour(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${100 + h % 60}, 55%, ${45 + (h >> 8) % 20}%)`;   // the flame graph's kernel greens
}

function drawTimeline() {
  const canvas = $("timeline-canvas"), info = $("timeline-info");
  const d = TL.data;
  const rows = layout();
  const width = canvas.parentElement.clientWidth || 1200;
  canvas.width = width;
  canvas.height = TL.AXIS + Math.max(1, rows) * TL.ROW;
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, canvas.width, canvas.height);
  if (!d) {
    info.textContent = "";
    delete info.dataset.kernels;
    return;
  }
  const plot = width - TL.GUTTER, span = TL.x1 - TL.x0;
  const x = (t) => TL.GUTTER + (t - TL.x0) / span * plot;
  g.font = "11px sans-serif";
  g.fillStyle = "#374151";
  for (let t = 0; t <= 4; t++) {   // the axis: time from the first kernel (zoomed in: from the left edge)
    const at = TL.x0 + span * t / 4;
    const text = t && span < 1e6 ? `+${span * t / 4 >= 1e3 ? `${(span * t / 4e3).toFixed(2)} µs`
      : `${Math.round(span * t / 4)} ns`}` : fmtNs(at);
    g.fillText(text, x(at) - (t === 4 ? 60 : 0), 14);
  }
  const box = (row, start, dur) => {
    const left = Math.max(TL.GUTTER, x(start));
    g.fillRect(left, TL.AXIS + TL.pos[row] * TL.ROW + 2, Math.max(1, x(start + dur) - left), TL.ROW - 4);
  };
  let drawn = 0, lit = 0, inner = 0;
  for (const [row, start, dur, ni] of d.kernels) {
    if (start + dur < TL.x0 || start > TL.x1 || TL.pos[row] < 0) continue;
    const name = d.names[ni], on = TL.highlight !== "" && name === TL.highlight;
    g.fillStyle = on ? "#e600e6" : kernelColour(name);
    box(row, start, dur);
    drawn++;
    if (on) lit++;
  }
  for (const [row, start, dur] of d.inkernel) {
    if (start + dur < TL.x0 || start > TL.x1 || TL.pos[row] < 0) continue;
    g.fillStyle = "#7c3aed";
    box(row, start, dur);
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
  const all = d.kernels.filter(([, , , ni]) => TL.highlight !== "" && d.names[ni] === TL.highlight).length;
  info.textContent = `${NUMBER.format(d.kernels.length)} kernels on ${plural(rows, "row")}` +
    (d.truncated ? ` (the first ${NUMBER.format(d.kernels.length)} of ${NUMBER.format(d.total)})` : "") +
    (d.inkernel.length ? `; ${NUMBER.format(d.inkernel.length)} in-kernel events` +
      (d.inkernel_total > d.inkernel.length ? ` of ${NUMBER.format(d.inkernel_total)}` : "") : "") +
    (TL.highlight ? `; ${NUMBER.format(all)} of ${TL.highlight}` : "") +
    (d.ignored ? `; ${d.ignored}` : "");
  Object.assign(info.dataset, { kernels: d.kernels.length, rows, drawn, highlighted: all, lit,
    inkernel: d.inkernel.length, drawnInkernel: inner });
}

function fmtNs(ns) {
  return ns >= 1e9 ? `${(ns / 1e9).toFixed(3)} s` : ns >= 1e6 ? `${(ns / 1e6).toFixed(3)} ms`
    : `${(ns / 1e3).toFixed(1)} µs`;
}

// The box under the pointer: a kernel, else an in-kernel event ([row, start, dur, name, inner]).
function kernelAt(px, py) {
  const d = TL.data;
  if (!d || px < TL.GUTTER) return null;
  const row = TL.pos.indexOf(Math.floor((py - TL.AXIS) / TL.ROW));
  if (row < 0) return null;
  const t = TL.x0 + (px - TL.GUTTER) / ($("timeline-canvas").width - TL.GUTTER) * (TL.x1 - TL.x0);
  const slack = 2 * (TL.x1 - TL.x0) / ($("timeline-canvas").width - TL.GUTTER);   // 2 px
  const hit = ([r, s, du]) => r === row && s - slack <= t && t <= s + du + slack;
  const k = d.kernels.find(hit);
  if (k) return k;
  const e = d.inkernel.find(hit);
  return e ? [...e, true] : null;
}

function showTimeline(kernel) {   // from the flame graph's "On the timeline"
  TL.highlight = kernel || "";
  $("timeline-highlight").value = TL.highlight;
  showTab("timeline");
}

function wireTimeline() {
  const canvas = $("timeline-canvas");
  $("trace-select").onchange = () => loadTimeline($("trace-select").value);
  $("timeline-highlight").onchange = () => { TL.highlight = $("timeline-highlight").value; drawTimeline(); };
  $("timeline-reset").onclick = () => { if (TL.data) { TL.x0 = 0; TL.x1 = TL.data.end_ns - TL.data.start_ns; drawTimeline(); } };
  canvas.onwheel = (e) => {
    if (!TL.data || e.offsetX < TL.GUTTER) return;
    e.preventDefault();
    const at = TL.x0 + (e.offsetX - TL.GUTTER) / (canvas.width - TL.GUTTER) * (TL.x1 - TL.x0);
    const k = e.deltaY < 0 ? 0.8 : 1.25;
    TL.x0 = at - (at - TL.x0) * k;
    TL.x1 = Math.max(TL.x0 + 100, at + (TL.x1 - at) * k);
    drawTimeline();
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
    const k = kernelAt(e.offsetX, e.offsetY), tip = $("timeline-tip");
    tip.textContent = k ? `${TL.data.names[k[3]]}: ${fmtNs(k[2])} at +${fmtNs(k[1])} (${TL.data.rows[k[0]]}` +
      (k[4] ? ", in-kernel)" : ")") : "";
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
    if (!k || k[4]) return;
    TL.highlight = TL.data.names[k[3]];
    $("timeline-highlight").value = TL.highlight;
    drawTimeline();
  };
}
