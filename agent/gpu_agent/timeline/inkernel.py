"""`.nanotrace` files' in-kernel events (per CTA, per warp) placed under the kernels
of a Timeline that ran them (`record --nanotrace`, `timeline merge`).

- Version 4 carries clock snapshots: its events go onto the session's reference
  clock (CLOCK_MONOTONIC_RAW, docs/nanotrace.md) and from there onto the
  timeline's CLOCK_REALTIME by the pair the capture read (Timeline.monotonic_raw_pair);
  each of its kernels goes under the kernel of the same name that started nearest
  (within MATCH_NS).
- Version 1 has no absolute time: its one kernel goes under a kernel of the same
  name and grid, the n-th such launch for the n-th file of that kernel (or FILE@N),
  its times offsets from that kernel's start. So does a version 4 file whose clocks
  do not reach CLOCK_MONOTONIC_RAW, and a standalone one (upstream's
  trace_writer::write pins its one kernel's end at 0 on that clock).
Events are kept inside their kernel's slice (the ones cut to it are counted).
Every file gets one line: where it went, or why nowhere."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Callable, Optional

from .kernel_fields import kernel_end
from .model import MAX_INKERNEL_EVENTS, InKernel, InKernelEvent, InKernelTrack, KernelEvent, Timeline
from .nanotrace import Nanotrace, NanotraceError, read, to_reference
from .nanotrace.model import KERNEL

BY_CLOCK, BY_ORDER = "clock", "name, grid and order"
MONOTONIC_RAW = 0  # version 4's clock kind
MATCH_NS = 1_000_000  # a version 4 kernel this far from every same-named start matches none
STANDALONE_NS = 1_000_000_000  # a kernel ending within this of 0 on its clock: a standalone file


@dataclass
class Spec:
    path: str
    launch: Optional[int] = None  # FILE@N: the N-th launch (1-based) of its kernel


def parse_spec(text: str) -> Spec:
    m = re.fullmatch(r"(.+)@([1-9]\d{0,8})", text)
    return Spec(m.group(1), int(m.group(2))) if m else Spec(text)


def base_name(name: str) -> str:
    """A kernel's bare name: no return type, arguments, template arguments or scopes."""
    name = name.split("(", 1)[0].strip()
    depth, out = 0, []
    for ch in name:  # drop <...>, nested
        depth += ch == "<"
        if not depth:
            out.append(ch)
        depth -= ch == ">" and depth > 0
    words = "".join(out).split()
    return words[-1].rsplit("::", 1)[-1] if words else ""


def place_all(tl: Timeline, specs: list[Spec], reader: Callable[[str], Nanotrace] = read) -> list[str]:
    """Read and place every file; the lines to say, one per file."""
    taken: dict[tuple, int] = {}  # (kernel name, grid) -> launches taken in order
    kix = _Kernels(tl)
    notes = []
    for spec in specs:
        try:
            nt = reader(spec.path)
            budget = MAX_INKERNEL_EVENTS - sum(len(ik.events) for ik in tl.inkernel)
            if len(nt.events) > budget:
                raise NanotraceError(
                    f"{spec.path}: {len(nt.events)} events, past the {MAX_INKERNEL_EVENTS} of all files together"
                )
            placed, note = _place(tl, kix, nt, spec, taken)
        except NanotraceError as e:
            notes.append(f"{e}; not merged")
            continue
        tl.inkernel += placed
        notes.append(note + nt.skipped_text())
    return notes


class _Index:
    """A file's tracks by parent and events by track, built once: a file of many
    kernels must not cost kernels x events."""

    def __init__(self, nt: Nanotrace):
        self.nt = nt
        self.children: dict[int, list] = {}
        self.events: dict[int, list] = {}
        self.extents: dict[int, tuple[float, float]] = {}  # _extent's, once per kernel
        self.subtrees: dict[int, list] = {}  # _subtree's, once per kernel (a kernel's launches share it)
        self.positions: dict[int, dict[int, int]] = {}  # and each track's place in it
        for t in nt.tracks.values():
            self.children.setdefault(t.parent, []).append(t)
        # A version 4 track on a clock no snapshot leads from to the reference clock:
        # its events have no place (upstream's viewer leaves them out too), counted.
        lost = set()
        if nt.version >= 4:
            for clock in {t.clock for t in nt.tracks.values()}:
                try:
                    to_reference(nt, clock, 0)
                except NanotraceError:
                    lost.add(clock)
        for e in nt.events:
            if e.track in nt.tracks and nt.tracks[e.track].clock in lost:
                nt.skip("events on a clock with no snapshot toward the reference clock")
                continue
            self.events.setdefault(e.track, []).append(e)


