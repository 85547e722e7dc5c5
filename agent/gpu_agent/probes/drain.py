"""What one drain of the BPF maps gives (BpfSession.drain): per-kernel totals and
sampled-stack rows keyed like the contract's ga_agg_key, the session's counters,
and launch-latency histograms; and the reading of one generation's maps into them.
The estimator and the collector read these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from . import bpf_maps
from . import contract as C


class AggKey(NamedTuple):
    tgid: int
    device_id: int
    stream_id: int
    graph_id: int
    kernel_id: int
    stack_id: int
    # Graph kernels (contract: ga_agg_key): the stack that created the node
    # (graph_flags & C.AGG_CAPTURED), or C.AGG_NODE_UNKNOWN when that was never seen.
    capture_stack_id: int = 0
    graph_flags: int = 0
    # The process's start tag (contract: ga_agg_key): a reused pid's rows stay apart.
    start: int = 0
    # The stretch of time (CLOCK_MONOTONIC ns) the row's weighted sums stand for
    # (contract: ga_kernel_record.span_*): its period's. 0, 0: where it was drained.
    # join/placement.py spreads a row over the intervals it overlaps.
    span_start_ns: int = 0
    span_end_ns: int = 0


class AggVal(NamedTuple):
    gpu_ns: int
    launches: int
    weighted_ns: int
    weighted_launches: int

    def estimated(self) -> tuple[int, int]:
        """A totals value as (GPU ns, launches) of the whole run.

        The shim collects in one time window of every N (its duty cycle) and
        weights each record by all launches / windowed launches, about N
        (shim/src/window.cpp), so the weighted sums are the estimate;
        with continuous collection they equal the exact sums. A value without
        weighted sums (hand-built in a test) is taken as exact."""
        if self.weighted_launches:
            return self.weighted_ns, self.weighted_launches
        return self.gpu_ns, self.launches


@dataclass
class Drain:
    totals: dict[AggKey, AggVal]
    sampled: dict[AggKey, AggVal]
    counters: dict[str, int]
    # Launch-to-start latency of sampled launches: (tgid, device) ->
    # (counts by floor(log2(ns)), a list of C.LAT_BUCKETS; sum of the latencies in ns).
    latency: dict = field(default_factory=dict)


def read_totals(lib, fd: int) -> dict[AggKey, AggVal]:
    """Every row of a totals or sampled map (ga_agg_key -> ga_agg_val), read and
    deleted; a key's per-CPU values summed."""
    out: dict[AggKey, AggVal] = {}
    stride = len(C.AggValC._fields_)  # u64 per key

    def add(key: C.AggKeyC, vals: memoryview) -> None:
        k = AggKey(
            key.tgid,
            key.device_id,
            key.stream_id,
            key.graph_id,
            key.kernel_id,
            key.stack_id,
            key.capture_stack_id,
            key.graph_flags,
            key.start,
            key.span_start_ns,
            key.span_end_ns,
        )
        v = AggVal(*vals)
        old = out.get(k)
        out[k] = v if old is None else AggVal(*(a + b for a, b in zip(old, v)))

    bpf_maps.drain(lib, fd, stride, add, C.AggKeyC)
    return out


def read_latency(lib, fd: int) -> dict:
    """A latency map, read and deleted: (tgid, device) -> (counts by bucket, sum ns)."""
    out: dict = {}
    stride = 2  # ga_lat_val {count, sum_ns}

    def add(key: C.LatKey, vals: memoryview) -> None:
        if key.bucket >= C.LAT_BUCKETS:
            return
        acc = out.get((key.tgid, key.device_id))
        if acc is None:
            acc = out[(key.tgid, key.device_id)] = [[0] * C.LAT_BUCKETS, 0]
        acc[0][key.bucket] += vals[0]
        acc[1] += vals[1]

    bpf_maps.drain(lib, fd, stride, add, C.LatKey)
    return {k: (v[0], v[1]) for k, v in out.items()}
