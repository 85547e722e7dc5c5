"""Sanity checks on one interval's totals, before they become a profile.

BPF already refuses single records whose times cannot be true (end before
start, longer than GA_MAX_KERNEL_NS, or flagged by the shim: drop_impossible).
What one record cannot show, a stream's sum can: the kernel records of one
stream of a process whose shim collects in windows (one slot in N) cover about
1/N of the interval, so their raw GPU time can never exceed the interval's wall
time. A stream that does is carrying mis-timed records (as CUPTI's graph-replay
end times did on an H200 before the shim left those replays out:
docs/cupti-graph-windows.md); the whole stream is kept out of the interval's
profile and its records are counted as drop_impossible, rather than reporting
GPU time that did not happen.

Continuous (exact) collection is not checked: a stream may legitimately run
kernels concurrently (graph branches, programmatic dependent launch), so only
the 1/N headroom of windowed collection makes the bound safe.

A process's lost records (its `[dropped: cupti]` row, BPF's GA_KERNEL_DROPPED) are
its own word, and BPF bounds them only per batch and per process-second (2^24): 20
processes each sending one 2^24 batch a second for 15 s took the node's drop_cupti
to 5.03e9, and one claim charted `[dropped: cupti] 2264.92s` in a 10 s interval on
one GPU. So each interval keeps at most bound_drops()'s launches of a process (its
length x the process's GPUs x MAX_RECORDS_PER_GPU_SECOND), charts their GPU time up
to its length x those GPUs, and refuses the rest as implausible claims.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Mapping

from ..probes import contract as C
from ..probes.drain import AggKey, AggVal
from ..profile.vocabulary import DROPPED_CUPTI

MAX_DROPS_PER_SECOND = C.MAX_BATCH_DROPS  # bpf/gpu_agent.bpf.c's per-process budget

# The most kernel records one GPU can give a process in a second (CUPTI cannot lose
# more records than kernels ran, nor can kernels run faster than they are launched).
# The highest rates measured (where: docs/security.md): a torch.cuda.graph replay of
# 12 kernels every 33.1 us, about 362 000 kernels/s on one H200; driver-API
# cuGraphLaunch, 4 kernels every 14.8 us, 270 000/s (H200); an empty-kernel launch
# loop at 3.7 us a launch, 270 000/s (H100); eager PyTorch 150 400 launches/s (H100).
# 2^21 = 2 097 152 is 5.8x the highest: headroom for faster GPUs and graphs of smaller
# kernels, not yet measured (no GPU was at hand when this was set: re-measure the
# highest kernel rate of a graph of empty kernels on each new GPU). The mock driver's
# 6.0 M launches/s has no GPU behind it; its record losses come in bursts far inside
# a second's bound. A process's lost records in an interval past its length x its
# GPUs x this are refused (bound_drops).
MAX_RECORDS_PER_GPU_SECOND = 1 << 21


def impossible_streams(totals: Mapping, windowed: set[int], wall_ns: int) -> set[tuple[int, int, int]]:
    """(tgid, device, stream) of windowed processes whose records' raw GPU time
    in this interval exceeds the interval's wall time. totals: AggKey -> AggVal
    (raw gpu_ns, before window weights)."""
    raw: dict[tuple[int, int, int], int] = defaultdict(int)
    for k, v in totals.items():
        if k.tgid in windowed:
            raw[(k.tgid, k.device_id, k.stream_id)] += v.gpu_ns
    return {s for s, ns in raw.items() if ns > wall_ns}


def drop_streams(aggs: Mapping, streams: set[tuple[int, int, int]]) -> tuple[dict, int]:
    """aggs without the keys of `streams`, and how many records were left out."""
    if not streams:
        return dict(aggs), 0
    kept, dropped = {}, 0
    for k, v in aggs.items():
        if (k.tgid, k.device_id, k.stream_id) in streams:
            dropped += v.launches
        else:
            kept[k] = v
    return kept, dropped


def drops_comment(now: Mapping[str, int], before: Mapping[str, int]) -> str:
    """The profile comment naming what this interval lost, by reason ('' if nothing)."""
    lost = {k: now[k] - before.get(k, 0) for k in now if "drop" in k and now[k] > before.get(k, 0)}
    if not lost:
        return ""
    return "gpu-agent lost data in this interval, so its totals are low by what these counted: " + ", ".join(
        f"{k}={v}" for k, v in sorted(lost.items())
    )


class DropClaims:
    """Lost records each process claimed past what it could have lost (BPF's
    drop_implausible map, cumulative per tgid): what is new in each interval,
    said in the profile (the node's drop_implausible counts the refused claims,
    one each, so no process can inflate it)."""

    SHOWN = 8  # pids named in one comment

    def __init__(self) -> None:
        self._seen: dict[int, int] = {}

    def new(self, claimed: Mapping[int, int]) -> dict[int, int]:
        """tgid -> records claimed since the last call."""
        out = {p: n - self._seen.get(p, 0) for p, n in claimed.items() if n > self._seen.get(p, 0)}
        self._seen.update(claimed)
        return out

    def forget(self, pids) -> None:
        for p in pids:
            self._seen.pop(p, None)

    @classmethod
    def comment(cls, new: Mapping[int, int], comm) -> str:
        """One comment naming the processes (comm(pid) their name), '' if none."""
        if not new:
            return ""
        top = sorted(new.items(), key=lambda kv: -kv[1])
        named = ", ".join(f"pid {p} ({comm(p)}) {n}" for p, n in top[: cls.SHOWN])
        more = f" and {len(top) - cls.SHOWN} more" if len(top) > cls.SHOWN else ""
        return (
            "lost kernel records claimed past what a process can lose (a batch's bound, "
            f"{MAX_DROPS_PER_SECOND} a second, or launches past {MAX_RECORDS_PER_GPU_SECOND} a second "
            "of the interval on each of its GPUs), refused and not in drop_cupti "
            f"nor in its {DROPPED_CUPTI} samples: {named}{more}"
        )


def drop_bound(wall_ns: int, gpus: int) -> int:
    """The most launches a process's lost records may stand for in an interval of
    wall_ns on `gpus` GPUs."""
    return max(0, wall_ns) * max(1, gpus) * MAX_RECORDS_PER_GPU_SECOND // 1_000_000_000


def is_dropped(key) -> bool:
    return key[4] == C.KERNEL_DROPPED


def sanitize_dropped(totals: dict, sampled: dict) -> tuple[dict, dict]:
    """A drain's rows with every GA_KERNEL_DROPPED row as BPF makes it: one row a
    process (and start tag), placed where it is drained (no span), with no GPU time
    (a lost record has none; add_dropped() adds launches only) and no stack. A record
    the shim sent with that kernel id would otherwise chart GPU time of its own, or be
    spread over intervals already held, out of the interval's bound."""
    if not any(is_dropped(k) for k in totals) and not any(is_dropped(k) for k in sampled):
        return totals, sampled  # the usual drain: nothing to copy
    out: dict = {}
    for k, v in totals.items():
        if is_dropped(k):
            k = AggKey(k.tgid, 0, 0, 0, C.KERNEL_DROPPED, 0, 0, 0, k.start)
            v = AggVal(0, v.launches, 0, v.weighted_launches)
        old = out.get(k)
        out[k] = v if old is None else AggVal(*(a + b for a, b in zip(old, v)))
    return out, {k: v for k, v in sampled.items() if not is_dropped(k)}