def _place(tl: Timeline, kix: "_Kernels", nt: Nanotrace, spec: Spec, taken: dict) -> tuple[list[InKernel], str]:
    ix = _Index(nt)
    if nt.version == 1:
        return _by_order(tl, kix, ix, spec, taken, nt.kernel, 1, nt.grid)
    kernels = [t for t in nt.tracks.values() if t.kind == KERNEL]
    if not kernels:
        raise NanotraceError(f"{spec.path}: no kernel track")
    shift = _to_realtime(tl, nt)
    standalone = shift is not None and _standalone(ix, kernels)
    if shift is None or spec.launch or standalone:
        if len(kernels) > 1:
            raise NanotraceError(
                f"{spec.path}: {len(kernels)} kernels and no clock onto the timeline's "
                "(CLOCK_MONOTONIC_RAW): cannot tell which launches they were"
            )
        return _by_order(tl, kix, ix, spec, taken, _kernel_name(ix, kernels[0]), kernels[0].id, ())
    # The file's snapshots and the capture's clock pair put each launch on the
    # timeline's clock. Where they put launches partly outside the kernels they match,
    # the file's times move by the least that puts the most launches inside
    # (_least_move); where they already fit, not at all: the events stay where the
    # file's own clock says (issue 46: the median of the middles moved them off it,
    # 0.16-0.18 us on an H200, the more the further the stamps sit from the kernel's
    # middle).
    launches = [one for kt in kernels for one in _launches(ix, kt)]
    align = _least_move([r for r in (_fit(kix, ix, one, shift) for one in launches) if r is not None])
    placed, said = [], []
    for one in launches:
        ik, note = _by_clock(tl, kix, ix, spec, one, shift - align)
        said.append(note)
        if ik:
            placed.append(ik)
    moved = (
        f"; the file's times moved {_off(-align)} its clock (the least that puts its launches in their kernels)"
        if align
        else ""
    )
    if len(said) <= 3:
        return placed, "; ".join(said) + moved
    events = sum(len(ik.events) for ik in placed)
    cut = sum(ik.clamped for ik in placed)
    cut = f", {cut} cut to their kernel's slice" if cut else ""
    return placed, (
        f"{spec.path}: {len(placed)} of {len(launches)} kernels placed by their clock snapshots "
        f"({events} events{cut}){moved}; the first: {said[0].split(': ', 1)[1]}"
    )


@dataclass
class _Launch:
    """One launch of a file's kernel: its track, its events, and the slice they name
    as their parent (upstream's HES kernel event on its stream), if any."""

    root: int
    events: list
    slice: object = None  # an Event of the file


def _launches(ix: _Index, kt) -> list[_Launch]:
    """A kernel track's launches. Upstream puts every launch of a kernel under one
    kernel track, its blocks' tracks shared, and ties each event to its launch's
    slice by Event.parent (GpuKernelTraceOptions' repeated launches): one launch per
    parent slice, placed on its own. Events naming no parent slice go with the launch
    that started last before them; a kernel whose events name none is one launch."""
    nt = ix.nt
    evs = [e for t in [kt, *_subtree(ix, kt.id)] for e in ix.events.get(t.id, ())]
    slices = {e.parent: nt.events[e.parent - 1] for e in evs if 0 < e.parent <= len(nt.events)}
    slices = {p: e for p, e in slices.items() if e.track in nt.tracks and e.duration > 0 and _placeable(nt, e)}
    if not slices:
        return [_Launch(kt.id, evs)]
    order = sorted(slices, key=lambda p: _ref(nt, slices[p].track, slices[p].start))
    starts = [_ref(nt, slices[p].track, slices[p].start) for p in order]
    out = {p: _Launch(kt.id, [], slices[p]) for p in order}
    for e in evs:
        if e.parent in out:
            out[e.parent].events.append(e)
        else:
            at = bisect.bisect_right(starts, _ref(nt, e.track, e.start)) - 1
            out[order[max(at, 0)]].events.append(e)
    return [out[p] for p in order]


