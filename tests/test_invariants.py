"""Impossible kernel records never reach the totals (agent/gpu_agent/join/invariants.py,
BPF's GA_DROP_IMPOSSIBLE), and every one is counted where users look: the status
line, the counters behind /metrics, and a comment in the profile.

The probe firer (tests/probe_firer) fires the shim's kernel_batch probe with
crafted records into a real Collector (real eBPF, real profile builder)."""

from __future__ import annotations

import sys
from pathlib import Path

from support.firing import fire_into
from gpu_agent.probes import contract as C
from gpu_agent.join.collector import Collector
from gpu_agent.commands.common import status_line
from support.pprof_tool import raw

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
import firer_script as F  # noqa: E402

GOOD, MISTIMED, ODD = (C.kernel_id(n) for n in (b"good_kernel", b"mistimed_graph_kernel", b"odd"))


def test_impossible_records_are_dropped_counted_and_reported(firer, tmp_path):
    lib, exe = firer
    sc = F.Script()
    for k, name in ((GOOD, b"good_kernel"), (MISTIMED, b"mistimed_graph_kernel"), (ODD, b"odd")):
        sc.full_name(k, name)
    # A windowed process (weight 10): stream 8 is honest (10 x 2 ms raw); stream 9's
    # graph records sum to 5 x 3 s of raw GPU time inside an interval of about a
    # second, which no stream can do.
    honest = [F.rec(GOOD, 100 + i, 2_000_000, stream=8, weight=10) for i in range(10)]
    mistimed = [F.rec(MISTIMED, 200 + i, 3_000_000_000, stream=9, graph_id=4, node=i + 1, weight=10) for i in range(5)]
    # Records no shim should send: end before start, flagged by the shim (started
    # before its window opened), and longer than GA_MAX_KERNEL_NS.
    backwards = F.rec(ODD, 300, 5, stream=8, weight=10)
    backwards.end_ns = backwards.start_ns - 1
    flagged = F.rec(ODD, 301, 5, stream=8, weight=10)
    flagged.flags = C.REC_IMPOSSIBLE
    huge = F.rec(ODD, 302, C.MAX_KERNEL_NS + 1, stream=8, weight=10)
    sc.batch(honest + mistimed + [backwards, flagged, huge])
    script = sc.write(tmp_path / "s.bin")

    col = Collector(str(lib), python_stacks=False)
    col.open()
    try:
        fire_into(col, exe, script, kernels=len(honest) + len(mistimed))
        builder, stats = col.build_profile()
        counters = col.counters()
    finally:
        col.close()
    out = tmp_path / "p.pb.gz"
    builder.write(out)

    # 3 refused by BPF one by one, 5 by the agent as a stream.
    assert counters["drop_impossible"] == 3 + len(mistimed), counters
    assert stats.impossible_records == len(mistimed)
    line = status_line(stats, counters)
    assert "drop_impossible=8" in line, line
    assert " since start (" in line, line  # a running total, said so (issue 45)
    # The profile holds the honest stream, exactly, and says what it lost.
    kernels = {}
    for s in raw(out):
        kernels.setdefault(s.frames[0], [0, 0])
        kernels[s.frames[0]][0] += s.values[0]
        kernels[s.frames[0]][1] += s.values[1]
    assert kernels == {"good_kernel": [10 * 10 * 2_000_000, 10 * 10]}, kernels
    proto = builder.to_proto()
    comments = [proto.string_table[c] for c in proto.comment]
    assert any("drop_impossible=8" in c for c in comments), comments


def test_lost_records_are_bounded_by_the_interval_and_the_process_s_gpus(tmp_path):
    """Issue 44, item 5, without eBPF: a process's lost records stand for at most the
    interval's length x its GPUs x MAX_RECORDS_PER_GPU_SECOND launches; past that they
    are refused, the records kept in proportion to the launches (a window's weight
    multiplies them); a record sent with the lost rows' kernel id is made one of them.
    tests/faults/test_hostile_probes.py fires the same through the real shim."""
    from gpu_agent.join import invariants as I
    from gpu_agent.probes.devices import NODE_GPUS_UNKNOWN, node_gpus
    from gpu_agent.probes.drain import AggKey, AggVal

    R, D = I.MAX_RECORDS_PER_GPU_SECOND, C.KERNEL_DROPPED
    assert I.drop_bound(2_000_000_000, 3) == 6 * R and I.drop_bound(500_000_000, 0) == R // 2
    honest = AggKey(1, 0, 0, 0, D, 0)
    forged = AggKey(2, 0, 0, 0, D, 0)
    weighted = AggKey(3, 0, 0, 0, D, 0)
    kernel = AggKey(2, 5, 7, 0, GOOD, 0)
    totals = {
        honest: AggVal(0, R, 0, R),  # within one GPU's second
        forged: AggVal(0, 1 << 24, 0, 1 << 24),  # 8 seconds' worth
        weighted: AggVal(0, 64, 0, 64 << 20),  # 64 records of 2^20 launches each
        kernel: AggVal(100, 1, 100, 1),
    }
    out, res = I.bound_drops(totals, 1_000_000_000, {1: 1, 2: 2, 3: 1})
    assert out[honest] == totals[honest] and out[kernel] == totals[kernel]
    assert out[forged] == AggVal(0, 2 * R, 0, 2 * R)  # its two GPUs' worth
    assert out[weighted] == AggVal(0, 2, 0, R)
    assert res.kept == {1: R, 2: 2 * R, 3: 2} and res.kept_launches == {1: R, 2: 2 * R, 3: R}
    assert res.refused == {2: (1 << 24) - 2 * R, 3: 62}

    # A record with the lost rows' kernel id: no GPU time, no span, no stack, one row.
    spanned = AggKey(4, 3, 9, 1, D, 0, 0, 0, 77, 10, 20)
    t, s = I.sanitize_dropped(
        {spanned: AggVal(5_000, 2, 50_000, 20), AggKey(4, 0, 0, 0, D, 0, 0, 0, 77): AggVal(0, 1, 0, 1)},
        {spanned._replace(stack_id=8): AggVal(5_000, 2, 50_000, 20)},
    )
    assert t == {AggKey(4, 0, 0, 0, D, 0, 0, 0, 77): AggVal(0, 3, 0, 21)} and s == {}

    # The node's GPUs: the driver's one /proc directory a GPU, else an HGX board's 8.
    gpus = tmp_path / "gpus"
    assert node_gpus(str(gpus)) == NODE_GPUS_UNKNOWN == 8
    for bus in ("0000:18:00.0", "0000:2a:00.0"):
        (gpus / bus).mkdir(parents=True)
    assert node_gpus(str(gpus)) == 2
