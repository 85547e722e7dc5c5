"""Forged periods (issue 42's surface): spans on kernel records, `published` marks
and `period_shape` shapes, fired by uid 65534 through the real shim's probe sites
while an honest workload runs. A span only moves its own process's rows between
intervals, never beyond their weight, whatever shape it is given; a flood of shapes
keeps at most join/placement.py's SHAPES_PER_PROCESS of them; a mark that never
moves holds the node's intervals only while its process lives (at most
MAX_HOLD_S); the honest workload stays exact, and its intervals come once the
attacker is gone."""

from __future__ import annotations

import struct

from gpu_agent.probes import contract as C

from .faultkit import SHIM, attack

from . import attacker as A

HONEST = ("--paths", "cuLaunchKernel,cudaLaunchKernel", "--iters", "200", "--sleep-ms", "5")
W = 1000  # the forged records' weight


def rec(kernel_id: int, corr: int, span: tuple[int, int]) -> C.KernelRecord:
    r = C.KernelRecord()
    r.kernel_id, r.correlation_id, r.start_ns, r.end_ns, r.weight = kernel_id, corr, 0, 1000, W
    r.span_start_ns, r.span_end_ns = span
    return r


def test_forged_spans_and_marks_stay_the_attacker_s_own(node, honest, attacker, world_dir):
    h = honest(*HONEST)
    kid = C.kernel_id(b"_Z5spansv")
    s = A.Script(SHIM).full_name(kid, b"_Z5spansv")
    s.fire("published", 0, 0)  # "nothing of mine published yet": every interval waits for it
    # shapes: shares that fall, pass one, or are all zero, for its own spans and the
    # honest process's times; then a flood of distinct spans
    bad = s.blob(struct.pack("<32H", *([65535, 0] * 16)))
    for span in ((0, (1 << 64) - 1), (5, 1), (1, 2), (0, 1 << 62)):
        s.fire("period_shape", *span, bad, C.SHAPE_KNOTS)
    for i in range(2000):
        s.fire("period_shape", i * 1000, i * 1000 + 999, bad, C.SHAPE_KNOTS)
    s.batch(
        [
            rec(kid, 1, (0, (1 << 64) - 1)),  # all of time
            rec(kid, 2, (5, 1)),  # ends before it starts: BPF places it on arrival
            rec(kid, 3, (1, 2)),  # long before the agent started: not an interval's
        ],
        repeat=20,
    )
    s.sleep(3000)
    pid = attack(attacker, s, world_dir)
    h.wait()
    h.assert_exact_once_written(node)  # the attacker is gone: its mark holds nothing now
    node.stop()
    samples = node.samples()
    h.assert_exact(samples)
    mine = [x for x in samples if x.labels.get("pid") == str(pid)]
    forged = sum(x.values[1] for x in mine if x.system_names[0] == "_Z5spansv")
    # the two placeable records' weight at most (a span into the future goes where it
    # arrives, as one without a span); the one before the start is dropped
    assert 20 * W <= forged <= 40 * W, [(x.frames, x.values) for x in mine]
