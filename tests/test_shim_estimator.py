"""The shim's estimator in process, over a fake clock (no CUDA, no eBPF, no agent).

As Kineto tests its CUPTI record path against MockCuptiActivities: a source file of
the shim is compiled on its own with a driver of ours (tests/shim_unit/*_unit.cpp)
that plays the clock and what the file reads, so a case of the per-interval issue
runs in milliseconds and the same way every time. The mock's runs under a real
agent (tests/test_mix_cuts.py) stay the end-to-end check.

mix.cpp (tests/shim_unit/mix_unit.cpp): where a period's launch mix changes. The
launch counter's hits per launch function are noted at every poll; a change is cut
at once and placed at the poll that parts the period into its two sides.

weights.cpp (tests/shim_unit/weights_unit.cpp): each period's weight, its launches
over its window's, published one period late with the span its launches were made
in, which the agent splits over its intervals by overlap (issue 42).

shape.cpp (tests/shim_unit/shape_unit.cpp): how a published span's launches spread
over it, from the count noted at every poll, or from its pieces (the launches carried
from before its period, its own) where no count shapes it.

tail.cpp (tests/shim_unit/tail_unit.cpp): which of a cycle's kernel records are its
window's and which its tail's, however CUPTI's buffers come.

budget.cpp (tests/shim_unit/budget_unit.cpp): each period's window and spacing from
what the windows cost the process. tests/test_budget.py runs the same rules through
the mock under a real agent; here every figure is given, so each rule is checked
exactly, at its bounds too.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "tests" / "shim_unit"
CUDA_INC = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
if not Path(CUDA_INC, "cupti.h").exists():  # deploy/install-deps.sh's pip-wheel headers
    CUDA_INC = "/opt/gpu-agent-cuda/include"

# The H200's phased job: its MLP code launches 74 000 a second, half through cudart
# (GELU) and half through cuBLAS's cuLaunchKernelEx (the GEMMs); its eager code
# 150 000 a second, all through cudart.
MLP, EAGER = "74000:0.5", "150000:1"
POLL_MS = 100  # GPU_AGENT_POLL_MS's default


def build(tmp_path_factory, name: str) -> Path:
    """tests/shim_unit/NAME.cpp (a shim source with its driver) built on its own."""
    exe = tmp_path_factory.mktemp(name) / name
    subprocess.run(
        ["g++", "-std=c++17", "-O1", "-fno-exceptions", "-fno-rtti", "-Wall", "-Werror", "-Wno-comment"]
        + ["-I", str(REPO / "shim/src"), "-I", str(REPO / "shim/include"), "-I", str(REPO / "shim/third_party")]
        + ["-I", CUDA_INC]
        + ["-o", str(exe), str(HERE / f"{name}.cpp")],
        check=True,
        timeout=120,
    )
    return exe


def play(exe: Path, script: str) -> str:
    """What a driver printed for its script on stdin."""
    return subprocess.run([str(exe)], input=script, capture_output=True, text=True, check=True, timeout=10).stdout


@pytest.fixture(scope="module")
def mix_unit(tmp_path_factory) -> Path:
    return build(tmp_path_factory, "mix_unit")


@pytest.fixture(scope="module")
def budget_unit(tmp_path_factory) -> Path:
    return build(tmp_path_factory, "budget_unit")


@pytest.fixture(scope="module")
def weights_unit(tmp_path_factory) -> Path:
    return build(tmp_path_factory, "weights_unit")


@pytest.fixture(scope="module")
def shape_unit(tmp_path_factory) -> Path:
    return build(tmp_path_factory, "shape_unit")


@pytest.fixture(scope="module")
def tail_unit(tmp_path_factory) -> Path:
    return build(tmp_path_factory, "tail_unit")


def mix(exe: Path, change_ms: int, end_ms: int, before: str, after: str, burst_ms: int = 0) -> dict:
    """mix_unit's RESULT line as {key: ms}: cut_ms and since_ms (a cut), lately_ms and
    since_ms (found at the planned end), or {} (none)."""
    args = [str(exe), str(POLL_MS), str(change_ms), str(end_ms), before, after] + ([str(burst_ms)] if burst_ms else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=10).stdout
    line = re.search(r"^RESULT (.*)$", out, re.M)
    assert line, out
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


@pytest.mark.parametrize("change_ms", [200, 250, 350, 700, 1500])
@pytest.mark.parametrize("sides", [(MLP, EAGER), (EAGER, MLP)], ids=["mlp-eager", "eager-mlp"])
def test_a_change_is_cut_at_once_and_placed_at_its_poll(mix_unit, change_ms, sides):
    """Wherever the change lies past the period's first slot, the poll 200 ms after it
    (RECENT_NS, rounded up to a poll) cuts, and places it at the poll that parts the
    two sides (the change's own, or one on either side when it falls between). In
    an H200 run of eager and MLP code every 3 s, a period whose MLP part ended 200 ms
    in (just after its window, in its second slot) was never cut: the 300 ms before
    the newest poll that left 200 ms after it held 100 ms of eager code already (0.75
    of cudart's launches where MLP's are 0.5 and eager's 1), so the two sides moved
    0.25 apart (CHANGED: 0.3); its 1.25 s of eager launches took the MLP window's
    kernels, and its interval's GPU ns read +22.7 %."""
    got = mix(mix_unit, change_ms, 3000, *sides)
    assert "cut_ms" in got, got
    assert got["cut_ms"] <= change_ms + 300, got  # 200 ms of the new side, a poll late at most
    assert abs(got["since_ms"] - change_ms) < POLL_MS, got  # the poll on either side of it


@pytest.mark.parametrize("burst_ms", [0, 10, 50])
def test_a_steady_mix_is_not_cut(mix_unit, burst_ms):
    """A job whose launch functions take turns faster than its polls (an MLP's GEMMs
    and GELUs inside each step, or steps of one kind then the other up to 50 ms) is
    one mix: no cut, and none found at the planned end."""
    assert mix(mix_unit, 10**6, 3000, MLP, MLP, burst_ms) == {}


def test_a_change_late_in_a_period_is_found_at_its_planned_end(mix_unit):
    """A change too recent for a cut (under 200 ms before the planned end) is still
    placed (ga_mix_changed_lately), so that window.cpp gives each side to a window
    that saw it."""
    got = mix(mix_unit, 2900, 3000, MLP, EAGER)
    assert got == {"lately_ms": 3000, "since_ms": 2900}, got


# ---- budget.cpp ----

MS = 1_000_000
CB_NS = 300.0  # budget.cpp's callbacks' cost a launch until the tails measured it
W_MIN, W_MAX, P_MAX, N_MIN = 100 * MS, 1000 * MS, 15_000 * MS, 10


def plans(exe: Path, script: str) -> list[dict]:
    """budget_unit's PLAN lines, each as {key: number}."""
    out = play(exe, script)
    return [{k: float(v) for k, v in re.findall(r"(\w+)=([-\d.]+)", ln)} for ln in out.splitlines()]


def window(switch_ms: float, teardown_ms: float, slow: float, rate_per_ms: float = 100.0) -> str:
    """One window's notes as collection.cpp and window.cpp make them: its switches and
    its teardown's stall, then the window (100 ms) at 1 - slow of the count phase's
    rate, and the count phase (100 ms) at that rate."""
    base = rate_per_ms / MS  # launches per ns
    n = int(100 * rate_per_ms * (1 - slow))
    return (
        f"stall {int(switch_ms * MS)} switch\nstall {int(teardown_ms * MS)} teardown\n"
        f"window {100 * MS} {n} {base} {int(100 * rate_per_ms)} {100 * MS}\n"
    )


def test_the_first_period_is_four_slots_and_one_before_any_window_fifteen(budget_unit):
    """The attach's period: four 100 ms slots (a process shows within half a second);
    until a window has measured the costs, a steady period's length, 15 slots."""
    got = plans(budget_unit, "plan first\nplan next\n")
    assert [(p["slots"], p["slot_ns"]) for p in got] == [(4, W_MIN), (15, W_MIN)], got


@pytest.mark.parametrize("fixed_ms, window_ms", [(3.0, 100), (12.34, 123), (23.46, 235), (60.0, 600), (150.0, 1000)])
def test_the_window_is_ten_times_its_fixed_cost_in_whole_ms_within_its_bounds(budget_unit, fixed_ms, window_ms):
    """W = 10 x fixed (switches + teardown), rounded to a whole ms, within [100 ms, 1 s]."""
    got = plans(budget_unit, "tails 1\n" + window(fixed_ms * 0.75, fixed_ms * 0.25, 0.1) + "plan next\n")[-1]
    assert got["slot_ns"] == window_ms * MS, got


@pytest.mark.parametrize("tails", [0, 1])
@pytest.mark.parametrize("budget_bp", [50, 200, 500])
@pytest.mark.parametrize("fixed_ms, slow", [(3.0, 0.0), (12.0, 0.1), (12.0, 0.4), (40.0, 0.25)])
def test_the_spacing_is_the_shortest_that_keeps_the_budget(budget_unit, tails, budget_bp, fixed_ms, slow):
    """The plan's cost is its model's (fixed + W x (on x slow' + cb), on = 1.5 with the
    tails, slow' the window's slowdown with the count phase's on top), and the period
    is the fewest slots that keep it within the budget: one slot fewer would not (but
    at the floor of 10 slots, or the 15 s ceiling, which is counted)."""
    script = f"budget {budget_bp}\ntails {tails}\n" + window(fixed_ms / 2, fixed_ms / 2, slow) + "plan next\n"
    got = plans(budget_unit, script)[-1]
    w, n = got["slot_ns"], got["slots"]
    cb = 0.3 * CB_NS * 100.0 / MS  # no tail yet: the guess, one window into its running mean
    s = slow + cb * (1 - slow)
    cost = fixed_ms * MS + w * ((1.5 if tails else 1.0) * s + cb)
    budget = budget_bp / 10_000
    assert got["cost"] == pytest.approx(cost / (w * n), rel=1e-6), (got, cost)
    if n == P_MAX // w:  # the ceiling (whole slots under 15 s): over the budget, and counted
        assert got["over"] == 1 and got["cost"] > budget, got
        return
    assert got["over"] == 0 and got["cost"] <= budget, got
    assert n == N_MIN or cost / (w * (n - 1)) > budget, got


def test_slower_windows_are_spaced_further_apart(budget_unit):
    """The same fixed cost, a window that slows its launches by 40 % instead of 5 %:
    the same window length, a longer period."""
    fast, slow = (plans(budget_unit, "tails 1\n" + window(6, 4, s) + "plan next\n")[-1] for s in (0.05, 0.4))
    assert fast["slot_ns"] == slow["slot_ns"] and slow["slots"] > 2 * fast["slots"], (fast, slow)


def test_a_budget_the_ceiling_cannot_keep_is_counted_each_period(budget_unit):
    """At 0.1 % a window of 100 ms fixed cost would need a period of over 100 s: every
    plan holds the 15 s ceiling (one window in every 30 s at least) and counts it."""
    script = "budget 10\ntails 1\n" + window(60, 40, 0.2) + "plan next\n" + window(60, 40, 0.2) + "plan next\n"
    got = plans(budget_unit, script)
    assert [(p["slots"], p["slot_ns"], p["over"]) for p in got] == [(15, W_MAX, 1), (15, W_MAX, 2)], got
    assert all(p["cost"] > 0.001 for p in got), got


def test_teardown_stalls_are_a_mean_per_teardown_and_switches_a_sum_per_window(budget_unit):
    """Two teardowns of 4 ms between two windows cost 4 ms a window, not 8 (each window
    has one); the switches between two windows add up (7 + 3 ms)."""
    script = "tails 1\nstall 7000000 switch\nstall 3000000 switch\nstall 4000000 teardown\n"
    script += f"stall 4000000 teardown\nwindow {100 * MS} 90000 0.001 100000 {100 * MS}\nplan next\n"
    assert plans(budget_unit, script)[-1]["slot_ns"] == 140 * MS  # 10 x (10 + 4) ms


def test_the_count_phase_is_priced_by_the_tails_median(budget_unit):
    """No tail: the callbacks cost nothing measured (the count phase reads low by
    their cost, as budget.cpp says). Fewer than 3 tails: their median, at most
    300 ns a launch (one tail of a wandering job can read anything). From 3 on: the
    median of the last 15, whole; the count phase's slowdown at most 0.5."""
    rate = 100.0  # launches a ms (100 000 a second)
    head = "tails 1\n" + window(6, 4, 0.1, rate)

    def after(*tails: float) -> dict:
        return plans(budget_unit, head + "".join(f"tail {t}\n" for t in tails) + "plan next\n")[-1]

    assert after()["cb_ns"] == 0 and after()["bias"] == 0
    assert after(2721.0)["cb_ns"] == CB_NS and after(120.0)["cb_ns"] == 120.0
    assert after(2721.0, 2500.0, 3000.0)["cb_ns"] == 2721.0
    assert after(2721.0, 2500.0, 3000.0)["bias"] == pytest.approx(2721.0 * rate / MS)
    # the last 15 of 20 (8 of 5 000, 7 of 400): 5 000; the last 10 or all 20 would read 400
    assert after(*[100.0] * 5, *[5000.0] * 8, *[400.0] * 7)["cb_ns"] == 5000.0
    assert after(-50.0, -20.0, -10.0)["cb_ns"] == 0  # a negative median: nothing
    assert after(900_000.0, 900_000.0, 900_000.0)["bias"] == 0.5


# ---- weights.cpp ----

WQ = 1024  # GA_WQ: weights in fixed point


def weigh(exe: Path, script: str) -> tuple[list, list[float], str, list[tuple[float, int]]]:
    """weights_unit's output: the published weights that carry records, each (period,
    weight, start_ms, end_ms) (a SHAPE line goes before each; a PUB without one is a
    window-less period's, for stragglers only), the UNTIL after each call, and the
    STATS line; and each UNTIL with the number of weights gone out by then."""
    out = play(exe, script)
    pubs, until, shape = [], [], False
    for ln in out.splitlines():
        kv = {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.]+)", ln)}
        if ln.startswith("SHAPE"):
            shape = True
        elif ln.startswith("PUB"):
            if shape:
                pubs.append((int(kv["seq"]), kv["q"] / WQ, kv["start_ms"], kv["end_ms"]))
            shape = False
        elif ln.startswith("UNTIL"):
            until.append((kv["ms"], len(pubs)))  # and how many had gone out by then
    return pubs, [u for u, _ in until], out.splitlines()[-1], until


def periods(counts: list[tuple[int, int]], length_ms: int = 1000, exit_ms: float | None = None) -> str:
    """A script: period k (from 1) runs [k-1, k) x length_ms with counts[k-1] = (all, in)
    launches; an exit at exit_ms (default: the last period's end)."""
    lines = ["edge first 0"]
    for k, (n_all, n_in) in enumerate(counts, 1):
        lines.append(f"launch {n_all} {n_in}")
        if k < len(counts) or exit_ms is not None:
            lines.append(f"edge next {k * length_ms}")
    lines.append(f"exit {exit_ms if exit_ms is not None else len(counts) * length_ms}")
    return "\n".join(lines) + "\n"


def test_each_period_weighs_its_launches_by_its_window_s_with_the_span_they_were_made_in(weights_unit):
    """A period's records weigh its launches / its window's launches, published when
    the next period ends (that one could still join it), over the period's own span."""
    pubs, until, stats, _ = weigh(weights_unit, periods([(1000, 100), (3000, 150), (800, 80)]))
    assert pubs == [(1, 10.0, 0, 1000), (2, 20.0, 1000, 2000), (3, 10.0, 2000, 3000)], pubs
    assert until == [0, 0, 1000, 3000], until  # the first period's only once the second ended
    assert stats == "STATS unweighted=0 joined=0"


def test_a_period_whose_window_saw_none_joins_the_pending_one_and_its_span(weights_unit):
    """Launches of a period whose window saw none have no record to stand for them:
    they join the period before (its records stand for both), and its span grows to
    cover them; an idle period (no launch at all) ends the wait."""
    pubs, until, stats, _ = weigh(weights_unit, periods([(1000, 100), (500, 0), (700, 0), (0, 0), (900, 90)]))
    assert pubs == [(1, 22.0, 0, 4000), (5, 10.0, 4000, 5000)], pubs  # (and the idle period)
    assert until == [0, 0, 0, 0, 4000, 5000], until  # out at the idle period's end, not later
    assert stats == "STATS unweighted=0 joined=1200"


def test_launches_before_any_window_launch_go_to_the_first_window_s_period(weights_unit):
    """With no period before them to join, they are carried on to the next period whose
    window saw launches, whose span then starts where they did."""
    script = periods([(400, 0), (600, 0), (1000, 100)])
    pubs, until, _, _ = weigh(weights_unit, script)
    assert pubs == [(3, 20.0, 0, 3000)], pubs
    assert until[1] == 0  # nothing after the carried launches' start may be closed
    # and its shape knows which launches were made where: the carried ones before the
    # period, its own in it (spread by time over the whole span, a compile's few
    # launches before a torch.compile loop put 18 586 of the loop's in the interval
    # before it started, on an H200)
    shapes = [ln for ln in play(weights_unit, script).splitlines() if ln.startswith("SHAPE")]
    assert shapes == [
        "SHAPE start_ms=0.000 end_ms=3000.000 own_start_ms=2000.000 own_end_ms=3000.000 before=1000 own=1000 all=2000"
    ], shapes


def test_an_exit_mid_period_gives_its_launches_to_the_pending_one(weights_unit):
    """At a detach or exit the partial period's window has often not opened: its
    launches join the pending period, whose span ends at the exit."""
    pubs, until, _, _ = weigh(weights_unit, periods([(1000, 100), (300, 0)], exit_ms=1400))
    assert pubs == [(1, 13.0, 0, 1400)], pubs
    assert until[-1] == 1400


def test_a_split_gives_the_part_before_a_change_to_the_pending_period(weights_unit):
    """window.cpp found the launch mix changed at 1 500 ms, inside period 2 (1 000-2 000)
    whose window saw the new side: about 600 launches before it go to period 1, whose
    window saw the old side, and the spans part there."""
    script = "edge first 0\nlaunch 1000 100\nedge next 1000\nlaunch 1000 100\nsplit 1500 600\n"
    script += "edge next 2000\nlaunch 1000 100\nexit 3000\n"
    pubs, _, _, _ = weigh(weights_unit, script)
    assert pubs == [(1, 16.0, 0, 1500), (2, 4.0, 1500, 2000), (3, 10.0, 2000, 3000)], pubs


def test_a_hand_on_gives_the_part_after_a_change_to_the_next_window(weights_unit):
    """The change at 1 600 ms came after period 2's window (on the old side): about 300
    launches after it go on to the next period with windowed launches, whose span
    starts at the change."""
    script = "edge first 0\nlaunch 1000 100\nedge next 1000\nlaunch 1000 100\nhand 1600 300\n"
    script += "edge next 2000\nlaunch 1000 100\nexit 3000\n"
    pubs, _, _, _ = weigh(weights_unit, script)
    assert pubs == [(1, 10.0, 0, 1000), (2, 7.0, 1000, 1600), (3, 13.0, 1600, 3000)], pubs


def test_launches_handed_on_to_a_window_that_never_came_join_the_pending_period_at_the_exit(weights_unit):
    """A hand-on in period 2 (300 launches after 1 600 ms), then the exit at 2 400 ms
    before period 3's window: they join period 2, whose span runs to the exit: in its
    kernels rather than unweighed."""
    script = "edge first 0\nlaunch 1000 100\nedge next 1000\nlaunch 1000 100\nhand 1600 300\n"
    script += "edge next 2000\nlaunch 200 0\nexit 2400\n"
    pubs, _, stats, _ = weigh(weights_unit, script)
    assert pubs == [(1, 10.0, 0, 1000), (2, 12.0, 1000, 2400)], pubs
    assert "unweighted=0" in stats, stats


@pytest.mark.parametrize("seed", range(6))
def test_the_spans_never_overlap_and_the_weights_add_up_to_every_launch(weights_unit, seed):
    """Any run of periods (idle ones, window-less ones, in a row too), then an exit
    mid-period: the records' spans never overlap, every launch is in one of them, the
    weights times the windows' launches add up to the launches (less each weight's
    fixed-point rounding, under 1/1024 a record), and the agent is never told to close
    past a launch whose span has not gone out yet."""
    rng = random.Random(seed)
    counts = []
    for _ in range(40):
        kind = rng.random()
        n_all = 0 if kind < 0.1 else rng.randrange(1, 5000)
        n_in = 0 if kind < 0.3 else min(n_all, rng.randrange(1, 400))
        counts.append((n_all, n_in))
    counts[rng.randrange(5, 35)] = (0, 0)  # at least one idle period
    pubs, _, stats, until = weigh(weights_unit, periods(counts, exit_ms=40_500))
    assert "unweighted=0" in stats or counts[0][1] == 0, stats
    spans = sorted((p[2], p[3]) for p in pubs)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans  # no overlap
    made = {k: c for k, c in enumerate(counts, 1)}
    for k, (n_all, _) in made.items():  # every period with launches lies in a span
        lo, hi = (k - 1) * 1000, min(k * 1000, 40_500)
        assert n_all == 0 or any(a <= lo and hi <= b for a, b in spans), (k, made[k], spans)
    ins = {k: c[1] for k, c in made.items()}
    estimate = sum(w * ins[seq] for seq, w, _, _ in pubs)
    total = sum(c[0] for c in counts)
    assert total - sum(ins.values()) / WQ - 1 <= estimate <= total, (estimate, total)
    # what the agent may close (UNTIL) never passes the start of a span still to go out
    for t, gone in until:
        assert all(t <= p[2] for p in pubs[gone:]), (t, pubs[gone:][:3])
    assert until[-1][0] == 40_500


def test_a_record_after_its_launch_s_entry_was_reused_is_late_not_a_launch_no_callback_saw(weights_unit):
    """Each windowed launch notes its period by correlation id in a table of 65 536
    entries. A record that comes after a launch 65 536 ids later took its entry (a
    flush held back that long: 0.33 s of the mock's 200 000 launches/s) is late, and
    said apart on the exit line from one whose entry is older or empty (a launch no
    callback saw, which would mean the launch counts miss a path)."""
    tab = 1 << 16
    script = "\n".join(
        ["seq 3", "note 100", "note 101", "outside 102", "seq 7", f"note {100 + tab}"]
        + [f"record {c}" for c in (100, 101, 102, 103, 100 + tab)]
    )
    out = play(weights_unit, script + "\n")
    rec = {
        int(m["corr"]): (int(m["period"]), int(m["unseen"]), int(m["outside"]), int(m["late"]))
        for m in (dict(re.findall(r"(\w+)=(\d+)", ln)) for ln in out.splitlines() if ln.startswith("RECORD"))
    }
    assert rec == {
        100: (7, 1, 0, 1),  # its entry now holds 100 + 65 536: late, weighed in the current period
        101: (3, 0, 0, 0),  # noted, in time: its window's period
        102: (7, 1, 1, 0),  # at a window's edge: outside, not late
        103: (7, 1, 0, 0),  # never noted: unseen, not late
        100 + tab: (7, 0, 0, 0),
    }, out


# ---- tail.cpp ----


def tail(exe: Path, script: str) -> list[list]:
    """tail_unit's output lines, each as [op, {key: number}]."""
    out = play(exe, script)
    return [[ln.split()[0], {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.]+)", ln)}] for ln in out.splitlines()]


# A window opened at 1 ms (CUPTI time) counted 100 launches in 0.1 ms and closed at
# 21 ms; its tail ran 40 us (poller clock).
WINDOW = "open 1000000\nbegin 1000 100000 100 21000000\nend 41000\n"


def test_a_tails_records_read_before_its_windows_stay_the_tails(tail_unit):
    """Buffers can be handed over from two threads at once (the mock's worker and a
    flushing thread; CUPTI's callbacks come from both too), so the tail's records
    can be read before the window's. By count places alone (the first 100 of the cycle are the window's),
    its 30 would take the window's last 30 places: a CI suite's paced loop read 588
    of 97 034 launches with no record and as many records weighed with no launch
    (test_windows.py). A record no callback noted that started after the close is
    the tail's wherever it comes; the tail's records that carry a window launch's
    id (half of them on an H100) still go by places."""
    got = tail(tail_unit, WINDOW + "rec unseen 25000000 30\nrec seen 5000000 100\nrec seen 22000000 20\nfold\n")
    assert got == [
        ["REC", {"window": 0, "tail": 30}],
        ["REC", {"window": 100, "tail": 0}],
        ["REC", {"window": 0, "tail": 20}],
        ["NOTE", {"cb_ns": 200}],  # 1 000 ns a launch in the window, 800 in the tail
        ["STATS", {"tails": 1, "launches": 50}],
    ], got


def test_records_before_the_close_are_the_windows_and_a_late_tail_is_the_last_cycles(tail_unit):
    """A launch no callback saw inside the window (an internal launch) keeps its place;
    an earlier tail's record read after the next window opened is that tail's (it
    started before the opening), and takes none of the new window's places."""
    script = WINDOW + "rec unseen 20000000 5\nrec seen 5000000 95\nfold\nopen 30000000\nrec unseen 25000000 7\n"
    script += "begin 0 100000 100 50000000\nrec seen 40000000 100\nrec seen 51000000 1\n"
    got = tail(tail_unit, script)
    assert [g for g in got if g[0] == "REC"] == [
        ["REC", {"window": 5, "tail": 0}],
        ["REC", {"window": 95, "tail": 0}],
        ["REC", {"window": 0, "tail": 7}],
        ["REC", {"window": 100, "tail": 0}],
        ["REC", {"window": 0, "tail": 1}],
    ], got


def test_without_cuptis_clock_the_places_decide(tail_unit):
    """No cuptiGetTimestamp (an old CUPTI): no times to go by, so the first records of
    the cycle, as many as the window counted, are its own."""
    got = tail(tail_unit, "open 0\nbegin 0 100000 100 0\nrec unseen 25000000 30\nrec seen 5000000 100\n")
    assert got[:2] == [["REC", {"window": 30, "tail": 0}], ["REC", {"window": 70, "tail": 30}]], got


# ---- shape.cpp ----

KNOTS = 32  # GA_SHAPE_KNOTS: a shape is the share of the span's launches before each knot


def shapes(exe: Path, script: str) -> list[list[float] | None]:
    """shape_unit's output: each publish's shares at the knots, or None (by time)."""
    out = []
    for ln in play(exe, script).splitlines():
        out.append(None if ln == "NONE" else [float(x) for x in ln.split()[1:]])
    return out


def knot_ms(j: int, start: float, end: float) -> float:
    return start + (end - start) * (j + 1) / KNOTS


def test_a_span_that_carried_launches_begin_is_split_by_its_pieces(shape_unit):
    """On the clocks (no count gives a shape), a span that 10 launches carried from the
    compile's window-less periods begin, 2 s before its period's own 1 000: the 10 over
    their stretch, the 1 000 over theirs. By time the span put 18 586 of a torch.compile
    loop's launches in the interval before the loop (H200); a span with nothing carried
    still goes by time."""
    got = shapes(shape_unit, "measure none\npublish 0 3000 2000 3000 10 1000 1010\npublish 0 3000 0 3000 0 1000 1000\n")
    carried, plain = got
    assert plain is None
    for j in range(KNOTS - 1):
        t = knot_ms(j, 0, 3000)
        want = (10 * t / 2000 if t < 2000 else 10 + 1000 * (t - 2000) / 1000) / 1010
        assert carried[j] == pytest.approx(want, abs=1e-4), (j, carried)
    assert carried[-1] == 1.0


def test_the_period_s_own_piece_follows_its_count_where_the_counter_did_not_grow_in_it(shape_unit):
    """The counter grew at the period's start (a table found), so its hits are no shape
    of the whole span; inside the period's own stretch they are: 800 launches in its
    first half, 200 in its second, and the shares follow them, not the time."""
    script = (
        "measure hits\n"
        + "".join(
            f"sample {ms} 0 {hits} {ep}\n"
            for ms, hits, ep in [(0, 0, 1), (1000, 5, 1), (2000, 10, 2), (2500, 810, 2), (3000, 1010, 2)]
        )
        + "publish 0 3000 2000 3000 10 1000 1010\n"
    )
    (got,) = shapes(shape_unit, script)
    j = 24  # 2343.75 ms: 10 + 800 x 0.6875 of the hits in [2000, 2500]
    assert knot_ms(j, 0, 3000) == 2343.75
    assert got[j] == pytest.approx((10 + 550) / 1010, abs=1e-4), got
    # and the carried piece by time before it
    assert got[9] == pytest.approx(10 * knot_ms(9, 0, 3000) / 2000 / 1010, abs=1e-4), got


def test_a_count_that_shapes_the_whole_span_stands(shape_unit):
    """Where the count gives the whole span's shape (the launch callbacks, no
    teardowns), it stands, pieces or not: half the launches in the first second."""
    script = (
        "measure seq\n"
        + "".join(f"sample {ms} {seq} 0 1\n" for ms, seq in [(0, 0), (1000, 500), (2000, 510), (3000, 1010)])
        + "publish 0 3000 2000 3000 510 500 1010\n"
    )
    (got,) = shapes(shape_unit, script)
    j = 9  # 937.5 ms
    assert got[j] == pytest.approx(500 * knot_ms(j, 0, 3000) / 1000 / 1010, abs=1e-4), got


def ramp_with_a_growth(measure: str) -> str:
    """A span of 2.4 s that ramps up (a first generate: 10 launches a poll through
    function 0 until 1.5 s, then 400), with function 1 making a fifth as many through
    slots the counter gains at 0.9 s (cuBLAS's table, grown twice that way on an H200
    Llama's first period); the launches: function 0's and all of function 1's."""
    lines, f0, f1, seen1 = [f"measure {measure}\n"], 0.0, 0.0, 0.0
    for ms in range(0, 2500, 100):
        if ms:
            step = 10 if ms <= 1500 else 400
            f0, f1 = f0 + step, f1 + step / 4
            seen1 = seen1 + step / 4 if ms > 900 else 0
        epoch = 2 if ms >= 900 else 1
        lines.append(f"each {f0:.0f} {seen1:.0f}\n")
        if ms == 900:
            lines.append("grew 900 2\n")
        lines.append(f"sample {ms} 0 {f0 + seen1:.0f} {epoch}\n")
    return "".join(lines)


def ramp_truth(t: float) -> float:
    """ramp_with_a_growth's launches (function 0's and 1's) before t ms."""
    slow = min(t, 1500) / 100 * 10
    fast = max(0.0, t - 1500) / 100 * 400
    return (slow + fast) * 1.25


def test_a_span_whose_counter_grew_in_it_follows_its_hits_each_piece_scaled(shape_unit):
    """Hits before a growth are of a smaller coverage: the piece before it goes by its
    hits scaled by the share the functions that kept their slots held since (1.25 here),
    so the shares follow the launches; before, such a span went by time (its 1.5 s
    knot at 62.5 % where 4 % of its launches had been made), calibrated or waiting."""
    total = ramp_truth(2400)
    for measure in ("hits", "waiting"):
        (got,) = shapes(shape_unit, ramp_with_a_growth(measure) + f"publish 0 2400 0 2400 0 {total:.0f} {total:.0f}\n")
        assert got is not None, measure
        for j in range(KNOTS - 1):
            assert got[j] == pytest.approx(ramp_truth(knot_ms(j, 0, 2400)) / total, abs=2e-4), (measure, j, got)
    # the knot at 1 500 ms: 4 % made, by time 62.5 %
    assert ramp_truth(1500) / total == pytest.approx(0.04, abs=0.001)


def test_waiting_hits_shape_a_span_only_where_they_are_most_of_its_launches(shape_unit):
    """Before the counter's first calibration nothing says what share of the launches
    it sees: its hits shape a span only where they are at least half of its launches
    (here 3 times fewer: by time), and a growth whose functions took nearly all the
    hits since leaves no scale for the piece before it (by time, calibrated too)."""
    total = ramp_truth(2400)
    script = ramp_with_a_growth("waiting") + f"publish 0 2400 0 2400 0 {3 * total:.0f} {3 * total:.0f}\n"
    assert shapes(shape_unit, script) == [None]
    # function 0 stops at the growth: 0 hits of it since, so no scale for before
    script = "measure hits\neach 0 0\nsample 0 0 0 1\neach 100 0\nsample 500 0 100 1\n"
    script += "each 100 0\ngrew 900 2\nsample 900 0 100 2\neach 100 900\nsample 2400 0 1000 2\n"
    assert shapes(shape_unit, script + "publish 0 2400 0 2400 0 1000 1000\n") == [None]