def _placeable(nt: Nanotrace, e) -> bool:
    """Whether an event's clock leads to the reference clock (a slice named as a
    parent may sit on one no snapshot maps: its events are placed as if it had none)."""
    try:
        _ref(nt, e.track, e.start)
    except NanotraceError:
        return False
    return True


def _standalone(ix: _Index, kernels: list) -> bool:
    """A standalone file (upstream's trace_writer::write): its one kernel ends at 0 on
    CLOCK_MONOTONIC_RAW, its times relative to that end, not the capture's clock. No
    capture runs a kernel in the first STANDALONE_NS after boot."""
    return len(kernels) == 1 and abs(_extent(ix, kernels[0].id)[1]) < STANDALONE_NS


def _kernel_name(ix: _Index, kt) -> str:
    own = next((e.name for e in ix.events.get(kt.id, ()) if e.name), "")
    return own or kt.name


def _to_realtime(tl: Timeline, nt: Nanotrace) -> Optional[int]:
    """What to add to a time on the file's reference clock to put it on the timeline's."""
    ref = nt.clocks.get(nt.reference_clock)
    if not nt.snapshots or not ref or ref[0] != MONOTONIC_RAW or not tl.monotonic_raw_pair:
        return None
    realtime, raw = tl.monotonic_raw_pair
    return realtime - raw


def _subtree(ix: _Index, root: int) -> list:
    """The tracks under `root` (not itself), parents before children, siblings in order.
    A kernel track under it is a kernel of its own, placed on its own: each event is
    placed once (64 kernels nested would place the innermost's events 64 times)."""

    if root in ix.subtrees:
        return ix.subtrees[root]

    def below(tid):
        kids = (t for t in ix.children.get(tid, []) if t.kind != KERNEL)
        return sorted(kids, key=lambda t: (t.order, t.source_id, t.id), reverse=True)

    out, seen, todo = [], {root}, below(root)
    while todo:
        t = todo.pop()
        if t.id not in seen:  # (the reader refuses loops; this never walks one)
            seen.add(t.id)
            out.append(t)
            todo += below(t.id)
    ix.subtrees[root] = out
    return out


def _fill(
    ik: InKernel, ix: _Index, root: int, k: KernelEvent, at: Callable[[int, int], int], only: Optional[list] = None
) -> InKernel:
    """The tracks under `root` and their events into ik (`only`: those events, and
    the tracks that hold them), at(track, time) on the timeline's clock, kept inside
    the kernel's slice."""
    lo, hi = k.start_ns, kernel_end(k)
    tracks = _subtree(ix, root)
    if only is not None:  # the tracks of its events and their parents up to root, in the subtree's order
        if root not in ix.positions:
            ix.positions[root] = {t.id: i for i, t in enumerate(tracks)}
        pos = ix.positions[root]
        want, todo = set(), {e.track for e in only}
        while todo:  # (the reader refuses loops and bounds the depth)
            tid = todo.pop()
            if tid in pos and tid not in want:
                want.add(tid)
                todo.add(tracks[pos[tid]].parent)
        tracks = [tracks[i] for i in sorted(pos[t] for t in want)]
    ids = {}
    for t in tracks:
        ids[t.id] = len(ids) + 1
        ik.tracks.append(InKernelTrack(ids[t.id], ids.get(t.parent, 0), t.name))
    mine = None if only is None else {id(e) for e in only}
    for e in (e for t in ids for e in ix.events.get(t, ()) if mine is None or id(e) in mine):
        start, end = at(e.track, e.start), at(e.track, e.start + e.duration)
        s, t = min(max(start, lo), hi), min(max(end, lo), hi)
        ik.clamped += (s, t) != (start, end)
        ik.events.append(InKernelEvent(ids[e.track], s, t, e.name, list(e.args)))
    return ik


