// gpu-agent UI: the views beside the flame graph: the top table, the diff of two
// ranges and the status page. Loaded before app.js; shares its globals.
"use strict";

// ---- the top table -----------------------------------------------------------------
function renderTop() {
  const [key, dir] = state.topSort;
  const rows = [...state.topRows].sort((a, b) => {
    const x = key === "source" ? where(a) : a[key], y = key === "source" ? where(b) : b[key];
    return (typeof x === "string" ? x.localeCompare(y) : x - y) * dir;
  });
  const body = $("top-table").tBodies[0];
  body.replaceChildren(...rows.map((r) => el("tr", { "data-name": r.name, "data-self": r.self, "data-total": r.total },
    el("td", { class: "name", title: "focus on this frame", onclick: () => { state.focus.push(r.fn || r.name); refresh(); } }, r.name),
    el("td", { class: "source" }, where(r)),
    el("td", {}, el("span", { class: "kind " + r.kind }, r.kind)),
    el("td", { class: "num" }, fmtValue(r.self)), el("td", { class: "num" }, pct(r.self_share, 1)),
    el("td", { class: "num" }, fmtValue(r.total)), el("td", { class: "num" }, pct(r.total_share, 1)))));
}

// ---- the diff ----------------------------------------------------------------------
// Until the user types a range of the diff (or takes the chosen one), its ranges follow
// the chosen range: after = the chosen range, before = the span of the same length just
// before it; where the store holds nothing before the chosen range (the "all" preset),
// its two halves instead, so that the earlier one is not empty (every frame "new").
function defaultDiffRanges() {
  if (state.diffEdited) return;
  const span = state.to - state.from;
  const first = state.store && state.store.first_ns ? state.store.first_ns / 1e6 : null;
  let a = [state.from - span, state.from], b = [state.from, state.to];
  if (first !== null && first > state.from) {
    const mid = state.from + Math.floor(span / 2);
    a = [state.from, mid];
    b = [mid, state.to];
  }
  $("a-from").value = fmtTime(a[0]);
  $("a-to").value = fmtTime(a[1]);
  $("b-from").value = fmtTime(b[0]);
  $("b-to").value = fmtTime(b[1]);
  // the fields hold whole seconds: the exact ranges go to the server
  state.diffRanges = { a, b };
}

function diffRange(prefix) {
  const typed = [parseTime($(prefix + "-from").value), parseTime($(prefix + "-to").value)];
  const exactly = state.diffRanges && state.diffRanges[prefix];
  // the defaults' milliseconds, while the fields still show them
  if (exactly && typed[0] === Math.floor(exactly[0] / 1000) * 1000 && typed[1] === Math.floor(exactly[1] / 1000) * 1000) {
    return exactly;
  }
  return typed;
}

async function compare() {
  showError("");
  try {
    const [a, b] = [diffRange("a"), diffRange("b")];
    const p = new URLSearchParams({
      a_from: a[0], a_to: a[1], b_from: b[0], b_to: b[1],
      type: state.type, normalize: $("normalize").checked ? "1" : "0",
    });
    if (state.lines) p.set("lines", "1");
    const seq = state.diffSeq = (state.diffSeq || 0) + 1;
    const data = await getJSON("/api/diff", filterParams(p));
    if (seq === state.diffSeq) renderDiff(data); // an answer to a later request is drawn, not this one
  } catch (e) {
    showError(e.message);
  }
}

function renderDiff(data) {
  const change = (d) => {
    const before = d.data.before, after = d.data.value, delta = d.data.delta;
    const rel = !before ? " (new)" : !after ? " (gone)" : ` (${delta >= 0 ? "+" : ""}${((100 * delta) / before).toFixed(1)} %)`;
    return `${named(d.data)}: before ${exact(before)}, after ${exact(after)}, change ${delta >= 0 ? "+" : ""}${exact(delta)}${rel}`;
  };
  $("diff-info").textContent = `before: ${fmtValue(data.a.total)} in ${plural(data.a.files, "profile")}; ` +
    `after: ${fmtValue(data.b.total)} in ${plural(data.b.files, "profile")}` + (data.normalized ? " (normalized)" : "");
  newChart($("diff-flame"), data.tree, {
    details: $("diff-details"),
    label: change,
    colour: (d, original) => V.differentialColorMapper(d, original),
  });
  const body = $("changes-table").tBodies[0];
  body.replaceChildren(...data.changes.map((r) => el("tr", {
    "data-name": r.name, "data-before": r.before, "data-after": r.after, "data-delta": r.delta,
    "data-self-delta": r.self_delta || 0, "data-folded": r.folded || 0 },
    el("td", { class: "name" }, r.name, ...(r.folded ? [el("span", {
      class: "folded", title: `callers with the very same change: ${r.folded_names.join(", ")}` +
        (r.folded > r.folded_names.length ? ", …" : "") }, ` and ${plural(r.folded, "caller")} with the same change`)] : [])),
    el("td", {}, el("span", { class: "kind " + r.kind }, r.kind)),
    el("td", { class: "num" }, fmtValue(r.before)), el("td", { class: "num" }, fmtValue(r.after)),
    el("td", { class: "num " + (r.delta > 0 ? "up" : "down") },
      `${r.delta > 0 ? "+" : ""}${fmtValue(r.delta)}` +
        (r.ratio ? ` (×${r.ratio.toFixed(2)})` : r.after ? " (new)" : " (gone)")),
    el("td", { class: "num " + (r.self_delta > 0 ? "up" : r.self_delta < 0 ? "down" : "") },
      r.self_delta ? `${r.self_delta > 0 ? "+" : ""}${fmtValue(r.self_delta)}` : "–"))));
  bump("diffs");
}

// ---- the sandwich: one frame between its callers and its callees ------------------
async function loadSandwich() {
  const name = $("sandwich-name").value;
  if (!name) return;
  const p = rangeParams();
  p.set("name", name);
  try {
    renderSandwich(await getJSON("/api/sandwich", p));
  } catch (e) {
    showError(e.message);
    $("callers-flame").replaceChildren();
    $("callees-flame").replaceChildren();
  }
}

function renderSandwich(data) {
  $("sandwich-info").textContent = `${fmtValue(data.total)} through it ` +
    `(${pct(data.total, state.data ? state.data.total : 0)} of the range)`;
  // callers as a flame graph (it at the bottom, its callers above), callees as an icicle
  for (const [id, tree, inverted] of [["callers-flame", data.callers, false], ["callees-flame", data.callees, true]]) {
    const chart = newChart($(id), tree, { details: $("sandwich-details") });
    if (chart) chart.inverted(inverted).update();
  }
  bump("sandwiches");
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
    ["size", st.bytes >= 1048576 ? `${(st.bytes / 1048576).toFixed(1)} MiB` : `${(st.bytes / 1024).toFixed(1)} KiB`],
    ["first window", st.first_ns ? fmtTime(st.first_ns / 1e6) + " UTC" : "–"],
    ["last window", st.last_ns ? fmtTime(st.last_ns / 1e6) + " UTC" : "–"],
    ["decoded (cached)", `${s.ui.cached_files} profiles, ${s.ui.cached_rows} rows`],
    ["unreadable files", s.ui.unreadable_files ?? Object.keys(s.ui.unreadable).length],
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
