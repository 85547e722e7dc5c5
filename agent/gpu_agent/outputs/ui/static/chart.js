// gpu-agent UI: the range chart (GPU time per interval) and choosing a range on it.
// Loaded before app.js; shares its globals (state, helpers).
"use strict";

// ---- the range chart -------------------------------------------------------------
async function loadChart() {
  const data = await getJSON("/api/intervals", new URLSearchParams({ from: state.viewFrom, to: state.viewTo }));
  drawChart(data);
}

// A tick of the value axis, in the unit of the axis' top (GPU time: s, ms, µs, ns).
function fmtTick(v, top, scale) {
  if (state.type !== "gpu_time") return `${scale.tickFormat(3, "~s")(v)} ${UNIT[state.type]}`;
  const [u, name] = top >= 1e9 ? [1e9, "s"] : top >= 1e6 ? [1e6, "ms"] : top >= 1e3 ? [1e3, "µs"] : [1, "ns"];
  return `${Number((v / u).toFixed(3))} ${name}`;
}

function drawChart(data) {
  const svg = $("chart");
  const W = svg.clientWidth || 800, H = 96, top = 6, bottom = 16;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const span = state.viewTo - state.viewFrom;
  const x = (ms) => ((ms - state.viewFrom) / span) * W;
  const ns = "http://www.w3.org/2000/svg";
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  const key = { gpu_time: "gpu_ns", kernel_launches: "launches", pc_samples: "pc_samples" }[state.type];
  // The scale is the measured values': what [dropped: …] markers claim (estimates a
  // single process can inflate to hours a window) is a series apart, on top, cut at
  // the chart's top edge and marked there when it is off the scale.
  const dkey = "dropped_" + key;
  // The value axis (d3-scale): from 0 to a round value at or above the highest bar,
  // a few labelled ticks with grid lines; the time axis: UTC ticks at round times,
  // in d3's multi-scale format (":50", "05:40", "Nov 28").
  const y = V.scaleLinear().domain([0, Math.max(1, ...data.intervals.map((b) => b[key]))])
    .range([H - bottom, top]).nice(3);
  const max = y.domain()[1];
  const yTicks = y.ticks(3).filter((v) => v > 0);
  for (const v of yTicks) add("line", { class: "grid", x1: 0, x2: W, y1: y(v), y2: y(v) });
  const t = V.scaleUtc().domain([state.viewFrom, state.viewTo]).range([0, W]);
  const tFormat = t.tickFormat();
  for (const b of data.intervals) {
    const r = document.createElementNS(ns, "rect");
    const x0 = x(b.start_ms), x1 = x(b.end_ms);
    const h = ((H - top - bottom) * b[key]) / max;
    r.setAttribute("x", x0);
    r.setAttribute("width", Math.max(1, x1 - x0 - 0.5));
    r.setAttribute("y", H - bottom - h);
    r.setAttribute("height", h);
    r.setAttribute("class", "bar" + (b.end_ms > state.from && b.end_ms <= state.to ? " in" : ""));
    r.dataset.start = b.start_ms;
    r.dataset.start = b.start_ms;
    r.dataset.end = b.end_ms;
    const title = document.createElementNS(ns, "title");
    title.textContent = `${fmtTime(b.start_ms)} – ${fmtTime(b.end_ms)}: ${fmtValue(b[key])} (${b.files} profiles)`;
    r.append(title);
    svg.append(r);
    const dropped = b[dkey] || 0;
    if (dropped > 0) {
      // on top of its bar; off the scale, up to the chart's edge (through the strip
      // above the plot, which only such claims reach)
      const barTop = H - bottom - h;
      const full = ((H - top - bottom) * dropped) / max;
      const off = full > barTop - top;
      const dh = off ? barTop : full;
      const d = document.createElementNS(ns, "rect");
      d.setAttribute("x", x0);
      d.setAttribute("width", Math.max(1, x1 - x0 - 0.5));
      d.setAttribute("y", barTop - dh);
      d.setAttribute("height", Math.max(1, dh));
      d.setAttribute("class", "dropped" + (off ? " off-scale" : ""));
      d.dataset.value = dropped;
      const dt = document.createElementNS(ns, "title");
      dt.textContent = `${fmtTime(b.start_ms)} – ${fmtTime(b.end_ms)}: [dropped: …] claims ${fmtValue(dropped)} ` +
        `(estimated; not in the bar's value${off ? ", off the chart's scale" : ""})`;
      d.append(dt);
      svg.append(d);
    }
  }
  add("line", { class: "axis", x1: 0, x2: W, y1: H - bottom, y2: H - bottom });
  for (const ms of t.ticks(Math.max(2, Math.round(W / 120)))) {
    const at = t(ms);
    add("line", { class: "axis", x1: at, x2: at, y1: H - bottom, y2: H - bottom + 3 });
    const label = add("text", {
      class: "x-tick", x: at, y: H - 3, "text-anchor": at < 30 ? "start" : at > W - 30 ? "end" : "middle",
    }, tFormat(ms));
    label.dataset.ms = +ms;
  }
  for (const v of yTicks) { // over the bars, on a halo; clicks go through to the bars
    const at = y(v);
    const label = add("text", { class: "y-tick", x: 3, y: at - 3 < top + 8 ? at + 10 : at - 3 }, fmtTick(v, max, y));
    label.dataset.value = v;
    label.dataset.y = at;
  }
  const sel = document.createElementNS(ns, "rect");
  sel.setAttribute("class", "selection");
  sel.setAttribute("y", 0);
  sel.setAttribute("height", H - bottom);
  svg.append(sel);
  const placeSelection = (a, b) => {
    sel.setAttribute("x", Math.max(0, Math.min(x(a), x(b))));
    sel.setAttribute("width", Math.max(1, Math.abs(x(b) - x(a))));
  };
  placeSelection(Math.max(state.from, state.viewFrom), Math.min(state.to, state.viewTo));
  $("range-info").textContent = state.store && !state.store.profiles ? "the store is empty"
    : `${plural(data.files, "profile")} in view (times in UTC)`;
  svg.onmousedown = (ev) => {
    const box = svg.getBoundingClientRect();
    const toMs = (cx) => state.viewFrom + ((cx - box.left) / box.width) * span;
    const start = toMs(ev.clientX);
    let end = start;
    svg.onmousemove = (e) => { end = toMs(e.clientX); placeSelection(start, end); };
    svg.onmouseup = (e) => {
      svg.onmousemove = svg.onmouseup = null;
      end = toMs(e.clientX);
      if (Math.abs(x(end) - x(start)) < 3) {
        // A click: the interval of the bar under the pointer.
        const bar = e.target.closest && e.target.closest("rect.bar");
        if (!bar) return;
        setRange(Number(bar.dataset.start), Number(bar.dataset.end));
      } else {
        setRange(Math.round(Math.min(start, end)), Math.round(Math.max(start, end)));
      }
    };
  };
}

function setRange(from, to) {
  state.from = from;
  state.to = to;
  $("from").value = fmtTime(from);
  $("to").value = fmtTime(to);
  refresh();
}

function setView(span) {
  state.span = span;
  const s = state.store;
  const last = s && s.last_ns ? Math.floor(s.last_ns / 1e6) + 1 : Date.now();
  const first = s && s.first_ns ? Math.floor(s.first_ns / 1e6) : last - HOUR;
  // A store younger than the span fills the chart instead of a sliver at its right;
  // a margin keeps the first and last bars off the edges (and easy to drag over).
  const margin = Math.round(Math.max(1000, Math.min(60000, (last - first) * 0.02)));
  state.viewTo = last + margin;
  state.viewFrom = span === "all" ? first - margin : Math.max(last - span, first - margin);
}
