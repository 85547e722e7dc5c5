// gpu-agent UI: the page's own code, plain JavaScript over the JSON API (ui/api.py).
// Drawing a flame graph is d3-flame-graph's (static/vendor/flamegraph.js, bundled by
// `make ui`); everything else is here. Profile strings (kernel names, comm, pods)
// come from other tenants' processes: they only ever reach the page as text nodes,
// never as HTML.
"use strict";

const V = window.GpuAgentVendor;
const LABELS = ["pid", "comm", "pod", "namespace", "container", "cuda_device"];
const KIND_COLOURS = {
  kernel: [128, 62, 42], graph: [276, 58, 56], python: [216, 62, 60],
  native: [30, 84, 61], marker: [0, 0, 66], root: [0, 0, 80],
};
const HOUR = 3600 * 1000;

const state = {
  from: null, to: null,          // the chosen range (ms), merged on the server
  viewFrom: null, viewTo: null,  // what the chart shows
  span: HOUR,                    // the chart's span, or "all"
  type: "gpu_time",
  labels: {},                    // label -> value kept
  kernel: "", focus: [], ignore: [],
  orient: "flame", tab: "flame",
  store: null,                   // /api/status's store
  selected: null,                // the clicked frame's name
  topRows: [], topSort: ["total", -1],
};
let flameChart = null;

// ---- small helpers -------------------------------------------------------------
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function fmtTime(ms) {
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19);
}

function parseTime(text) {
  const t = text.trim();
  const ms = Date.parse(t.replace(" ", "T") + (/[zZ]|[+-]\d\d:?\d\d$/.test(t) ? "" : "Z"));
  if (Number.isNaN(ms)) throw new Error(`not a time: ${JSON.stringify(text)} (YYYY-MM-DD HH:MM:SS, UTC)`);
  return ms;
}

function fmtValue(v, type) {
  if ((type || state.type) !== "gpu_time") return `${Math.round(v).toLocaleString("en-US")} launches`;
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(3)} s`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(2)} ms`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)} µs`;
  return `${v} ns`;
}

function exact(v) {
  return `${Math.round(v).toLocaleString("en-US")} ${state.type === "gpu_time" ? "ns" : "launches"}`;
}

function pct(v, total) {
  return total ? `${((100 * v) / total).toFixed(2)} %` : "–";
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function getJSON(path, params) {
  const url = path + "?" + params.toString();
  const r = await fetch(url, { credentials: "same-origin" });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${(await r.text()).trim()}`);
  return r.json();
}

// ---- query parameters and the address bar --------------------------------------
function filterParams(params) {
  for (const [k, v] of Object.entries(state.labels)) if (v !== "") params.append(k, v);
  if (state.kernel) params.set("kernel", state.kernel);
  for (const f of state.focus) params.append("focus", f);
  for (const f of state.ignore) params.append("ignore", f);
  return params;
}

function rangeParams() {
  const p = new URLSearchParams({ from: state.from, to: state.to, type: state.type });
  return filterParams(p);
}

function saveHash() {
  const p = rangeParams();
  if (state.orient !== "flame") p.set("orient", state.orient);
  if (state.tab !== "flame") p.set("tab", state.tab);
  history.replaceState(null, "", "#" + p.toString());
}

function loadHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  if (p.get("from") && p.get("to")) {
    state.from = Number(p.get("from"));
    state.to = Number(p.get("to"));
  }
  state.type = p.get("type") || state.type;
  for (const k of LABELS) if (p.get(k)) state.labels[k] = p.get(k);
  state.kernel = p.get("kernel") || "";
  state.focus = p.getAll("focus");
  state.ignore = p.getAll("ignore");
  state.orient = p.get("orient") || state.orient;
  state.tab = p.get("tab") || state.tab;
}

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
  const key = state.type === "gpu_time" ? "gpu_ns" : "launches";
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
    r.dataset.end = b.end_ms;
    const title = document.createElementNS(ns, "title");
    title.textContent = `${fmtTime(b.start_ms)} – ${fmtTime(b.end_ms)}: ${fmtValue(b[key])} (${b.files} profiles)`;
    r.append(title);
    svg.append(r);
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
  $("range-info").textContent = `${data.files} profiles in view`;
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
        setRange(Number(bar.dataset.end) - 1, Number(bar.dataset.end));
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
  state.viewTo = last;
  state.viewFrom = span === "all" ? first - 1 : last - span;
}

