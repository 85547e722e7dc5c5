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
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

from ..probes import contract as C

MAX_DROPS_PER_SECOND = C.MAX_BATCH_DROPS  # bpf/gpu_agent.bpf.c's per-process budget


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
            "lost kernel records claimed past what a process can lose (a batch's bound, or "
            f"{MAX_DROPS_PER_SECOND} a second), refused and not in drop_cupti: {named}{more}"
        )
