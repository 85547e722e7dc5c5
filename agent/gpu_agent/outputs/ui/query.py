"""What the UI asks of a time range: merged, filtered, as a flame graph tree, a top
table, a diff of two ranges, or a pprof to download.

A range is merged here, on the server, from the decoded rows of profiles.py: the
browser receives one tree, never the profiles. Filters work like pprof's options:
label filters keep the samples whose label has one of the chosen values (pid, comm,
pod, namespace, container, cuda_device), `kernel` keeps the samples whose CUDA
kernel leaf matches a regular expression, `focus` keeps the samples whose stack
goes through every focused frame (pprof -focus) and `ignore` drops those that go
through an ignored one (pprof -ignore).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ...profile.pprof import ProfileBuilder
from ...profile.vocabulary import DUTY_LABEL
from .catalog import KERNEL, Catalog, DecodedProfile

FILTER_LABELS = ("pid", "comm", "pod", "namespace", "container", "cuda_device")
VALUE_INDEX = {"gpu_time": 0, "kernel_launches": 1, "pc_samples": 2}
TOP_ROWS = 300
DROPPED_ROOT = "dropped (estimated, not in the total)"
CHANGE_ROWS = 100


@dataclass
class Filters:
    labels: dict[str, frozenset[str]] = field(default_factory=dict)  # label -> values kept
    kernel: Optional[re.Pattern] = None
    focus: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def empty(self) -> bool:
        return not (self.labels or self.kernel or self.focus or self.ignore)

    def describe(self) -> list[str]:
        out = [f"{k}={'|'.join(sorted(v))}" for k, v in sorted(self.labels.items())]
        if self.kernel is not None:
            out.append(f"kernel=~{self.kernel.pattern}")
        out += [f"focus={f}" for f in self.focus] + [f"ignore={f}" for f in self.ignore]
        return out


def parse_filters(params: dict[str, list[str]], prefix: str = "") -> Filters:
    """From query parameters: pid=1,2 (or pid=1&pid=2), kernel=REGEX, focus=NAME, ignore=NAME.
    Raises ValueError for a bad regular expression."""
    labels = {}
    for name in FILTER_LABELS:
        values = {v for raw in params.get(prefix + name, []) for v in raw.split(",") if v != ""}
        if values:
            labels[name] = frozenset(values)
    kernel = None
    text = (params.get(prefix + "kernel") or [""])[-1]
    if text:
        try:
            kernel = re.compile(text)
        except re.error as e:
            raise ValueError(f"kernel: bad regular expression {text!r}: {e}") from None
    return Filters(
        labels,
        kernel,
        tuple(v for v in params.get(prefix + "focus", []) if v),
        tuple(v for v in params.get(prefix + "ignore", []) if v),
    )


class Merged:
    """The filtered sum of a range's rows: {(stack id, label-set id): [GPU ns, launches,
    PC samples]}. Rows through a [dropped: …] marker (estimates of lost records, which
    one process can inflate past the whole node's GPU time) are kept apart, in
    `dropped`: the total, the tree, the top table and the diff are measured values
    only, the dropped ones are drawn apart (dropped_tree), and the download has both."""

    def __init__(self, catalog: Catalog, files: list[DecodedProfile], filters: Filters):
        self.catalog = catalog
        self.files = len(files)
        self.rows: dict[tuple[int, int], list[int]] = {}
        self.dropped: dict[tuple[int, int], list[int]] = {}
        self.by_labelset: dict[int, list[int]] = {}  # unfiltered: the filter menus
        self.comments: list[str] = []
        self.start_ns = min((d.time_nanos for d in files), default=0)
        self.end_ns = max((d.time_nanos + d.duration_nanos for d in files), default=0)
        for d in files:
            for c in d.comments:
                if c not in self.comments:
                    self.comments.append(c)
            for lid, (g, n, p) in d.by_labelset.items():
                acc = self.by_labelset.setdefault(lid, [0, 0, 0])
                acc[0] += g
                acc[1] += n
                acc[2] += p
            if any(d.dropped):  # the menus count measured values: not what [dropped: …] rows claim
                for sid, lid, g, n, p in zip(d.stacks, d.labelsets, d.gpu_ns, d.launches, d.pc_samples):
                    if sid in catalog.dropped_stacks:
                        acc = self.by_labelset[lid]
                        acc[0] -= g
                        acc[1] -= n
                        acc[2] -= p
        keep_labels = self._labelsets_kept(filters)
        keep_stack: dict[int, bool] = {}
        measured, dropped_rows, dropped_stacks = self.rows, self.dropped, catalog.dropped_stacks
        for d in files:
            for sid, lid, g, n, p in zip(d.stacks, d.labelsets, d.gpu_ns, d.launches, d.pc_samples):
                if keep_labels is not None and lid not in keep_labels:
                    continue
                if not filters.empty():
                    ok = keep_stack.get(sid)
                    if ok is None:
                        ok = keep_stack[sid] = self._stack_kept(sid, filters)
                    if not ok:
                        continue
                rows = dropped_rows if sid in dropped_stacks else measured
                acc = rows.get((sid, lid))
                if acc is None:
                    rows[(sid, lid)] = [g, n, p]
                else:
                    acc[0] += g
                    acc[1] += n
                    acc[2] += p

    def _labelsets_kept(self, filters: Filters) -> Optional[set[int]]:
        if not filters.labels:
            return None
        kept = set()
        for lid in self.by_labelset:
            labels = dict(self.catalog.labelsets[lid])
            if all(labels.get(k) in values for k, values in filters.labels.items()):
                kept.add(lid)
        return kept

    def _stack_kept(self, sid: int, filters: Filters) -> bool:
        cat = self.catalog
        frames = cat.stacks[sid]
        functions = {cat.names[cat.frame_name[f]][0] for f in frames}
        if filters.kernel is not None:  # the kernel's frame: the leaf, or under a PC sample's
            kernel = next((n for n in (cat.names[cat.frame_name[f]] for f in frames) if n[1] == KERNEL), None)
            if kernel is None or not filters.kernel.search(kernel[0]):
                return False
        if any(f not in functions for f in filters.focus):
            return False
        return not any(f in functions for f in filters.ignore)

    # -- views ----------------------------------------------------------------
    def total(self, value: int) -> int:
        return sum(v[value] for v in self.rows.values())

    def by_stack(self, value: int, dropped: bool = False) -> dict[int, int]:
        out: dict[int, int] = {}
        for (sid, _lid), v in (self.dropped if dropped else self.rows).items():
            out[sid] = out.get(sid, 0) + v[value]
        return out

    def dropped_total(self, value: int) -> int:
        return sum(v[value] for v in self.dropped.values())

    def dropped_tree(self, value: int) -> Optional[dict]:
        """The samples through [dropped: …] markers as a tree of their own, or None."""
        by_stack = {sid: v for sid, v in self.by_stack(value, dropped=True).items() if v}
        if not by_stack:
            return None
        tree = tree_of(self.catalog, [by_stack])
        tree["name"] = DROPPED_ROOT
        return tree

    def label_values(self, value: int) -> dict[str, list[dict]]:
        """Per filter label, its values in the range with their (unfiltered) totals."""
        acc: dict[str, dict[str, int]] = {k: {} for k in FILTER_LABELS}
        for lid, v in self.by_labelset.items():
            for k, val in self.catalog.labelsets[lid]:
                if k in acc:
                    acc[k][val] = acc[k].get(val, 0) + v[value]
        return {
            k: [{"value": val, "total": t} for val, t in sorted(vals.items(), key=lambda kv: -kv[1])]
            for k, vals in acc.items()
        }

    def tree(self, value: int, group: str = "", lines: bool = False) -> dict:
        """The flame graph's tree; with `group`, one subtree per value of that label
        under the root (`label=value` frames, as pprof's -tagroot), samples without
        the label under `label=(none)`; with `lines`, frames split by source line."""
        if not group:
            return tree_of(self.catalog, [self.by_stack(value)], lines)
        parts: dict[str, dict[int, int]] = {}
        key_of: dict[int, str] = {}  # label set -> its value of `group` (rows share label sets)
        for (sid, lid), v in self.rows.items():
            key = key_of.get(lid)
            if key is None:
                key = key_of[lid] = dict(self.catalog.labelsets[lid]).get(group, "(none)")
            part = parts.setdefault(key, {})
            part[sid] = part.get(sid, 0) + v[value]
        children = []
        for key, by_stack in parts.items():
            sub = tree_of(self.catalog, [by_stack], lines)
            if sub["value"]:
                sub.update(name=f"{group}={key}", kind="label")
                children.append(sub)
        children.sort(key=lambda c: -c["value"])
        out = {"name": "all", "kind": "root", "value": sum(c["value"] for c in children)}
        if children:
            out["children"] = children
        return out

    def group_labels(self) -> list[str]:
        """The labels the range's samples carry, to group by (pid, cuda_stream, source…)."""
        keys = {k for _sid, lid in self.rows for k, _v in self.catalog.labelsets[lid]}
        return sorted(keys - {DUTY_LABEL})

    def top(self, value: int, limit: int = TOP_ROWS, lines: bool = False) -> list[dict]:
        """Kernels and functions by self and total: self counts the samples a name is
        the leaf of, total those whose stack has it anywhere (once per sample). With
        `lines`, one row per function and source line (pprof's -lines); otherwise a
        row says its heaviest line (by total) and how many lines of code it merges."""
        cat = self.catalog
        key_of = cat.frame_line if lines else cat.frame_name
        self_v: dict[int, int] = {}
        total_v: dict[int, int] = {}
        line_total: dict[int, int] = {}  # by name: each line's total, for its source
        for sid, v in self.by_stack(value).items():
            frames = cat.stacks[sid]
            if not frames:
                continue
            keys = [key_of[f] for f in frames]
            self_v[keys[0]] = self_v.get(keys[0], 0) + v
            for n in set(keys):
                total_v[n] = total_v.get(n, 0) + v
            if not lines:
                for ln in {cat.frame_line[f] for f in frames}:
                    line_total[ln] = line_total.get(ln, 0) + v
        sources: dict[int, list[int]] = {}  # name -> its lines with a source
        for ln in line_total:
            if cat.line_names[ln][2]:
                sources.setdefault(cat.line_name_of[ln], []).append(ln)

        def label(n: int) -> str:
            return line_label(cat, n) if lines else cat.names[n][0]

        def row(n: int) -> dict:
            if lines:
                fn, kind, _file, _line = cat.line_names[n]
                out = {"name": label(n), "kind": kind, "fn": fn, **source_of(cat, n)}
            else:
                out = {"name": cat.names[n][0], "kind": cat.names[n][1]}
                mine = sources.get(n)
                if mine:
                    out.update(source_of(cat, max(mine, key=lambda ln: (line_total[ln], -ln))))
                    if len(mine) > 1:
                        out["lines"] = len(mine)
            out.update(
                self=self_v.get(n, 0),
                total=total_v[n],
                self_share=self_v.get(n, 0) / grand,
                total_share=total_v[n] / grand,
            )
            return out

        grand = self.total(value) or 1
        # The heaviest by self first (the kernels: where GPU time goes), then by total
        # (the code that launched them), each within the row limit.
        by_self = sorted(self_v, key=lambda n: (-self_v[n], label(n)))[: limit // 2]
        by_total = sorted(total_v, key=lambda n: (-total_v[n], -self_v.get(n, 0), label(n)))
        ranked = list(dict.fromkeys(by_self + by_total))[:limit]
        return [row(n) for n in ranked]

    def pprof(self) -> bytes:
        """The merged range as one gzip pprof, written by the agent's own ProfileBuilder."""
        cat = self.catalog
        comments = list(self.comments) + [f"merged by gpu-agent ui from {self.files} profiles"]
        b = ProfileBuilder(
            period_ns=1, duration_ns=max(0, self.end_ns - self.start_ns), time_nanos=self.start_ns, comments=comments
        )
        for (sid, lid), (g, n, p) in list(self.rows.items()) + list(self.dropped.items()):
            b.add([cat.frames[f] for f in cat.stacks[sid]], g, n, dict(cat.labelsets[lid]), p)
        return b.to_bytes()


def source_of(catalog: Catalog, line: int) -> dict:
    """A line name's source as the page shows it: {file, line} (what it has of them)."""
    _fn, _kind, file, n = catalog.line_names[line]
    out: dict = {}
    if file:
        out["file"] = file
        if n:
            out["line"] = n
    return out


def line_label(catalog: Catalog, line: int) -> str:
    """A frame's name when frames are split by line: `backward mytrain.py:40` (the
    file's base name; the hover and the top table give its path)."""
    fn, _kind, file, n = catalog.line_names[line]
    return f"{fn} {file.rsplit('/', 1)[-1]}:{n}" if file and n else fn


def tree_of(catalog: Catalog, per_range: list[dict[int, int]], lines: bool = False) -> dict:
    """The flame graph of one range, or of a diff (two ranges: before, after).

    Nodes are grouped by name from the root (the outermost caller) to the kernel
    leaf, or with `lines` by name and source line (pprof's -lines). One range:
    {name, kind, value}. Two: value is the later range (the width drawn), before the
    earlier, delta = value - before (the colour). A node with a source has its file
    and line (grouped by name: its heaviest line's, and `lines`, how many lines of
    code it merges, when more than one); grouped by line, `fn` is its function
    (what focus, hide and the sandwich take)."""
    cat = catalog
    diff = len(per_range) == 2
    key_of = cat.frame_line if lines else cat.frame_name
    line_of = cat.frame_line
    root = [[0] * len(per_range), {}, None]  # [values per range, children by key, {line: value}]
    for r, by_stack in enumerate(per_range):
        for sid, v in by_stack.items():
            if not v:
                continue
            node = root
            node[0][r] += v
            for f in reversed(cat.stacks[sid]):
                key = key_of[f]
                child = node[1].get(key)
                if child is None:
                    child = node[1][key] = [[0] * len(per_range), {}, {}]
                child[0][r] += v
                if not lines:
                    src = child[2]
                    ln = line_of[f]
                    src[ln] = src.get(ln, 0) + v
                node = child

    def emit(key: Optional[int], node) -> dict:
        values = node[0]
        if key is None:
            out = {"name": "all", "kind": "root"}
        elif lines:
            fn, kind, _file, _n = cat.line_names[key]
            out = {"name": line_label(cat, key), "kind": kind, "fn": fn, **source_of(cat, key)}
        else:
            out = {"name": cat.names[key][0], "kind": cat.names[key][1]}
            sources = [ln for ln in node[2] if cat.line_names[ln][2]]
            if sources:
                out.update(source_of(cat, max(sources, key=lambda ln: (node[2][ln], -ln))))
                if len(sources) > 1:
                    out["lines"] = len(sources)
        if diff:
            out["before"], out["value"] = values[0], values[1]
            out["delta"] = values[1] - values[0]
        else:
            out["value"] = values[0]
        children = [emit(n, c) for n, c in node[1].items()]
        if children:
            children.sort(key=lambda c: -c["value"])
            out["children"] = children
        return out

    return emit(None, root)


def sandwich(catalog: Catalog, by_stack: dict[int, int], name: str) -> dict:
    """One function or kernel between its callers and its callees (Pyroscope's
    sandwich view): two trees rooted at it, over the samples whose stack holds it.
    Callers run from its innermost call up to the roots, callees from its outermost
    call down to the leaves (for GPU time: which code launches this kernel, and what
    this function launches), so a recursive frame counts each sample once."""
    cat = catalog
    ids = {n for n, (text, _kind) in enumerate(cat.names) if text == name}
    if not ids:
        raise KeyError(name)
    callers: list = [0, {}]
    callees: list = [0, {}]

    def add(node: list, path, v: int) -> None:
        node[0] += v
        for n in path:
            node = node[1].setdefault(n, [0, {}])
            node[0] += v

    kind = "native"
    for sid, v in by_stack.items():
        names = [cat.frame_name[f] for f in cat.stacks[sid]]  # leaf first
        hits = [i for i, n in enumerate(names) if n in ids]
        if not v or not hits:
            continue
        kind = cat.names[names[hits[0]]][1]
        add(callers, names[hits[0] + 1 :], v)
        add(callees, reversed(names[: hits[-1]]), v)

    def emit(n: Optional[int], node: list) -> dict:
        out = {
            "name": cat.names[n][0] if n is not None else name,
            "kind": cat.names[n][1] if n is not None else kind,
            "value": node[0],
        }
        children = sorted((emit(c, sub) for c, sub in node[1].items()), key=lambda c: -c["value"])
        if children:
            out["children"] = children
        return out

    return {"name": name, "total": callers[0], "callers": emit(None, callers), "callees": emit(None, callees)}


def changes(catalog: Catalog, before: dict[int, int], after: dict[int, int], limit: int = CHANGE_ROWS) -> list[dict]:
    """Kernels and functions whose value changed most between two ranges, ranked by
    the change of their self value first (a kernel's own GPU time: where a change
    happens), then the code whose total changed without a change of its own. Callers
    whose total changed exactly as a row below them did (the chain of ancestors above
    one change, or above all of them: clone3, Py_RunMain, libffi...) are folded into
    the innermost of them: its row counts them (`folded`) and names the first few."""
    cat = catalog

    def sums(by_stack: dict[int, int]):
        self_v: dict[int, int] = {}
        total_v: dict[int, int] = {}
        depth: dict[int, int] = {}  # how close to a leaf a name ever is
        for sid, v in by_stack.items():
            names = [cat.frame_name[f] for f in cat.stacks[sid]]  # leaf first
            if not names:
                continue
            self_v[names[0]] = self_v.get(names[0], 0) + v
            for i, n in enumerate(dict.fromkeys(names)):
                total_v[n] = total_v.get(n, 0) + v
                if i < depth.get(n, i + 1):
                    depth[n] = i
        return self_v, total_v, depth

    (sa, a, da), (sb, b, db) = sums(before), sums(after)
    rows = []
    for n in set(a) | set(b):
        old, new = a.get(n, 0), b.get(n, 0)
        s_old, s_new = sa.get(n, 0), sb.get(n, 0)
        if old == new and s_old == s_new:
            continue
        rows.append(
            {
                "name": cat.names[n][0],
                "kind": cat.names[n][1],
                "before": old,
                "after": new,
                "delta": new - old,
                "ratio": (new / old) if old else None,
                "self_before": s_old,
                "self_after": s_new,
                "self_delta": s_new - s_old,
                "depth": min(da.get(n, 1 << 30), db.get(n, 1 << 30)),
            }
        )
    # innermost first, so that a chain folds into its deepest member
    rows.sort(key=lambda r: (r["depth"], r["kind"] != KERNEL, r["name"]))
    kept: dict[tuple[int, int], dict] = {}
    out = []
    for r in rows:
        same = kept.get((r["before"], r["after"]))
        if same is not None and not r["self_delta"]:
            same["folded"] += 1
            if len(same["folded_names"]) < 5:
                same["folded_names"].append(r["name"])
            continue
        r.update(folded=0, folded_names=[])
        kept.setdefault((r["before"], r["after"]), r)
        out.append(r)
    for r in out:
        del r["depth"]
    # kernels first on ties
    out.sort(key=lambda r: (r["self_delta"] == 0, -abs(r["self_delta"] or r["delta"]), r["kind"] != KERNEL, r["name"]))
    return out[:limit]


def scaled(by_stack: dict[int, int], factor: float) -> dict[int, int]:
    return {sid: round(v * factor) for sid, v in by_stack.items()}