// ---- the merged range --------------------------------------------------------------
async function refresh() {
  saveHash();
  showError("");
  $("from").value = fmtTime(state.from);
  $("to").value = fmtTime(state.to);
  if (state.from < state.viewFrom || state.to > state.viewTo) {
    state.viewFrom = Math.min(state.viewFrom, state.from);
    state.viewTo = Math.max(state.viewTo, state.to);
  }
  try {
    const [_, data] = await Promise.all([loadChart(), getJSON("/api/range", rangeParams())]);
    renderRange(data);
  } catch (e) {
    showError(e.message);
  }
}

function renderRange(data) {
  state.data = data;
  $("total").textContent = `${fmtValue(data.total)} in ${data.files} profiles` +
    (data.filters.length ? ` (filtered: ${data.filters.join(", ")})` : "");
  $("total").dataset.total = data.total;
  renderFilters(data.labels);
  renderChips();
  renderFlame(data.tree);
  state.topRows = data.top;
  renderTop();
  const p = rangeParams();
  $("dl-pprof").href = "/download/profile.pb.gz?" + p.toString();
  $("dl-trace").hidden = !data.traces;
  $("dl-trace").href = "/download/trace.perfetto-trace?" + new URLSearchParams({ from: state.from, to: state.to });
  bump("renders");
}

// Counters on <body> that scripts (and the tests) wait on: one more per render.
function bump(name) {
  document.body.dataset[name] = String(Number(document.body.dataset[name] || 0) + 1);
}

function renderFilters(labels) {
  for (const name of LABELS) {
    const select = $("f-" + name);
    const chosen = state.labels[name] || "";
    select.replaceChildren(el("option", { value: "" }, "any"));
    const values = labels[name] || [];
    if (chosen && !values.some((v) => v.value === chosen)) values.push({ value: chosen, total: 0 });
    for (const v of values) {
      const o = el("option", { value: v.value }, `${v.value} (${fmtValue(v.total)})`);
      if (v.value === chosen) o.selected = true;
      select.append(o);
    }
    select.disabled = values.length === 0;
  }
  $("f-kernel").value = state.kernel;
  $("type").value = state.type;
}

function renderChips() {
  const chips = $("chips");
  chips.replaceChildren();
  const chip = (label, list, i) => el("span", { class: "chip" }, label,
    el("button", { title: "remove", onclick: () => { list.splice(i, 1); refresh(); } }, "×"));
  state.focus.forEach((f, i) => chips.append(chip(`focus: ${f}`, state.focus, i)));
  state.ignore.forEach((f, i) => chips.append(chip(`hidden: ${f}`, state.ignore, i)));
}

function colour(d) {
  if (d.highlight) return "#e600e6";
  const [h, s, l] = KIND_COLOURS[d.data.kind] || KIND_COLOURS.native;
  // Neighbouring frames of one kind differ a little in lightness, by name.
  let hash = 0;
  for (const c of d.data.name) hash = (hash * 31 + c.charCodeAt(0)) | 0;
  return `hsl(${h}, ${s}%, ${l - 6 + (Math.abs(hash) % 12)}%)`;
}

function newChart(container, tree, opts) {
  container.replaceChildren();
  if (!tree.value && !(tree.children || []).length) {
    container.append(el("div", { class: "empty" }, "No samples in this range with these filters."));
    return null;
  }
  const width = Math.max(400, container.clientWidth - 2);
  const root = tree.value;
  const chart = V.flamegraph()
    .width(width)
    .cellHeight(18)
    .minFrameSize(1)
    .transitionDuration(300)
    .sort(false)
    .inverted(state.orient === "icicle")
    .setLabelHandler(opts.label || ((d) => `${d.data.name}: ${exact(d.data.value)} (${pct(d.data.value, root)})`))
    .setColorMapper(opts.colour || colour)
    .setDetailsElement(opts.details);
  if (opts.onClick) chart.onClick(opts.onClick);
  V.select(container).datum(tree).call(chart);
  container.dataset.total = root;
  return chart;
}

function renderFlame(tree) {
  state.selected = null;
  $("selected").hidden = true;
  flameChart = newChart($("flame"), tree, {
    details: $("details"),
    onClick: (d) => selectFrame(d),
  });
}

function selectFrame(d) {
  if (d.depth === 0) {
    $("selected").hidden = true;
    state.selected = null;
    return;
  }
  state.selected = d.data.name;
  $("sel-name").textContent = d.data.name;
  $("sel-value").textContent = `(${d.data.kind}, ${fmtValue(d.data.value)}, ${pct(d.data.value, state.data.total)})`;
  $("selected").hidden = false;
}

