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
  native: [30, 84, 61], marker: [0, 0, 66], root: [0, 0, 80], label: [50, 60, 70],
};
const HOUR = 3600 * 1000;
// One formatter for every number: toLocaleString builds one per call, and a flame
// graph labels thousands of frames.
const NUMBER = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });

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
  group: "", // a label whose values split the flame graph under its root ("" none)
  lines: false, // frames split by source line (pprof -lines), not merged by function
  topRows: [], topSort: ["self", -1], // by self: kernels first, not clone3 (every thread's root)
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

const UNIT = { gpu_time: "ns", kernel_launches: "launches", pc_samples: "samples" };

function fmtValue(v, type) {
  if ((type || state.type) !== "gpu_time") return `${NUMBER.format(v)} ${UNIT[type || state.type]}`;
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(3)} s`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(2)} ms`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)} µs`;
  return `${v} ns`;
}

function exact(v) {
  return `${NUMBER.format(v)} ${UNIT[state.type]}`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// Where a frame's code is: its file and line (a native frame's library), and how
// many lines of code a frame merged by function stands for.
function where(data) {
  if (!data.file) return "";
  const more = data.lines > 1 ? ` and ${plural(data.lines - 1, "more line")}` : "";
  return data.file + (data.line ? `:${data.line}` : "") + more;
}

function named(data) {
  const w = where(data);
  return w ? `${data.name} (${w})` : data.name;
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
  if (state.group) p.set("group", state.group);
  if (state.lines) p.set("lines", "1");
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
  state.group = p.get("group") || "";
  state.lines = p.get("lines") === "1";
  state.focus = p.getAll("focus");
  state.ignore = p.getAll("ignore");
  state.orient = p.get("orient") || state.orient;
  state.tab = p.get("tab") || state.tab;
}

// ---- the merged range --------------------------------------------------------------
async function refresh(pending) {
  saveHash();
  showError("");
  $("from").value = fmtTime(state.from);
  $("to").value = fmtTime(state.to);
  if (state.from < state.viewFrom || state.to > state.viewTo) {
    state.viewFrom = Math.min(state.viewFrom, state.from);
    state.viewTo = Math.max(state.viewTo, state.to);
  }
  try {
    const [_, early] = await Promise.all([loadChart(), pending]);
    renderRange(early || await getJSON("/api/range", rangeParams()));
    if (state.tab === "sandwich") loadSandwich(); // the same range and filters
    if (state.tab === "diff") { defaultDiffRanges(); compare(); } // the chosen range, the same filters
    if (state.tab === "timeline") loadTraces();   // the range's traces
  } catch (e) {
    showError(e.message);
    // not the last good graph under an error about another query
    $("flame").replaceChildren();
    $("dropped").hidden = true;
    state.topRows = [];
    renderTop();
  }
}

function renderRange(data) {
  state.data = data;
  $("total").textContent = `${fmtValue(data.total)} in ${plural(data.files, "profile")}` +
    (data.filters.length ? ` (filtered: ${data.filters.join(", ")})` : "") +
    (data.dropped ? `; apart: ${fmtValue(data.dropped)} claimed by [dropped: …] (estimated)` : "");
  $("total").dataset.total = data.total;
  $("total").dataset.dropped = data.dropped || 0;
  renderFilters(data.labels);
  renderGroups(data.group_labels || []);
  renderChips();
  renderFlame(data.tree);
  renderDropped(data.dropped_tree);
  state.topRows = data.top;
  renderTop();
  const p = rangeParams();
  $("dl-pprof").href = "/download/profile.pb.gz?" + p.toString();
  $("dl-trace").hidden = !data.traces;
  $("dl-trace").href = "/download/trace.perfetto-trace?" + new URLSearchParams({ from: state.from, to: state.to });
  bump("renders");
}

// Group by: the labels the range's samples carry.
function renderGroups(labels) {
  const select = $("group");
  const keep = labels.includes(state.group) ? state.group : "";
  select.replaceChildren(el("option", { value: "" }, "nothing"),
    ...labels.map((l) => el("option", { value: l }, l)));
  select.value = keep;
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

// An empty store is said as such, with the commands that fill it (the CLI's options).
function emptyStore() {
  const dir = state.store.directory;
  return `The store ${dir} holds no profiles yet. \`sudo gpu-agent run --output-dir ${dir}\` writes one ` +
    "every interval (10 s by default) in which CUDA processes run kernels, and `gpu-agent run --output-dir " +
    `${dir} --ui 127.0.0.1:7071\` serves this page beside it. For one program, \`gpu-agent record -o gpu.pb.gz ` +
    `--trace run.perfetto-trace --store ${dir} -- CMD\` writes its profile (go tool pprof reads it) and puts its ` +
    "kernel timeline into the store (the Timeline tab).";
}

// A user who asked for less motion (prefers-reduced-motion) gets the flame graph's
// zooms at once, not in 300 ms transitions (and so do the tests: a click during the
// entry transition could land on another frame).
const REDUCED_MOTION = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;

function newChart(container, tree, opts) {
  container.replaceChildren();
  if (!tree.value && !(tree.children || []).length) {
    container.append(el("div", { class: "empty" }, state.store && !state.store.profiles ? emptyStore()
      : "No samples in this range with these filters."));
    return null;
  }
  const width = Math.max(400, container.clientWidth - 2);
  const root = tree.value;
  const chart = V.flamegraph()
    .width(width)
    .cellHeight(18)
    // A frame under 2 px is a sliver nobody can read or click, and drawing them all
    // costs the most (an hour of 50 processes: 8 700 frames against 1 800); zooming
    // in widens them past this and draws them.
    .minFrameSize(2)
    .transitionDuration(REDUCED_MOTION ? 0 : 300)
    .sort(false)
    .inverted(state.orient === "icicle")
    .setLabelHandler(opts.label || ((d) => `${named(d.data)}: ${exact(d.data.value)} (${pct(d.data.value, root)})`))
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
  if (flameChart) {
    flameChart.setSearchHandler((frames, value, total) => {
      $("search-info").textContent = `${plural(frames.length, "frame")} match: ${fmtValue(value)} ` +
        `(${pct(value, total)})`;
      $("search-info").dataset.value = value;
    });
    applySearch(); // the search stays on across ranges and filters
  }
}