@dataclass
class BoundDrops:
    """What bound_drops() kept and refused in one interval, by tgid."""

    kept: dict[int, int] = field(default_factory=dict)  # records (raw): the node's drop_cupti
    kept_launches: dict[int, int] = field(default_factory=dict)  # launches they stand for (the profile's)
    refused: dict[int, int] = field(default_factory=dict)  # records claimed past the bound


def bound_drops(totals: Mapping, wall_ns: int, gpus: Mapping[int, int]) -> tuple[dict, BoundDrops]:
    """totals with each process's GA_KERNEL_DROPPED rows cut to drop_bound(wall_ns,
    gpus[tgid]) launches in all (the launches their weights stand for; the records
    kept in proportion), and what was kept and refused. Rows taken in key order."""
    out, res = dict(totals), BoundDrops()
    left: dict[int, int] = {}
    for k in sorted(k for k in totals if is_dropped(k)):
        v = totals[k]
        n = v.estimated()[1]  # launches: weighted where the shim collects in windows
        if k.tgid not in left:
            left[k.tgid] = drop_bound(wall_ns, gpus.get(k.tgid, 1))
        take = min(n, left[k.tgid])
        left[k.tgid] -= take
        raw = v.launches if take == n else v.launches * take // n
        if take < n:
            out[k] = AggVal(0, raw, 0, take if v.weighted_launches else 0)
            res.refused[k.tgid] = res.refused.get(k.tgid, 0) + v.launches - raw
        res.kept[k.tgid] = res.kept.get(k.tgid, 0) + raw
        res.kept_launches[k.tgid] = res.kept_launches.get(k.tgid, 0) + take
    return out, res
