"""What one drain of the BPF maps gives (BpfSession.drain): per-kernel totals and
sampled-stack rows keyed like the contract's ga_agg_key, the session's counters,
and launch-latency histograms. The estimator and the collector read these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


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