def _by_order(
    tl: Timeline, kix: "_Kernels", ix: _Index, spec: Spec, taken: dict, name: str, root: int, grid: tuple
) -> tuple[list[InKernel], str]:
    nt = ix.nt
    grid = tuple(grid) if grid and any(grid) else ()
    cands = [i for i in kix.named(name) if not grid or tl.kernels[i].grid is None or tuple(tl.kernels[i].grid) == grid]
    what = f"kernel {name}" + (f" (grid {'x'.join(map(str, grid))})" if grid else "")
    if not cands:
        raise NanotraceError(f"{spec.path}: {what} matches no kernel of the timeline")
    if spec.launch:
        if spec.launch > len(cands):
            raise NanotraceError(f"{spec.path}: {what} ran {len(cands)} times, not {spec.launch}")
        n = spec.launch - 1
    else:
        n = taken.get((name, grid), 0)
        if n >= len(cands):
            raise NanotraceError(f"{spec.path}: {what} ran {len(cands)} times, each has a file already")
        taken[(name, grid)] = n + 1
    k = tl.kernels[cands[n]]
    origin = _origin(ix, root, k)
    ik = _fill(
        InKernel(cands[n], spec.path, BY_ORDER),
        ix,
        root,
        k,
        lambda track, ts: k.start_ns + round(_ref(nt, track, ts) - origin),
    )
    more = f" of {len(cands)} (FILE@N picks another)" if len(cands) > 1 else ""
    return [ik], (
        f"{spec.path}: {len(ik.events)} events under {k.name or k.mangled}, launch {n + 1}{more}, "
        f"by name{', grid' if grid else ''} and order (the file has no absolute time)" + _cut(ik)
    )


def _ref(nt: Nanotrace, track: int, ts: int) -> float:
    """A time of a track on the file's reference clock (version 1: the kernel's)."""
    if nt.version == 1:
        return ts
    return to_reference(nt, nt.tracks[track].clock, ts)


def _origin(ix: _Index, root: int, k: KernelEvent) -> float:
    """Where kernel k starts on the file's reference clock, for a file with no clock
    onto the timeline's. Version 1: its times are offsets from the kernel's start.
    Version 4: its events' span, centred in k's slice where shorter (on an H200,
    CUPTI's kernel is 0.5-0.6 us longer than its stamps, and where they sit inside it
    is not in the file: centred, they are at most half that off)."""
    if ix.nt.version == 1:
        return 0
    lo, hi = _extent(ix, root)
    return lo - max(0, (kernel_end(k) - k.start_ns) - (hi - lo)) / 2


def _extent(ix: _Index, root: int) -> tuple[float, float]:
    """A version 4 kernel's start and end on the reference clock: its own slice,
    else its earliest event's start and latest event's end (each kernel's once:
    placement asks for it in both passes)."""
    if root not in ix.extents:
        evs = ix.events.get(root) or [e for t in _subtree(ix, root) for e in ix.events.get(t.id, ())]
        ix.extents[root] = (
            (
                min(_ref(ix.nt, e.track, e.start) for e in evs),
                max(_ref(ix.nt, e.track, e.start + e.duration) for e in evs),
            )
            if evs
            else (0, 0)
        )
    return ix.extents[root]


class _Kernels:
    """The timeline's kernels by name, built once per merge: each file's kernel finds
    its launches without a pass over the timeline. A name matches a kernel that
    has it as its name or mangled name, or the same bare name (base_name)."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.by: dict[str, list[int]] = {}
        for i, k in enumerate(tl.kernels):
            for key in {base_name(k.name or k.mangled), k.name, k.mangled} - {""}:
                self.by.setdefault(key, []).append(i)
        self.memo: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}

    def named(self, want: str) -> list[int]:
        """Those `want` names, in the timeline's order (by start)."""
        return self._get(want)[0]

    def nearest(self, want: str, start: int) -> list[tuple[int, int]]:
        """(distance, index) of the ones that started just before and after `start`."""
        _, by_start = self._get(want)
        j = bisect.bisect_left(by_start, (start, -1))
        return [(abs(t - start), i) for t, i in by_start[max(0, j - 1) : j + 1]]

    def _get(self, want: str) -> tuple[list[int], list[tuple[int, int]]]:
        if want not in self.memo:
            named = sorted(set(self.by.get(want, ())) | set(self.by.get(base_name(want), ()))) if want else []
            self.memo[want] = (named, sorted((self.tl.kernels[i].start_ns, i) for i in named))
        return self.memo[want]


