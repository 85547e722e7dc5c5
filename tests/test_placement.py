"""join/placement.py in process: a drain's rows spread over the intervals their spans
overlap, each interval held until every windowed shim has published past its end
(issue 42). The eBPF end to end is tests/test_intervals.py."""

from __future__ import annotations

from gpu_agent.join.placement import MAX_HOLD_S, Placement, split
from gpu_agent.probes.drain import AggKey, AggVal

S = 1_000_000_000  # ns


def key(s: int = 0, e: int = 0, stack: int = 0) -> AggKey:
    return AggKey(7, 0, 1, 0, 0xABC, stack, start=3, span_start_ns=s, span_end_ns=e)


def launches(iv) -> int:
    return sum(v.weighted_launches for v in iv.totals.values())


def test_split_parts_add_up_exactly():
    v = AggVal(1001, 7, 64064, 449)
    parts = split(v, [0.3, 0.3, 0.4])
    assert [sum(f) for f in zip(*parts)] == list(v)
    # each part within one unit of its share (rounded at the running total)
    assert [p.weighted_launches for p in parts] == [135, 134, 180]


def test_a_period_is_spread_over_the_intervals_it_overlaps():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.close(110 * S, 20 * S)  # [10, 20) closed, [20, ...) open
    # a period [16, 24] with 8 000 launches: a half in each interval
    p.place(
        {key(16 * S, 24 * S): AggVal(8000, 1000, 64000, 8000)}, {key(16 * S, 24 * S, stack=5): AggVal(80, 10, 640, 80)}
    )
    first, cur = p.held
    assert launches(first) == launches(cur) == 4000
    # rows lose their span: one row a kernel and stack in each interval
    assert set(first.totals) == {key()} and set(first.sampled) == {key(stack=5)}
    assert first.sampled[key(stack=5)].weighted_launches == 40


def test_an_interval_waits_for_every_windowed_shim():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.note_published([(7, 10 * S, False), (8, 10 * S, False)])
    p.close(110 * S, 20 * S)
    assert p.ready(21 * S) == []
    p.note_published([(7, 22 * S, False)])
    assert p.ready(23 * S) == [] and p.waiting_for(p.held[0]) == [8]
    p.note_published([(8, 19 * S, False)])
    assert p.ready(23 * S) == []  # 8 is not past the end yet
    p.note_published([(8, 1 * S, True)])  # its last: done
    (iv,) = p.ready(24 * S)
    assert iv.mono_end == 20 * S and iv.waited_ns == 4 * S


def test_a_shim_that_never_publishes_holds_an_interval_at_most_max_hold():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.note_published([(7, 10 * S, False)])
    p.close(110 * S, 20 * S)
    assert p.ready(20 * S + int(MAX_HOLD_S * S) - 1) == []
    assert len(p.ready(20 * S + int(MAX_HOLD_S * S))) == 1


def test_an_exited_process_waits_for_nothing_even_with_its_last_marks_after_the_exit():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.note_published([(7, 10 * S, False)])
    p.forget(7)
    p.note_published([(7, 12 * S, False)])  # heard before the exit, applied after it
    p.close(110 * S, 20 * S)
    assert len(p.ready(20 * S)) == 1


def test_parts_before_the_start_after_the_stop_and_for_intervals_given_out_are_counted():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.close(110 * S, 20 * S)
    assert len(p.ready(21 * S, final=True)) == 1  # [10, 20) is out
    # [5, 25]: 5 s before the agent started (dropped), 10 s of an interval given out
    # (late: into the oldest held), 5 s in the open one
    p.place({key(5 * S, 25 * S): AggVal(0, 0, 0, 2000)}, {})
    assert launches(p.current) == 1500
    assert p.counts["before_start_launches"] == 500 and p.counts["late_launches"] == 1000
    p.stop(26 * S)
    p.place({key(24 * S, 28 * S): AggVal(0, 0, 0, 400)}, {})  # half after the stop
    assert launches(p.current) == 1700 and p.counts["after_stop_launches"] == 200


