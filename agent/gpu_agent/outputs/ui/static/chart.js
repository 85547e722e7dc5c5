// gpu-agent UI: the range chart (GPU time per interval) and choosing a range on it.
// Loaded before app.js; shares its globals (state, helpers).
"use strict";

// ---- the range chart -------------------------------------------------------------
async function loadChart() {
  const data = await getJSON("/api/intervals", new URLSearchParams({ from: state.viewFrom, to: state.viewTo }));
  drawChart(data);
}

function drawChart(data) {
  const svg = $("chart");
  const W = svg.clientWidth || 800, H = 72, top = 4, bottom = 14;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const span = state.viewTo - state.viewFrom;
  const x = (ms) => ((ms - state.viewFrom) / span) * W;
  const key = { gpu_time: "gpu_ns", kernel_launches: "launches", pc_samples: "pc_samples" }[state.type];
  // The scale is the measured values': what [dropped: …] markers claim (estimates a
  // single process can inflate to hours a window) is a series apart, on top, cut at
  // the chart's top edge and marked there when it is off the scale.
  const dkey = "dropped_" + key;
  const max = Math.max(1, ...data.intervals.map((b) => b[key]));
  const ns = "http://www.w3.org/2000/svg";
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
      const room = H - bottom - h - top;
      const dh = Math.min(room, ((H - top - bottom) * dropped) / max);
      const d = document.createElementNS(ns, "rect");
      const off = ((H - top - bottom) * dropped) / max > room;
      d.setAttribute("x", x0);
      d.setAttribute("width", Math.max(1, x1 - x0 - 0.5));
      d.setAttribute("y", H - bottom - h - dh);
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
  for (const [ms, anchor] of [[state.viewFrom, "start"], [state.viewTo, "end"]]) {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", anchor === "start" ? 2 : W - 2);
    t.setAttribute("y", H - 3);
    t.setAttribute("text-anchor", anchor);
    t.textContent = fmtTime(ms) + " UTC";
    svg.append(t);
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
  $("range-info").textContent = `${plural(data.files, "profile")} in view`;
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
