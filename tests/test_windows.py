"""Duty-cycled collection windows (shim/src/window.cpp), end to end.

The shim collects in one GPU_AGENT_WINDOW_MS slot of every GPU_AGENT_DUTY_CYCLE
(N), and weights each windowed record by its period's launches / windowed launches
(about N): counted by launch callbacks that stay on (GPU_AGENT_TEARDOWN=0, the
tests marked COUNTED), or, by default, extrapolated from the count phase before
each window, CUPTI being torn down between windows. These tests run a
paced mock workload through the real shim, real eBPF and Go pprof, under one
`gpu-agent run` shared by the module (tests/support/shared_agent.py), each
workload injected as `gpu-agent record --duty-cycle N` injects it and read back
by its pid from the interval profiles (the tests of `record` itself run it):
- in audit mode the shim also sees the full trace of the same run, which must
  equal the mock's ground truth, and the estimate must land on it;
- without audit, kernel activity must really be off outside windows (about 1/N
  of the launches are collected) while the estimate stays on the truth;
- when a window slows the launches made in it (as CUPTI activity does on a real
  GPU), weighting by N would run low; the launch-count ratio must not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support.env import BENCH_SHIM, MOCK_APP, REPO, SHIM, agent_cmd, ground_truth, mock_env, need_ebpf
from support.env import shim_without_cbid
from support.pprof_tool import raw
from support.shared_agent import shared_agents
from support.windows import KERNEL, kernel_totals, launches_between, read_trace, shim_exit_stats
from support import measures

from gpu_agent.probes.audit import audit_rows

COUNTED = {"GPU_AGENT_TEARDOWN": "0"}
N = 5
# 3 s, 30 periods of 5 x 20 ms slots; launched in blocks of 1000 every 5 ms, so
# that each window holds several blocks (coarser blocks make the estimate noisy).
LAUNCHES, RATE = 600_000, 200_000
# each window's open span, as the shim timed it (GPU_AGENT_DEBUG=2)
WINDOW_LINE = re.compile(r"window \(pid \d+\): open from ([\d.]+) to ([\d.]+) s")


@pytest.fixture(scope="module")
def agents(tmp_path_factory, built):
    yield from shared_agents(tmp_path_factory)


def run_windowed(agents, tmp_path, *mock_args, shim=None, launches=LAUNCHES, rate=RATE, **env):
    """The mock's bench loop in windows of one slot in N, under the module's agent of
    `shim`: its kernel totals (its pid's samples, every interval), the truth, and its
    stderr (the shim's lines, GPU_AGENT_DEBUG=1)."""
    gt = tmp_path / "truth.tsv"
    agent = agents(shim or SHIM)
    e = agent.env(gt, duty_cycle=N, GPU_AGENT_WINDOW_MS="20", **{"GPU_AGENT_DEBUG": "1", **env})
    w = agent.run([MOCK_APP, "--bench", launches, "--rate", rate, *mock_args], e, timeout=120)
    assert w.returncode == 0, w.stderr
    # Every kernel sample says its numbers are estimates, but where an interval's rows
    # of the process all weigh 1 (collector.py: then its numbers are exact): a window
    # that held its whole period's launches, as a late poller on a loaded host makes.
    # Beside two CPU burners 2 of 16 runs had such a sample (one: 545 of 600 000 launches).
    kernel = [s for s in w.samples if s.files and s.files[0] == "CUDA_KERNEL"]
    exact = [(s.frames[:2], s.values) for s in kernel if s.labels.get("gpu_time_estimated") != "true"]
    assert sum(v[1] for _, v in exact) <= sum(s.values[1] for s in kernel) // 20, (exact, w.stderr[-2000:])
    return w.kernel_totals(), ground_truth(gt), w.stderr


def exit_lines(err: str) -> str:
    """The shim's exit lines, for an assertion's message."""
    return "\n".join(ln for ln in err.splitlines() if "exit (pid" in ln or "windows (pid" in ln)


def test_audit_estimate_lands_on_the_full_trace_of_the_same_run(agents, tmp_path):
    need_ebpf()
    audit = tmp_path / "audit.tsv"
    prof, truth, err = run_windowed(agents, tmp_path, shim=BENCH_SHIM, GPU_AGENT_AUDIT_FILE=str(audit))
    rows = audit_rows(audit)
    # The audit is the full trace of this run: it matches the mock driver exactly.
    assert {k: (v[0], v[1]) for k, v in rows.items()} == truth
    launches, ns, win_launches, win_ns = rows[KERNEL]
    # One slot in N: about 1/N of a steady workload falls in windows.
    assert 0.6 / N < win_launches / launches < 1.4 / N, (win_launches, launches)
    # Each record stands for all launches / windowed launches: the estimate lands
    # on the full trace. (The share of launches that fall in windows varies from
    # run to run, by up to ~7 % under a loaded CI machine; the count ratio
    # follows it, so the launches land within a few tenths of a percent.)
    est_ns, est_launches = prof[KERNEL]
    assert abs(est_launches / launches - 1) < 0.03, (est_launches, launches)
    assert abs(est_ns / ns - 1) < 0.05, (est_ns, ns)
    # Each windowed record weighs the count ratio, all launches over the windowed ones
    # (the estimate above lands on the truth): N where 1/N of the launches fall in
    # windows, as bounded above. A two-worker suite read 16.3 % in windows, 6.12 a
    # record (against a bound of 1.2 x N, narrower than the share's then).
    assert N / 1.4 < est_launches / win_launches < N / 0.6, (est_launches, win_launches)


def test_exp_toggle_alternates_attached_and_detached(agents, tmp_path):
    """GPU_AGENT_EXP_TOGGLE_MS=ON:OFF (the in-process A/B of earlier benchmarks): under
    one agent the shim attaches for ON ms, then detaches for OFF ms, over and over,
    and while detached it collects nothing (its records stop with its launches seen)."""
    need_ebpf()
    _, _, err = run_windowed(
        agents, tmp_path, shim=BENCH_SHIM, GPU_AGENT_EXP_TOGGLE_MS="200:400", GPU_AGENT_POLL_MS="10", **COUNTED
    )
    attaches = len(re.findall(r"gpu-agent-shim: attached \(", err))
    detaches = len(re.findall(r"gpu-agent-shim: detached \(pid \d+\): agent gone", err))
    # 3 s of 600 ms cycles: about 5 of each (the first attach waits for CUDA to start).
    assert 3 <= attaches <= 7 and attaches - 1 <= detaches <= attaches, err[-2000:]
    m = re.search(r"(\d+) launches seen while attached", err)
    # Attached a third of the time, less each attach's start: 9 runs saw 14.5 % (in a
    # full suite) to 20 % of the launches (8 of them beside two CPU burners). Never
    # detached, it would see them all: the upper bound is what this checks.
    assert m and LAUNCHES * 0.05 < int(m.group(1)) < LAUNCHES * 0.55, err[-2000:]


def test_launches_no_callback_sees_are_counted_and_weigh_n(agents, tmp_path):
    """A launch path that fires no launch callback (here: a shim built without
    cuLaunchKernel's, the mock bench's path) still has its kernels traced in
    windows. The shim says how many such records it weighed (exit line, counter
    27) and names their kernels, and with no launch counted at all the weights
    fall back to N: the estimate is N x the windowed records, on the truth for
    this steady loop."""
    need_ebpf()
    variant = shim_without_cbid(tmp_path / "libgpu_agent_shim.so", bench=True)
    prof, truth, err = run_windowed(agents, tmp_path, shim=variant, GPU_AGENT_EXP_INTERNAL_LAUNCHES="1", **COUNTED)
    st = shim_exit_stats(err)
    # The bench-only count of CUPTI's INTERNAL_LAUNCH_API records (launches made
    # outside any public API call) ran; the mock makes none: here the unseen
    # launches are public ones whose callback was left out.
    assert re.search(r"internal launches \(pid \d+\): 0 INTERNAL_LAUNCH_API records", err), err[-2000:]
    assert st["launches"] == 0 and st["records"] > 0, st
    assert st["unseen"] == st["records"], st
    # ...and names the kernels whose launches it did not see: the bench's kernel,
    # and the warm-up launch's if a window was open at the start.
    named = dict(
        (k, int(n))
        for k, n in re.findall(
            r"(\S+) \((\d+)\)", re.search(r"unseen launches \(pid \d+\), first kernels: (.*)", err).group(1)
        )
    )
    assert set(named) <= {KERNEL, "_Z18k_cudaLaunchKernelPfi"} and sum(named.values()) == st["records"], named
    est_launches = prof[KERNEL][1]
    assert est_launches == N * named[KERNEL], (est_launches, named)
    # How close N x the windowed records comes to the truth is the windows' share of
    # the launches, which the host's load moves (the weights' count corrects for it
    # where there is one): 8 runs beside two CPU burners read -7.5 to 0 % (the windows'
    # share of the time, N x 0.957-0.989), and a two-worker suite -17.2 % once (against
    # 15 % then). Weights that did not fall back to N would read -80 % (1 each) or more.
    assert abs(est_launches / truth[KERNEL][0] - 1) < 0.25, (est_launches, truth[KERNEL])


def test_outside_windows_nothing_is_collected_and_the_estimate_is_right(agents, tmp_path):
    need_ebpf()
    # Blocks of 250 launches: a 20 ms count phase met 3-5 of the default 5 ms blocks
    # of 1 000, and the estimate wandered by up to 9 % on this 2-core VM (with 250,
    # within 1.4 % in 6 runs). No finalize stall: this paced loop catches up after
    # each teardown's stall on its thread (2 ms a period by default), which the
    # estimate counts as launch-free (docs/estimator.md): 8 runs read -0.8 to -2.1 %
    # with it, -1.2 to +0.6 % without.
    trace_file = tmp_path / "launches.txt"
    prof, truth, err = run_windowed(
        agents,
        tmp_path,
        "--block",
        "250",
        MOCK_CUPTI_FINALIZE_US="0",
        GPU_AGENT_DEBUG="2",  # each window's open span (window.cpp)
        MOCK_LAUNCH_TRACE=str(trace_file),
        MOCK_LAUNCH_TRACE_EVERY="50",
    )
    st = shim_exit_stats(err)
    true_launches = truth[KERNEL][0]
    # Activity was off outside windows: the records collected are the launches the loop
    # made while they were open, by its own log (a line every 50 launches) and the
    # shim's clock (21 runs, 18 beside two CPU burners: -0.19 to +0.28 %; were activity
    # on between windows, about N times). Set against the share of time open instead,
    # they read 0.98-1.016 of it beside the burners and 1.22 once in a three-worker
    # suite (a loop whose pacing caught up inside windows). The share open is about
    # 1/N; one full suite read 11.9 % with 23 windows (a poller that sleeps past a
    # window's slot skips it).
    trace = read_trace(trace_file)
    spans = [(float(a), float(b)) for a, b in WINDOW_LINE.findall(err)]
    made = sum(launches_between(trace, a, b) for a, b in spans)
    assert len(spans) == st["windows"] >= 10, (spans, st)
    assert abs(st["launches"] / made - 1) < 0.01, (st, made, len(spans))
    assert abs(st["records"] / made - 1) < 0.01, (st, made, len(spans))
    opened = float(re.search(r"windows \(pid \d+\): open ([\d.]+) %", err)[1]) / 100
    assert 0.3 / N < opened < 1.4 / N, (st, opened)
    # Every windowed record's launch was counted, but for the few launched at a
    # window's edges (activity goes on before the window opens and off after it
    # closes): the records no counted launch stands for. (3 of 119 044 here.) And a
    # launch counted just before a window closed can lose its record when the
    # activity goes off between its callback and its kernel (1 of 117 607, on a
    # machine busy with a second agent). Both stay rare: 292 of 101 500 (0.29 %) once in
    # a full suite on this 2-core VM (the shared agent; the poller preempted at an edge),
    # else 0-3; the bound, 0.5 %, is far under what a broken edge rule lets in (+67 %).
    # A tail's records read in another cycle's count places pushed that window's last
    # ones out (tail.cpp): unseen and lost alike, over 1 % (up to 1 196) in 5 of 48 runs
    # three at once beside a CPU burner, once in a three-worker suite, and 588 of
    # 97 034 in a CI suite (a tail's buffer read before its window's). And launches
    # made while a preempted poller closed a window were noted but not counted in it
    # (window.cpp): lost 20-251 in 9 of 45 such runs. Both kept apart now (by start
    # times; the edge before the count): 48 such runs read lost 0-4 and unseen 0-11.
    lost = st["launches"] - (st["records"] - st["unseen"])
    assert 0 <= lost <= st["records"] // 200 and st["unseen"] <= st["records"] // 100, st
    est_ns, est_launches = prof[KERNEL]
    assert abs(est_launches / true_launches - 1) < 0.03, (est_launches, true_launches)
    assert abs(est_ns / truth[KERNEL][1] - 1) < 0.05


def test_graph_kernels_keep_their_gpu_time_under_windows(agents, tmp_path):
    """On an H200, CUPTI gives the nodes of a window's LAST replay of a graph exec
    the end times of later, untraced replays of that exec: 30-130x too much GPU
    time for graph kernels at the defaults, with launch counts right
    (docs/cupti-graph-windows.md). The mock models it (the default;
    MOCK_CUPTI_GRAPH_END_FAULT=0 is the clean driver). The shim leaves out each
    exec's last windowed launch and its records, so both GPU ns and launches land
    on the truth. Without that rule this run reads about +1000 % GPU time."""
    need_ebpf()
    prof, truth, err = run_windowed(agents, tmp_path, "--api", "cuGraphLaunch", launches=150_000, rate=50_000)
    nodes = [k for k in truth if "cuGraphLaunch_node" in k]
    assert len(nodes) == 3, truth
    left_out = re.search(r"(\d+) graph launches left out \((\d+) records, (\d+) of them late\)", err)
    assert left_out, err[-2000:]
    windows = shim_exit_stats(err)["windows"]
    launches_out, records_out = int(left_out.group(1)), int(left_out.group(2))
    # About one replay per window, its window's last traced one (none in a window
    # the loop's pauses left empty), three records each; two when the GPU runs behind
    # the host (the mock's launch queue is full here, as a real one would be) and a
    # later node of the last replay has no record yet when its window is settled: the
    # replay before it is then some node's newest. Records of replays traced after a
    # window's flag went off (the closing edge) are dropped too.
    assert windows // 2 <= launches_out <= 2 * windows + 1, (left_out.groups(), windows)
    assert records_out >= 3 * launches_out - 6, left_out.groups()
    for k in nodes:
        est_ns, est_launches = prof[k]
        true_launches, true_ns = truth[k]
        assert abs(est_launches / true_launches - 1) < 0.03, (k, est_launches, true_launches)
        assert abs(est_ns / true_ns - 1) < 0.03, (k, est_ns, true_ns)


@pytest.mark.parametrize("callback_ns", [0, 3000])
def test_windows_that_slow_launches_do_not_bias_the_estimate(agents, tmp_path, callback_ns):
    """On an H200 a launch-bound loop launches more slowly inside windows, so
    weighting windowed records by N ran 7-17 % low. The mock models that
    (MOCK_CUPTI_ACTIVITY_LAUNCH_NS: CPU per launch while kernel activity is on) on
    a closed loop (4 us of CPU work after each launch, as a training step's Python
    does): N x the windowed launches must be well short of the truth, and the
    estimate (each period's launches: those the callbacks saw, plus the rest of
    the period at the rate of the count phase before the window) must still land
    on it.

    The count phase's own launch callbacks slow the loop too, by what CUPTI's
    dispatch costs a launch (MOCK_CUPTI_CALLBACK_NS; 0.1-0.4 us on an H100) and
    the shim's callback. The shim measures that cost in each window's tail
    (shim/src/tail.cpp) and takes it out. A fixed share of the window's slowdown
    (the shim before, budget.cpp's K_CB) read this loop +30 % with the dispatch
    free and -24 % at 3 us; measured, they land (+7 % at most with the dispatch
    free on this 2-core VM, where the agent's work after each window slows the
    loop between windows more than in the count phase before the next)."""
    need_ebpf()
    prof, truth, err = run_windowed(
        agents,
        tmp_path,
        "--spin-ns",
        "4000",
        rate=0,
        MOCK_CUPTI_ACTIVITY_LAUNCH_NS="8000",
        MOCK_CUPTI_CALLBACK_NS=str(callback_ns),
    )
    true_launches = truth[KERNEL][0]
    windowed = shim_exit_stats(err)["launches"]
    assert N * windowed < 0.75 * true_launches, (windowed, true_launches)  # the bias is there
    m = re.search(r"(\d+) tails \((\d+) launches\), launch callbacks (-?\d+) ns a launch", err)
    assert m, err[-2000:]
    tails, cb_ns = int(m.group(1)), int(m.group(3))
    assert tails >= 10, m.group(0)
    # the dispatch's cost plus the shim's callback (50-200 ns here)
    assert callback_ns - 300 < cb_ns < 1.2 * callback_ns + 500, m.group(0)
    est_launches = prof[KERNEL][1]
    assert abs(est_launches / true_launches - 1) < (0.12 if callback_ns == 0 else 0.09), (est_launches, true_launches)


def test_a_job_whose_launch_rate_changes_is_weighed_period_by_period(agents, tmp_path):
    """A job changes pace: a slow start (40 000 launches at 20 000/s, which windows
    do not slow) and then a fast loop (200 000/s, which they do). Weights drawn
    from the counts so far carry the start's ratio into the fast loop: on this
    run they read -5.5 % to +2.1 % (counts over past periods) and -0.6 % to
    +0.4 % (rates since attach). Each period's records weighed by that period's
    own launches / windowed launches land within a few hundredths of a percent."""
    need_ebpf()
    prof, truth, err = run_windowed(
        agents, tmp_path, "--warm", "40000", "--warm-rate", "20000", MOCK_CUPTI_ACTIVITY_LAUNCH_NS="8000", **COUNTED
    )
    true_launches = truth[KERNEL][0]
    assert int(re.search(r"(\d+) after the last window", err).group(1)) == 0, err[-2000:]
    est_launches = prof[KERNEL][1]
    assert abs(est_launches / true_launches - 1) < 0.005, (est_launches, true_launches, exit_lines(err))


def test_records_completing_periods_after_their_launch_keep_their_periods_weight(agents, tmp_path):
    """On a GPU-bound device a window's records complete tens of ms after its launches,
    often after its period ended (a torch graph replay on an H200). Each record must
    weigh its own launch's period: with gaps in the launching, a window that falls
    in a gap holds few launches and so weighs a lot, and the previous window's late
    records must not take that weight.
    Mock: records available 150 ms (1.5 periods) after their launch, 40 ms
    without launches after every 60 ms. The per-period rule reads within 0.04 %;
    weighing each record by the period it completes in read -5 % to +21 %."""
    need_ebpf()
    prof, truth, err = run_windowed(
        agents, tmp_path, "--gap-ms", "40", "--gap-every-ms", "60", MOCK_CUPTI_RECORD_LAG_MS="150", **COUNTED
    )
    est_launches = prof[KERNEL][1]
    true_launches = truth[KERNEL][0]
    # Launches after the last window that no pending period takes (the exit's partial
    # period, its window not open yet, after a period with no launch at all, which
    # publishes the pending one: a loop starved a whole period) have no record to
    # stand for them; the shim counts them apart. None alone; a three-worker suite
    # read 10 009 of 600 001 (its periods a quarter window-less). The records' weights
    # are judged on the rest.
    unweighted = int(re.search(r"(\d+) after the last window", err).group(1))
    measures.note(whole=est_launches / (true_launches - unweighted) - 1, unweighted=unweighted / true_launches)
    assert unweighted <= true_launches // 20, exit_lines(err)
    assert abs(est_launches / (true_launches - unweighted) - 1) < 0.005, (est_launches, true_launches, exit_lines(err))


@pytest.mark.parametrize("counted", [True, False], ids=["counted", "torn-down"])
def test_launches_at_a_window_edge_are_not_the_windows(agents, tmp_path, counted):
    """Kernel activity goes on before a window opens and off after it closes; the
    launches in between are traced but are not the window's, and their period
    counted them already. A poller preempted at an edge on a loaded host let 103 of
    them in, weighed as the window's: +1.3 % (CI: -1.9 %, cause not seen).
    Mock: every activity switch stalls 5 ms with activity on (a quarter of each
    window's length at each edge): weighed, they read +67 % (counted weights)."""
    need_ebpf()
    env = dict(COUNTED) if counted else {}
    torn = {} if counted else {"MOCK_CUPTI_FINALIZE_US": "0"}  # as in the test above
    prof, truth, err = run_windowed(
        agents, tmp_path, *(() if counted else ("--block", "250")), MOCK_CUPTI_SWITCH_US="5000", **torn, **env
    )
    outside = int(re.search(r"(\d+) records of launches outside windows", err).group(1))
    st = shim_exit_stats(err)
    if os.environ.get("DBG"):
        print(
            "EDGE counted=%s outside %d windows %d unseen %d late %d records %d"
            % (counted, outside, st["windows"], st["unseen"], st["late"], st["records"])
        )
    # Both edges of every window let launches in: dropped, counted, not unseen. Were
    # the edges not told apart, those 35-40 % of the records would be unseen; what is
    # unseen besides comes in lumps of whole blocks: torn down, 12 runs beside two CPU
    # burners 0-3.25 % of the records (0 in 3 runs, 0.2-1.5 % in 7, 3.1 and 3.25 %), 5.1 % once in a
    # two-worker suite (against records // 20 then); most of them a tail's records
    # delivered late (tail.cpp keeps those apart now: 12 runs beside two others and a
    # CPU burner read 0-1.1 %, 24 before 0-4.3 %).
    assert outside > st["windows"] * 100, (outside, st)
    assert st["unseen"] <= st["records"] // 10, st
    est_launches, true_launches = prof[KERNEL][1], truth[KERNEL][0]
    # (torn down, the count phase's rate, stalled 5 ms at each switch, wanders more:
    # -3.7 % once under a full suite on this 2-core VM)
    assert abs(est_launches / true_launches - 1) < (0.005 if counted else 0.05), (
        est_launches,
        true_launches,
        err[-1500:],
    )


def short_run(agents, tmp_path, i: int, launches: int) -> tuple[int, int, int, int, str]:
    """One short paced run against 1 s periods (N = 50): true launches, estimated
    launches, launches after the last window and launches joined to the window
    before them (the shim's exit line), and its stderr."""
    gt = tmp_path / f"truth{i}.tsv"
    agent = agents()
    e = agent.env(gt, duty_cycle=50, GPU_AGENT_WINDOW_MS="20", GPU_AGENT_DEBUG="1", **COUNTED)
    w = agent.run([MOCK_APP, "--bench", launches, "--rate", RATE], e, timeout=120)
    assert w.returncode == 0, w.stderr
    m = re.search(r"(\d+) after the last window, .* (\d+) launches joined to the window before them", w.stderr)
    assert m, w.stderr[-2000:]
    est_launches = w.kernel_totals().get(KERNEL, [0, 0])[1]
    return ground_truth(gt)[KERNEL][0], est_launches, int(m.group(1)), int(m.group(2)), w.stderr


def test_the_last_periods_launches_join_the_window_before_them(agents, tmp_path):
    """A process that exits (or an agent that leaves) before the window of its
    last period opens: that partial period's launches have no record of their
    own, and are weighed with the period before it (whose records wait one period
    for this). Runs of 1.05 s against 1 s periods (N = 50): the second period's
    window has opened at the exit in only about 1 run in 20, so its 5 % of the
    launches are joined. Before this rule they were dropped: -3.1 % on a 4 s
    eager run on an H200; here the estimate
    alone lands on the truth."""
    need_ebpf()
    joined_runs = 0
    for i in range(6):
        true_launches, est_launches, after_last, joined, err = short_run(agents, tmp_path, i, 210_000)
        if after_last:  # the first window caught no launch: nothing to join (counted, next test)
            continue
        # One window's few blocks stand for a whole period here: a 1 % bound. 15 runs
        # three at once beside a CPU burner joined 10 000-12 000 and read -0.05 to
        # +0.02 %; a three-worker suite read -2.6 % once, with 147 642 joined (its loop
        # starved in the first period, then caught up): not explained yet, so a failure
        # says the shim's lines.
        assert abs(est_launches / true_launches - 1) < 0.01, (est_launches, joined, true_launches, exit_lines(err))
        if joined:
            assert joined > true_launches // 50, (joined, true_launches)  # the tail really was joined
            joined_runs += 1
            break
    assert joined_runs == 1


def test_launches_before_any_window_are_counted(agents, tmp_path):
    """A process that exits (or an agent that leaves) before its first window
    leaves its launches with no record to stand for them. The shim counts them
    (counter 25, and the exit line), so that estimate + that count is the truth.
    Runs of 0.15 s against 1 s periods (N = 50) end before their first window in
    about 85 % of runs."""
    need_ebpf()
    # Processes one after another under the shared agent: four at least, and on until
    # one has ended before its first window (a loaded two-worker run once had all four
    # reach a window, which its slower loops do more often): 16 at most, all of them
    # reaching a window less than 1 in 10 000 times even were each to do so half the
    # time (0.5 ** 16 = 1.5e-5).
    agent = agents()
    runs, gts, before = [], [], 0
    while len(runs) < 4 or (not before and len(runs) < 16):
        gts.append(tmp_path / f"truth{len(runs)}.tsv")
        e = agent.env(gts[-1], duty_cycle=50, GPU_AGENT_WINDOW_MS="20", GPU_AGENT_DEBUG="1", **COUNTED)
        runs.append(agent.wait(agent.spawn([MOCK_APP, "--bench", "30000", "--rate", RATE], e)))
        assert runs[-1].returncode == 0, runs[-1].stderr
        m = re.search(r"exit \(pid \d+\):.* (\d+) after the last window, ", runs[-1].stderr)
        before += bool(m and int(m.group(1)) > 0)
    agent.collect(*runs)
    err = "".join(w.stderr for w in runs)
    after = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"exit \(pid (\d+)\):.* (\d+) after the last window, ", err)
    }
    est: dict[str, int] = {}
    for s in (s for w in runs for s in w.samples):
        if s.files and s.files[0] == "CUDA_KERNEL" and (s.system_names[0] or s.frames[0]) == KERNEL:
            est[s.labels["pid"]] = est.get(s.labels["pid"], 0) + s.values[1]
    assert len(after) == len(runs), err[-2000:]
    truth = sorted(ground_truth(gt)[KERNEL][0] for gt in gts)
    assert truth == [30_000] * len(runs), truth
    for pid, after_last in after.items():
        assert abs((est.get(pid, 0) + after_last) / 30_000 - 1) < 0.01, (pid, est, after)
    assert sum(a > 0 for a in after.values()) >= 1, after


