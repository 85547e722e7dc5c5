"""A version 4 file's clocks: its events' times on the session's reference clock."""

from __future__ import annotations

import bisect

from .model import MAX_CLOCK_HOPS, Nanotrace, NanotraceError


def _edges(t: Nanotrace) -> dict:
    """clock -> (reference, [source ts], [reference ts]) of its first reference's
    snapshots, sorted by source time; built once per file."""
    key = (id(t.snapshots), len(t.snapshots))
    if t.edges is not None and t.edges[0] == key:
        return t.edges[1]
    by: dict = {}
    for s in sorted(t.snapshots, key=lambda s: (s[0], s[2])):
        ref, xs, ys = by.setdefault(s[0], (s[1], [], []))
        if s[1] == ref:
            xs.append(s[2])
            ys.append(s[3])
    t.edges = (key, by)
    return by


def _scaled(dx: int, num: int, den: int) -> int:
    """dx * num / den rounded to the nearest integer (halves up), exactly: times near
    1.76e18 ns have a float step of 256 ns, and in-kernel events last tens of ns
    (issue 46: float mapping moved them 224-352 ns)."""
    q, r = divmod(dx * num, den)
    return q + (2 * r >= den)


def to_reference(t: Nanotrace, clock: int, ts: int) -> int:
    """A timestamp of `clock` on the session's reference clock, following the
    snapshots' edges (interpolated between a pair's snapshots, extrapolated past
    them along the nearest pair, by the source clock's frequency with only one), in
    integer arithmetic: exact to the nearest ns, as upstream's viewer maps."""
    edges = _edges(t)
    ts = int(ts)
    for _ in range(MAX_CLOCK_HOPS):
        if clock == t.reference_clock:
            return ts
        if clock not in edges:
            raise NanotraceError(f"clock {clock} has no snapshot toward the reference clock {t.reference_clock}")
        ref, xs, ys = edges[clock]
        if len(xs) == 1:
            f_src = int(t.clocks.get(clock, (0, 0, 0, 0))[3] or 1_000_000_000)
            f_ref = int(t.clocks.get(ref, (0, 0, 0, 0))[3] or 1_000_000_000)
            ts = int(ys[0]) + _scaled(ts - int(xs[0]), f_ref, f_src)
        else:
            k = min(max(bisect.bisect_right(xs, ts), 1), len(xs) - 1)
            x0, x1, y0, y1 = int(xs[k - 1]), int(xs[k]), int(ys[k - 1]), int(ys[k])
            ts = y0 + _scaled(ts - x0, y1 - y0, (x1 - x0) or 1)
        clock = ref
    raise NanotraceError(f"no path of at most {MAX_CLOCK_HOPS} snapshots to the reference clock")