// ---- the top table -----------------------------------------------------------------
function renderTop() {
  const [key, dir] = state.topSort;
  const rows = [...state.topRows].sort((a, b) => {
    const x = a[key], y = b[key];
    return (typeof x === "string" ? x.localeCompare(y) : x - y) * dir;
  });
  const body = $("top-table").tBodies[0];
  body.replaceChildren(...rows.map((r) => el("tr", {},
    el("td", { class: "name", title: "focus on this frame", onclick: () => { state.focus.push(r.name); refresh(); } }, r.name),
    el("td", {}, el("span", { class: "kind " + r.kind }, r.kind)),
    el("td", { class: "num" }, fmtValue(r.self)), el("td", { class: "num" }, pct(r.self_share, 1)),
    el("td", { class: "num" }, fmtValue(r.total)), el("td", { class: "num" }, pct(r.total_share, 1)))));
}

// ---- the diff ----------------------------------------------------------------------
function defaultDiffRanges() {
  if ($("b-from").value) return;
  const span = state.to - state.from;
  $("a-from").value = fmtTime(state.from - span);
  $("a-to").value = fmtTime(state.from);
  $("b-from").value = fmtTime(state.from);
  $("b-to").value = fmtTime(state.to);
}

async function compare() {
  showError("");
  try {
    const p = new URLSearchParams({
      a_from: parseTime($("a-from").value), a_to: parseTime($("a-to").value),
      b_from: parseTime($("b-from").value), b_to: parseTime($("b-to").value),
      type: state.type, normalize: $("normalize").checked ? "1" : "0",
    });
    const data = await getJSON("/api/diff", filterParams(p));
    renderDiff(data);
  } catch (e) {
    showError(e.message);
  }
}

function renderDiff(data) {
  const change = (d) => {
    const before = d.data.before, after = d.data.value, delta = d.data.delta;
    const rel = before ? ` (${delta >= 0 ? "+" : ""}${((100 * delta) / before).toFixed(1)} %)` : " (new)";
    return `${d.data.name}: before ${exact(before)}, after ${exact(after)}, change ${delta >= 0 ? "+" : ""}${exact(delta)}${rel}`;
  };
  $("diff-info").textContent = `before: ${fmtValue(data.a.total)} in ${data.a.files} profiles; ` +
    `after: ${fmtValue(data.b.total)} in ${data.b.files} profiles` + (data.normalized ? " (normalized)" : "");
  newChart($("diff-flame"), data.tree, {
    details: $("diff-details"),
    label: change,
    colour: (d, original) => V.differentialColorMapper(d, original),
  });
  const body = $("changes-table").tBodies[0];
  body.replaceChildren(...data.changes.map((r) => el("tr", { "data-name": r.name },
    el("td", { class: "name" }, r.name),
    el("td", {}, el("span", { class: "kind " + r.kind }, r.kind)),
    el("td", { class: "num" }, fmtValue(r.before)), el("td", { class: "num" }, fmtValue(r.after)),
    el("td", { class: "num " + (r.delta > 0 ? "up" : "down") },
      `${r.delta > 0 ? "+" : ""}${fmtValue(r.delta)}` + (r.ratio ? ` (×${r.ratio.toFixed(2)})` : " (new)")))));
  bump("diffs");
}

// ---- the status page ---------------------------------------------------------------
async function loadStatus() {
  const s = await getJSON("/api/status", new URLSearchParams());
  state.store = s.store;
  return s;
}