def test_record_defaults_to_continuous_exact_collection(tmp_path, built):
    need_ebpf()
    gt = tmp_path / "truth.tsv"
    out = tmp_path / "x.pb.gz"
    env = mock_env(gt)
    del env["GPU_AGENT_DUTY_CYCLE"]  # the shim's own default is 10; record asks for 1
    p = subprocess.run(
        agent_cmd("record", "-o", out, "--", MOCK_APP, "--bench", "20000"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    totals = kernel_totals(out)
    assert KERNEL in totals, (totals, p.stderr)
    ns, launches = totals[KERNEL]
    assert (launches, ns) == ground_truth(gt)[KERNEL]
    assert not any("gpu_time_estimated" in s.labels for s in raw(out))


def test_bad_duty_cycle_is_one_clear_line(tmp_path, built):
    p = subprocess.run(
        agent_cmd("record", "--duty-cycle", "0", "-o", tmp_path / "x", "--", "true"),
        env=mock_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "--duty-cycle" in p.stderr


def test_reused_correlation_ids_do_not_join_stale_samples(tmp_path, built):
    """On an H200, under windows, 25x too many records joined a sampled launch:
    correlation ids evidently repeat across windows. The mock models that
    (MOCK_CUPTI_CORR_RESTART: the counter restarts whenever kernel activity is
    enabled); the join guard
    (ga_kernel_record.join_max_lag_us) must keep joins at one per sampled launch
    (without it: ~12x here) and the 3:1 split of tests/py_sites.py right."""
    need_ebpf()
    out = tmp_path / "s.pb.gz"
    env = mock_env(MOCK_CUPTI_CORR_RESTART="1", GPU_AGENT_WINDOW_MS="20", GPU_AGENT_DEBUG="1")
    p = subprocess.run(
        agent_cmd(
            "record", "--duty-cycle", str(N), "-o", out, "--", sys.executable, REPO / "tests" / "py_sites.py", "3"
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    collected = shim_exit_stats(p.stderr)["launches"]
    joined = int(re.search(r"samples=(\d+)", p.stderr).group(1))  # records joined to a sample
    assert 0.7 * collected / 64 < joined < 1.3 * collected / 64, (joined, collected)
    share = {"site_a": 0, "site_b": 0}
    for s in raw(out):
        for site in share:
            if site in s.frames:
                share[site] += s.values[0]
    total = sum(share.values())
    assert total and abs(share["site_a"] / total - 0.75) < 0.05, share