def test_rows_without_a_span_go_where_they_are_drained_and_record_takes_everything():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.close(110 * S, 20 * S)
    p.place({key(): AggVal(10, 1, 10, 1)}, {})
    assert launches(p.current) == 1 and launches(p.held[0]) == 0
    whole = Placement(start_ns=100 * S, mono_ns=10 * S, whole=True)
    whole.place({key(1 * S, 2 * S): AggVal(10, 1, 10, 1), key(2 * S, 3 * S): AggVal(10, 1, 10, 2)}, {})
    # two periods' rows of one kernel are one row (they once overwrote each other)
    assert whole.current.totals == {key(): AggVal(20, 2, 20, 3)}


def test_intervals_merged_sum_their_rows_and_end_at_the_last():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.place({key(12 * S, 14 * S): AggVal(0, 0, 0, 10)}, {})
    p.close(110 * S, 20 * S)
    p.place({key(): AggVal(0, 0, 0, 5)}, {})
    p.close(120 * S, 30 * S)
    win = Placement.merged(p.ready(31 * S, final=True))
    assert (win.start_ns, win.end_ns, win.mono_end) == (100 * S, 120 * S, 30 * S)
    assert win.totals == {key(): AggVal(0, 0, 0, 15)}


def test_a_shaped_span_is_split_by_its_launches_not_its_time():
    """A period [16, 24] whose launches went three in four in its first half (its window
    slowed the second): split by its shape, not by time."""
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.close(110 * S, 20 * S)
    # 32 knots: 3/4 of the launches by the half, evenly in each half
    shares = [round(65535 * (0.75 * (j + 1) / 16 if j < 16 else 0.75 + 0.25 * (j - 15) / 16)) for j in range(32)]
    p.note_shape(7, 3, 16 * S, 24 * S, shares)
    p.place({key(16 * S, 24 * S): AggVal(8000, 1000, 64000, 8000)}, {})
    first, cur = p.held
    assert (launches(first), launches(cur)) == (6000, 2000)
    # another process's, or another start tag's, span of the same times is its own
    p.place({key(16 * S, 24 * S)._replace(tgid=8): AggVal(8000, 1000, 64000, 8000)}, {})
    p.place({key(16 * S, 24 * S)._replace(start=4): AggVal(8000, 1000, 64000, 8000)}, {})
    assert (launches(first), launches(cur)) == (14000, 10000)
    assert p.shape_counts == {"shaped_spans": 1, "shapes_refused": 0}


def test_a_shape_that_makes_no_sense_moves_only_its_own_rows_and_keeps_them_whole():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.close(110 * S, 20 * S)
    p.note_shape(7, 3, 24 * S, 16 * S, [0] * 32)  # ends before it starts: refused
    # shares that go down and past one: the running maximum, at most one
    p.note_shape(7, 3, 16 * S, 24 * S, [65535 * 4 if j == 3 else 0 for j in range(32)])
    p.place({key(16 * S, 24 * S): AggVal(8001, 1000, 64001, 8001)}, {})
    first, cur = p.held
    assert (launches(first), launches(cur)) == (8001, 0)
    assert p.shape_counts == {"shaped_spans": 1, "shapes_refused": 1}
    # a flood of spans: the newest SHAPES_PER_PROCESS kept
    for i in range(1000):
        p.note_shape(7, 3, i * S, (i + 1) * S, [65535] * 32)
    assert len(p.shapes[7]) == 64 and (3, 999 * S, 1000 * S) in p.shapes[7]


def test_an_exited_process_s_shapes_go_two_closes_after_its_exit():
    p = Placement(start_ns=100 * S, mono_ns=10 * S)
    p.note_shape(7, 3, 11 * S, 12 * S, [65535] * 32)
    p.forget(7)
    p.close(110 * S, 20 * S)
    assert 7 in p.shapes  # its last rows may come in the next drain
    p.close(120 * S, 30 * S)
    assert 7 not in p.shapes
