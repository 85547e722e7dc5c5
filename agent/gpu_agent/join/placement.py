"""Where a drain's rows belong: each spread over the intervals its span overlaps,
and each interval held until every shim has published past its end.

Why: in collection windows (shim/src/window.cpp) a window's records stand for
their whole period's launches, and go out one period after that period ends.
Placed where they were drained, a 10 s interval held whole periods' estimates one
or two periods late: per-interval errors up to 76 % on an H200 (issue 42), though
whole runs summed right. So the shim stamps each record with the span its weight
stands for (ga_kernel_record.span_*, CLOCK_MONOTONIC, the clock of
time.monotonic_ns()) and says how far it has published (the `published` probe).
Here a row's four sums are split over the intervals by the share of its span each
one overlaps (integers that add up to the row exactly), and an interval is given
out once every shim that collects in windows has published past its end, or
MAX_HOLD_S after its end, whichever is first.

What is not an interval's:
  * a span's part before the first interval (the shim's period began before this
    agent started, beside another agent): dropped, counted (`before_start`);
  * a part after the agent's stop (a shim's last partial period runs on until it
    hears of the stop): dropped, counted (`after_stop`);
  * a part that belongs to an interval already given out (a shim that published
    later than MAX_HOLD_S, or a record CUPTI handed over after its period was
    published): added to the oldest interval still held, counted (`late`), so
    that sums stay whole.
Rows without a span (continuous collection, parcagpu) go where they are drained.

A span is split by its launches, not by time alone, where its shim sent how they
went (the `period_shape` probe, shim/src/shape.cpp: the share made before each of
32 even steps of the span): Llama decode on an H200 ran 8-11 s periods whose window
slowed a part of each, and split by time its 10 s intervals read a 90th percentile
of 6.5 %. A shape is the process's own word about its own rows: taken as monotone
shares between 0 and 1, at most SHAPES_PER_PROCESS of them kept a process, and
nothing it says moves anything but its rows, whose sums stay whole.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Optional, Sequence

from ..probes import contract as C
from ..probes.drain import AggVal
from ..profile.interval import Interval

# The longest an interval waits for the shims: a period is at most 15 s (the
# budget's ceiling, shim/src/budget.cpp) and is published when the next one ends,
# so an interval's last period is out at most 30 s after its end; 10 s more for
# the poller's flush and the agent's drain.
MAX_HOLD_S = 40.0
# The spans' shapes kept a process, newest first out: a span's rows come in the drain
# after its shape, and late records of it a period or two later.
SHAPES_PER_PROCESS = 64


def shape_of(shares: Sequence[int]) -> tuple[float, ...]:
    """A period_shape's shares as the cumulative share at each knot, 0 first and 1
    last: monotone (the running maximum), each at most 1, whatever was sent."""
    out, prev = [0.0], 0.0
    for x in list(shares)[:-1]:
        prev = max(prev, min(x, C.SHAPE_ONE) / C.SHAPE_ONE)
        out.append(prev)
    out.append(1.0)
    return tuple(out)


def cumulative(shape: Optional[tuple[float, ...]], s: int, e: int, t: int) -> float:
    """The share of the span [s, e]'s launches made before t: by its shape where there
    is one (linear between knots), else by time."""
    if t <= s:
        return 0.0
    if t >= e:
        return 1.0
    x = (t - s) / (e - s)
    if shape is None:
        return x
    k = len(shape) - 1
    j = min(int(x * k), k - 1)
    return shape[j] + (shape[j + 1] - shape[j]) * (x * k - j)


def split(v: AggVal, fractions: list[float]) -> list[AggVal]:
    """v's sums in parts by fractions (which add up to 1): integers, rounded at the
    running total, so that the parts add up to v exactly."""
    out, prev, acc = [], (0, 0, 0, 0), 0.0
    for i, f in enumerate(fractions):
        acc += f
        cur = tuple(v) if i == len(fractions) - 1 else tuple(round(x * min(acc, 1.0)) for x in v)
        out.append(AggVal(*(c - p for c, p in zip(cur, prev))))
        prev = cur
    return out


class Placement:
    """The intervals not given out yet, oldest first; the last one is open."""

    def __init__(self, start_ns: int, mono_ns: int, whole: bool = False, max_hold_s: float = MAX_HOLD_S):
        # whole: one interval takes every row wherever its span lies (`record`)
        self.whole = whole
        self.max_hold_ns = int(max_hold_s * 1e9)
        self.first_mono = mono_ns
        self.held: list[Interval] = [Interval(start_ns=start_ns, mono_start=mono_ns)]
        # tgid -> CLOCK_MONOTONIC ns before which its shim has published everything,
        # for every process whose shim collects in windows and has not said it is done
        self.published: dict[int, int] = {}
        self.gone: set[int] = set()  # exited: a mark heard before the exit waits for nothing
        self.counts = {k: 0 for w in ("late", "before_start", "after_stop") for k in (f"{w}_ns", f"{w}_launches")}
        self.stop_mono: Optional[int] = None  # stop(): nothing after it is an interval's
        # tgid -> (start tag, span start, span end) -> shape_of(its shares); the exited
        # processes' shapes go at the interval's close after the next (late rows)
        self.shapes: dict[int, OrderedDict] = {}
        self._exited_shapes: list[list[int]] = [[], []]
        self.shape_counts = {"shaped_spans": 0, "shapes_refused": 0}

    @property
    def current(self) -> Interval:
        return self.held[-1]

    # -- rows in ---------------------------------------------------------------
    def place(self, totals: dict, sampled: dict) -> None:
        for which in ("totals", "sampled"):
            for k, v in (totals if which == "totals" else sampled).items():
                s, e = k.span_start_ns, k.span_end_ns
                # an interval's rows are keyed without their spans: one row a kernel and stack
                key = k._replace(span_start_ns=0, span_end_ns=0) if s or e else k
                if self.whole or not (s or e):
                    self._add(self.current, which, key, v)
                    continue
                shape = self.shapes.get(k.tgid, {}).get((k.start, s, e))
                parts = self._overlaps(s, e, shape)
                for (iv, _, tag), part in zip(parts, split(v, [f for _, f, _ in parts])):
                    if tag:
                        self._count(tag, which, part)
                    if iv is not None:
                        self._add(iv, which, key, part)

    def _overlaps(self, s: int, e: int, shape=None) -> list[tuple[Optional[Interval], float, str]]:
        """(interval, share of [s, e], tag) for every interval it overlaps: None and
        "before_start" for the part before the first interval; the oldest held
        interval and "late" for a part of intervals already given out. Shares of the
        span's launches by its shape (cumulative()), else of its time."""
        first, held = self.first_mono, self.held
        if e <= s or (self.stop_mono is not None and s >= self.stop_mono):  # a point, or after the stop
            if self.stop_mono is not None and e > self.stop_mono:
                return [(None, 1.0, "after_stop")]
            if e < first:
                return [(None, 1.0, "before_start")]
            if e < held[0].mono_start:
                return [(held[0], 1.0, "late")]
            return [(next(iv for iv in held if iv.mono_end is None or e < iv.mono_end), 1.0, "")]
        end = e

        def share(lo: int, hi: int) -> float:
            return cumulative(shape, s, end, hi) - cumulative(shape, s, end, lo)

        out: list[tuple[Optional[Interval], float, str]] = []
        after = max(0, e - max(s, self.stop_mono)) if self.stop_mono is not None else 0
        if after:  # the shims' last partial periods run on until they hear of the stop
            out.append((None, share(e - after, e), "after_stop"))
            e -= after
        if min(e, first) > s:
            out.append((None, share(s, min(e, first)), "before_start"))
        if min(e, held[0].mono_start) > max(s, first):
            out.append((held[0], share(max(s, first), min(e, held[0].mono_start)), "late"))
        for iv in held:
            hi = e if iv.mono_end is None else min(e, iv.mono_end)
            if hi > max(s, iv.mono_start):
                out.append((iv, share(max(s, iv.mono_start), hi), ""))
        return out

    @staticmethod
    def merged(intervals: list[Interval]) -> Interval:
        """Consecutive intervals as one (the first, their rows summed, the last's end)."""
        win = intervals[0]
        for iv in intervals[1:]:
            for which in ("totals", "sampled"):
                for k, v in getattr(iv, which).items():
                    Placement._add(win, which, k, v)
            win.end_ns, win.mono_end = iv.end_ns, iv.mono_end
        return win

    @staticmethod
    def _add(iv: Interval, which: str, key, v: AggVal) -> None:
        dst = iv.totals if which == "totals" else iv.sampled
        old = dst.get(key)
        dst[key] = v if old is None else AggVal(*(a + b for a, b in zip(old, v)))

    def _count(self, what: str, which: str, v: AggVal) -> None:
        if which == "totals":
            ns, n = v.estimated()
            self.counts[f"{what}_ns"] += ns
            self.counts[f"{what}_launches"] += n

    def stop(self, mono_ns: int) -> None:
        """The agent stops: the open interval ends here, whatever a span says later."""
        self.stop_mono = mono_ns

    # -- how far each shim has published ---------------------------------------
    def note_published(self, marks: Iterable[tuple[int, int, bool]]) -> None:
        """(tgid, until_ns, final) of `published` probes whose records are placed."""
        for tgid, until, final in marks:
            if final or tgid in self.gone:
                self.published.pop(tgid, None)
            else:
                self.published[tgid] = max(until, self.published.get(tgid, 0))

    def forget(self, tgid: int) -> None:
        """The process exited: nothing more of it to wait for."""
        self.published.pop(tgid, None)
        self.gone.add(tgid)
        self._exited_shapes[-1].append(tgid)

    # -- how each span's launches went -----------------------------------------
    def note_shape(self, tgid: int, start: int, s: int, e: int, shares: Sequence[int]) -> None:
        """A period_shape probe: the span [s, e]'s rows are split by it."""
        if e <= s or len(shares) < 2:
            self.shape_counts["shapes_refused"] += 1
            return
        mine = self.shapes.setdefault(tgid, OrderedDict())
        mine[(start, s, e)] = shape_of(shares)
        mine.move_to_end((start, s, e))
        while len(mine) > SHAPES_PER_PROCESS:
            mine.popitem(last=False)
        self.shape_counts["shaped_spans"] += 1

    # -- intervals out ---------------------------------------------------------
    def close(self, end_ns: int, mono_ns: int) -> None:
        """The open interval ends here; the next one opens."""
        cur = self.current
        cur.end_ns, cur.mono_end = end_ns, mono_ns
        for tgid in self._exited_shapes.pop(0):  # exited two closes ago: no late rows now
            if tgid in self.gone:
                self.shapes.pop(tgid, None)
        self._exited_shapes.append([])
        self.held.append(Interval(start_ns=end_ns, mono_start=mono_ns))

    def ready(self, mono_ns: int, final: bool = False) -> list[Interval]:
        """The closed intervals that may go out now, oldest first: every shim has
        published past their end, or they waited MAX_HOLD_S (or `final`)."""
        out = []
        while len(self.held) > 1:
            iv = self.held[0]
            waited = mono_ns - iv.mono_end >= self.max_hold_ns
            if not (final or waited or all(u >= iv.mono_end for u in self.published.values())):
                break
            iv.waited_ns = mono_ns - iv.mono_end
            out.append(self.held.pop(0))
        return out

    def waiting_for(self, iv: Interval) -> list[int]:
        """The processes an interval still waits for."""
        return sorted(t for t, u in self.published.items() if u < (iv.mono_end or 0))