function renderStatus(s) {
  const box = $("status");
  const kv = (rows) => el("table", { class: "table" }, ...rows.map(([k, v]) =>
    el("tr", {}, el("th", {}, k), el("td", {}, v))));
  const st = s.store;
  const parts = [el("h3", {}, "Store"), kv([
    ["directory", st.directory], ["profiles", st.profiles], ["Perfetto traces", st.traces],
    ["size", `${(st.bytes / 1048576).toFixed(1)} MiB`],
    ["first window", st.first_ns ? fmtTime(st.first_ns / 1e6) + " UTC" : "–"],
    ["last window", st.last_ns ? fmtTime(st.last_ns / 1e6) + " UTC" : "–"],
    ["decoded (cached)", `${s.ui.cached_files} profiles, ${s.ui.cached_rows} rows`],
    ["unreadable files", Object.keys(s.ui.unreadable).length],
  ])];
  parts.push(el("h3", {}, "Agent"));
  if (!s.agent_attached) {
    parts.push(el("p", { class: "note", id: "no-agent" }, "No agent is attached: this is `gpu-agent ui` reading " +
      "the store alone. Serve the UI with `gpu-agent run --ui ADDR` to see the agent's health here."));
  } else if (!s.agent) {
    parts.push(el("p", { class: "note" }, "The agent has not reported yet (its first window is still open)."));
  } else {
    const a = s.agent;
    parts.push(kv([
      ["attached processes", a.attached_processes], ["shim files watched", a.shims ?? "–"],
      ["BPF events", a.bpf_events], ["kernel records", a.kernel_records],
      ["sampled launches", a.sampled_launches],
      ["windows", Object.entries(a.profiles || {}).map(([k, v]) => `${k}: ${v}`).join(", ")],
    ]));
    parts.push(el("h3", {}, "Drops"), kv(Object.entries(a.drops || {}).map(([k, v]) => [k, v])));
    parts.push(el("h3", {}, "Backends"), kv((a.backends || []).map((b) => [b.name,
      b.queue ? `sent ${b.queue.sent}, queued ${b.queue.depth} (${b.queue.queued_bytes} bytes), ` +
        `dropped ${JSON.stringify(b.queue.dropped)}, failures ${JSON.stringify(b.queue.failures)}`
        : Object.entries(b.counts).map(([k, v]) => `${k}: ${v}`).join(", ")])));
  }
  box.replaceChildren(...parts);
  bump("statuses");
}

// ---- wiring ------------------------------------------------------------------------
function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("nav .tab")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const p of document.querySelectorAll(".panel")) p.hidden = p.id !== "tab-" + tab;
  if (tab === "diff") defaultDiffRanges();
  if (tab === "status") loadStatus().then(renderStatus).catch((e) => showError(e.message));
  saveHash();
}

function wire() {
  for (const b of document.querySelectorAll("nav .tab")) b.onclick = () => showTab(b.dataset.tab);
  for (const b of document.querySelectorAll("#presets button")) {
    b.onclick = () => {
      setView(b.dataset.span === "all" ? "all" : Number(b.dataset.span));
      setRange(state.viewFrom, state.viewTo);
    };
  }
  $("apply-range").onclick = () => {
    try {
      const from = parseTime($("from").value), to = parseTime($("to").value);
      if (from >= to) throw new Error("the range must end after it starts");
      state.viewFrom = Math.min(state.viewFrom, from);
      state.viewTo = Math.max(state.viewTo, to);
      setRange(from, to);
    } catch (e) { showError(e.message); }
  };
  $("apply-filters").onclick = () => {
    for (const s of document.querySelectorAll(".label-filter")) state.labels[s.dataset.label] = s.value;
    state.kernel = $("f-kernel").value.trim();
    refresh();
  };
  for (const s of document.querySelectorAll(".label-filter")) s.onchange = $("apply-filters").onclick;
  $("f-kernel").onkeydown = (e) => { if (e.key === "Enter") $("apply-filters").onclick(); };
  $("type").onchange = () => { state.type = $("type").value; refresh(); };
  for (const r of document.querySelectorAll("input[name=orient]")) {
    r.checked = r.value === state.orient;
    r.onchange = () => { state.orient = r.value; saveHash(); if (state.data) renderFlame(state.data.tree); };
  }
  $("reset-zoom").onclick = () => { if (flameChart) flameChart.resetZoom(); };
  $("focus-frame").onclick = () => { if (state.selected) { state.focus.push(state.selected); refresh(); } };
  $("hide-frame").onclick = () => { if (state.selected) { state.ignore.push(state.selected); refresh(); } };
  for (const th of document.querySelectorAll("#top-table th")) {
    th.onclick = () => {
      const key = th.dataset.sort;
      state.topSort = [key, state.topSort[0] === key ? -state.topSort[1] : (key === "name" || key === "kind" ? 1 : -1)];
      renderTop();
    };
  }
  const useChosen = (prefix) => () => {
    $(prefix + "-from").value = fmtTime(state.from);
    $(prefix + "-to").value = fmtTime(state.to);
  };
  $("a-set").onclick = useChosen("a");
  $("b-set").onclick = useChosen("b");
  $("compare").onclick = compare;
}

async function main() {
  loadHash();
  wire();
  try {
    await loadStatus();
  } catch (e) {
    showError(e.message);
    return;
  }
  if (!state.store.profiles) {
    showError(`The store ${state.store.directory} has no profile yet: \`gpu-agent run\` writes one per interval.`);
  }
  setView(HOUR);
  if (state.from === null) {
    state.from = state.viewFrom;
    state.to = state.viewTo;
  }
  showTab(state.tab);
  await refresh();
}

main();