// Samples through the agent's [dropped: …] markers (launches whose records were lost)
// claim an estimate, which one process can inflate past the node's whole GPU time: a
// graph of their own, never part of the measured total or its percentages.
function renderDropped(tree) {
  $("dropped").hidden = !tree;
  $("dropped-flame").replaceChildren();
  if (!tree) return;
  const total = tree.value;
  $("dropped-info").textContent = `${fmtValue(total)} claimed, ` +
    `${state.data && state.data.total ? (total / state.data.total).toFixed(1) + "× the measured total" : "no measured total"}`;
  newChart($("dropped-flame"), tree, {
    details: $("details"),
    label: (d) => `${named(d.data)}: ${exact(d.data.value)} estimated (${pct(d.data.value, total)} of the dropped; not in the total)`,
  });
}

// Search: frames whose name matches a regular expression are highlighted (as in
// Parca and Pyroscope), with what they add up to (nested matches once).
function applySearch() {
  const term = $("search").value;
  const info = $("search-info");
  delete info.dataset.value;
  if (!flameChart) return;
  if (!term) {
    flameChart.clear();
    info.textContent = "";
    return;
  }
  try {
    new RegExp(term);
  } catch (e) {
    flameChart.clear();
    info.textContent = "not a regular expression";
    return;
  }
  flameChart.search(term);
}

function selectFrame(d) {
  if (d.depth === 0) {
    $("selected").hidden = true;
    state.selected = null;
    return;
  }
  state.selected = d.data.fn || d.data.name; // focus, hide and the sandwich take the function
  $("timeline-frame").hidden = d.data.kind !== "kernel";
  $("sel-name").textContent = d.data.name;
  const w = where(d.data);
  $("sel-value").textContent = `(${w ? w + ", " : ""}${d.data.kind}, ${fmtValue(d.data.value)}, ` +
    `${pct(d.data.value, state.data.total)})`;
  $("selected").hidden = false;
}

// ---- wiring ------------------------------------------------------------------------
function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("nav .tab")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const p of document.querySelectorAll(".panel")) p.hidden = p.id !== "tab-" + tab;
  if (tab === "diff") { // opens on a diff: the range against the one before it (defaultDiffRanges)
    defaultDiffRanges();
    compare();
  }
  if (tab === "sandwich") loadSandwich();
  if (tab === "timeline") loadTraces();
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
  $("search").oninput = applySearch;
  $("group").onchange = () => { state.group = $("group").value; refresh(); };
  $("by-line").checked = state.lines;
  $("by-line").onchange = () => { state.lines = $("by-line").checked; refresh(); };
  $("focus-frame").onclick = () => { if (state.selected) { state.focus.push(state.selected); refresh(); } };
  $("hide-frame").onclick = () => { if (state.selected) { state.ignore.push(state.selected); refresh(); } };
  $("sandwich-frame").onclick = () => {
    if (!state.selected) return;
    $("sandwich-name").value = state.selected;
    showTab("sandwich");
  };
  $("sandwich-go").onclick = loadSandwich;
  $("timeline-frame").onclick = () => { if (state.selected) showTimeline(state.selected); };
  wireTimeline();
  for (const th of document.querySelectorAll("#top-table th")) {
    th.onclick = () => {
      const key = th.dataset.sort;
      state.topSort = [key, state.topSort[0] === key ? -state.topSort[1] : (["name", "kind", "source"].includes(key) ? 1 : -1)];
      renderTop();
    };
  }
  const useChosen = (prefix) => () => {
    state.diffEdited = true;
    $(prefix + "-from").value = fmtTime(state.from);
    $(prefix + "-to").value = fmtTime(state.to);
    state.diffRanges = { ...state.diffRanges, [prefix]: [state.from, state.to] };
    compare();
  };
  $("a-set").onclick = useChosen("a");
  $("b-set").onclick = useChosen("b");
  $("compare").onclick = compare;
  // The diff's controls apply at once: normalize, a range typed (Enter), the chosen
  // range taken for one side. A typed range stays (the chosen range no longer moves it).
  $("normalize").onchange = compare;
  for (const id of ["a-from", "a-to", "b-from", "b-to"]) {
    $(id).oninput = () => { state.diffEdited = true; };
    $(id).onkeydown = (e) => { if (e.key === "Enter") compare(); };
  }
}

async function main() {
  loadHash();
  wire();
  // The range is merged while the store's status is read: the one a link names, or
  // by default the store's last hour (the server's default range).
  const early = getJSON("/api/range", state.from !== null ? rangeParams()
    : filterParams(new URLSearchParams({ type: state.type }))).catch(() => null);
  try {
    await loadStatus();
  } catch (e) {
    showError(e.message);
    return;
  }
  // (an empty store: the flame graph says so, and how to fill it: emptyStore)
  setView(HOUR);
  if (state.from === null) {
    const first = await early;
    state.from = first ? first.from : state.viewFrom;
    state.to = first ? first.to : state.viewTo;
  }
  showTab(state.tab);
  await refresh(early);
}

main();