def _off(ns: float) -> str:
    """A time against another, in words."""
    return f"{abs(ns) / 1e3:.1f} us {'after' if ns >= 0 else 'before'}"


def _span(ix: _Index, one: _Launch) -> tuple[float, float]:
    """A launch's start and end on the reference clock: its parent slice's, else its
    kernel's (_extent)."""
    if one.slice is None:
        return _extent(ix, one.root)
    e = one.slice
    return _ref(ix.nt, e.track, e.start), _ref(ix.nt, e.track, e.start + e.duration)


def _nearest(kix: _Kernels, ix: _Index, one: _Launch, shift: int) -> tuple[str, int, list[tuple[int, int]]]:
    """The kernel's name, the launch's start on the timeline's clock, and the
    same-named kernels that started nearest it: (distance, index)."""
    name = _kernel_name(ix, ix.nt.tracks[one.root])
    start = round(_span(ix, one)[0]) + shift  # (integers: a float of 1.8e18 ns is 256 ns coarse)
    return name, start, kix.nearest(name, start)


def _fit(kix: _Kernels, ix: _Index, one: _Launch, shift: int) -> Optional[tuple[int, int]]:
    """The moves (taken from the file's times) that put the launch inside its match's
    slice, as [lo, hi]; a launch longer than its match: the one that centres it.
    None: no match."""
    _, _, cands = _nearest(kix, ix, one, shift)
    if not cands or min(cands)[0] > MATCH_NS:
        return None
    k = kix.tl.kernels[min(cands)[1]]
    lo, hi = _span(ix, one)
    need, room = round(hi) + shift - kernel_end(k), round(lo) + shift - k.start_ns
    return (need, room) if need <= room else ((need + room) // 2,) * 2


def _least_move(ranges: list[tuple[int, int]]) -> int:
    """The move nearest 0 among those that the most ranges hold (closed ranges; a
    file's few strays do not drag the rest): 0 where every launch fits as it is."""
    if not ranges:
        return 0
    starts, ends = sorted(r[0] for r in ranges), sorted(r[1] for r in ranges)
    best, move = -1, 0
    for a in starts:  # the depth is highest at some range's start, until the next end
        depth = bisect.bisect_right(starts, a) - bisect.bisect_left(ends, a)
        here = min(max(0, a), ends[bisect.bisect_left(ends, a)])
        if depth > best or (depth == best and abs(here) < abs(move)):
            best, move = depth, here
    return move


def _by_clock(
    tl: Timeline, kix: _Kernels, ix: _Index, spec: Spec, one: _Launch, shift: int
) -> tuple[Optional[InKernel], str]:
    """Under the same-named kernel that started nearest."""
    nt = ix.nt
    name, start, cands = _nearest(kix, ix, one, shift)
    if not cands or min(cands)[0] > MATCH_NS:
        near = f" (the nearest started {min(cands)[0] / 1e6:.3f} ms away)" if cands else ""
        return None, f"{spec.path}: kernel {name} at its clock matches no kernel of the timeline{near}; not merged"
    i = min(cands)[1]
    k = tl.kernels[i]
    ik = _fill(
        InKernel(i, spec.path, BY_CLOCK),
        ix,
        one.root,
        k,
        lambda track, ts: round(_ref(nt, track, ts)) + shift,
        None if one.slice is None else one.events,
    )
    return ik, (
        f"{spec.path}: {len(ik.events)} events under {k.name or k.mangled} (correlation id "
        f"{k.correlation_id}), by its clock snapshots: its start {_off(start - k.start_ns)} CUPTI's" + _cut(ik)
    )


def _cut(ik: InKernel) -> str:
    return f"; {ik.clamped} cut to the kernel's slice" if ik.clamped else ""
